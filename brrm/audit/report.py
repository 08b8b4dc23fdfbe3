"""The HTML report: one self-contained file (inline CSS, plots as data URIs, no script, no network).

Rendered by Jinja2 with autoescaping on (``report.html.j2``, package data): every piece of record text — a
prompt, a response, a slice value, a judge's analysis — is HTML-escaped and shown as text, never markup. A
Content-Security-Policy meta tag forbids scripts and remote loads as a second line of defence (``default-src
'none'``; images only from ``data:``). The report shows the figures of the JSON summary overall and per
slice, the plots (:mod:`brrm.audit.plots`), agreement with labels, a table of flagged items with both
responses, the chosen dimensions and both turns' texts, invalid input rows with their line numbers and
reasons, and the run's provenance.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.audit.plots import any_failure, plots_for, reliability_plot
from brrm.audit.summary import AuditRow, entries, number, part
from brrm.types import GroupResult, PairwiseJudgment, ScalarReward, Verdict
from brrm.types.jsonvalue import JSONValue
from brrm.types.usage import token_line

if TYPE_CHECKING:
    from brrm.audit.options import AuditOptions

REPORT_FILE = "report.html"
TEMPLATE = "report.html.j2"


PROBES_FILE = "probes.json"
"""Robustness probes of the folder (``brrm audit --probes``: a :class:`brrm.probes.ProbeReport` as JSON)."""


def write_report(summary: Mapping[str, JSONValue], rows: Sequence[AuditRow], directory: Path,
                 options: AuditOptions) -> Path:
    """Render the report of a run into ``directory/report.html`` (atomically: a temporary file renamed), with the
    folder's robustness probes (``probes.json``) when there are any."""
    probes_path = Path(directory) / PROBES_FILE
    probes = part(json.loads(probes_path.read_text(encoding="utf-8"))) if probes_path.is_file() else None
    html = render_report(summary, rows, max_flagged=options.max_flagged, probes=probes)
    path = Path(directory) / REPORT_FILE
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path


def render_report(summary: Mapping[str, JSONValue], rows: Sequence[AuditRow], *, max_flagged: int = 200,
                  probes: Mapping[str, JSONValue] | None = None) -> str:
    """The report's HTML text (with a robustness section when ``probes``, a ``ProbeReport.to_dict()``, is given)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("brrm.audit", "."), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["num"] = fmt_num
    env.filters["pct"] = fmt_pct
    env.filters["when"] = fmt_time
    flagged = [r for r in rows if r.flags]
    shape = str(part(summary["run"])["shape"])
    return env.get_template(TEMPLATE).render(
        s=summary, shape=shape, plots=plots_for(summary), calibration=reliability_plot(summary),
        overview=overview(part(summary["overall"]), shape) + findings(summary, shape),
        accuracy_note=accuracy_note(part(summary["overall"])) if shape == "pairs" else "",
        slices=[(col, data, slice_table(part(part(data)["values"]), shape))
                for col, data in part(summary["slices"]).items()],
        flagged=[flagged_view(r, shape) for r in flagged[:max_flagged]], flagged_total=len(flagged),
        invalid=[r for r in rows if r.status == "invalid_input"],
        probes=probes, probe_rows=probe_rows(probes) if probes else [],
        judge_json=json.dumps(summary["judge"], indent=1, ensure_ascii=False),
        provenance_json=json.dumps(summary["provenance"], indent=1, ensure_ascii=False))


def probe_rows(probes: Mapping[str, JSONValue]) -> list[list[str]]:
    """One table row per probe: name, what it does, flip rate [interval], pairs, failed, P(target) shift
    [interval], reward shift, share of flips toward the target, the most moved ids (``probes``: a
    :meth:`brrm.probes.ProbeReport.to_dict`)."""

    def ci(value: JSONValue) -> str:
        iv = part(value) if value else None
        if not iv or iv.get("value") is None:
            return "n/a"
        value, low, high = (0.0 if abs(x) < 5e-4 else x for x in (_bound(iv[k]) for k in ("value", "low", "high")))
        return f"{fmt_num(value)} [{fmt_num(low)}, {fmt_num(high)}]"  # no "-0.000" above

    rows = []
    for p in map(part, entries(probes["probes"])):
        moved = [part(m) for m in entries(p["most_moved"])]
        rows.append([str(p["probe"]), str(p["description"]), ci(p["flip_rate"]), str(part(p["flip_rate"])["n"]),
                     str(p["failed"]), ci(p["p_shift"]), ci(p.get("reward_shift")), fmt_num(p.get("toward_target"), 2),
                     ", ".join(f"{m['id']} ({m['original']}→{m['variant']})" for m in moved if m["flipped"])
                     or "none flipped"])
    return rows


def _bound(value: JSONValue) -> float:
    """An interval's value or bound (a number: the interval has items)."""
    x = number(value)
    if x is None:
        raise TypeError("an interval with a value has numeric bounds")
    return x


def fmt_num(x: object, digits: int = 3) -> str:
    """A number for a table cell; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def fmt_time(x: float | None) -> str:
    """A Unix time as ``YYYY-MM-DD HH:MM:SS UTC``; ``n/a`` for None."""
    import time

    return "n/a" if x is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(x))


def fmt_pct(x: JSONValue) -> str:
    """A rate as a percentage; ``n/a`` for None/NaN."""
    rate = number(x)
    return "n/a" if rate is None or math.isnan(rate) else f"{100 * rate:.1f}%"


def overview(f: Mapping[str, JSONValue], shape: str) -> list[tuple[str, str]]:
    """(figure, value) rows of the overview table (``f``: the summary's ``overall`` figures)."""
    rows = [("rows", str(f["rows"])), ("judged", str(f["judged"])),
            ("by status", ", ".join(f"{k} {v}" for k, v in part(f["by_status"]).items())),
            ("invalid-input rate (of rows)", fmt_pct(f["invalid_input_rate"]))]
    rows += [(f"{k.replace('_', '-')} rate (of judged)", fmt_pct(v)) for k, v in part(f["rates"]).items()]
    if shape == "pairs":
        w, a, p, pa = part(f["win_rate_a"]), part(f["agreement"]), part(f["position"]), part(f["p_a"])
        rows += [("verdicts", f"A {w['A']}, B {w['B']}, tie {w['tie']}"),
                 ("adjusted win rate of A ((A + ½·tie) / ok)", fmt_num(w["rate"])),
                 ("mean P(A ≻ B)", f"{fmt_num(pa['mean'])} over {pa['measured']} measured"),
                 ("accuracy of the verdicts vs labels",
                  f"{fmt_num(a['accuracy'])} ({a['correct']}/{a['labelled_ok']} labelled ok)"),
                 ("order-averaged accuracy (swap)", fmt_num(a["order_averaged_accuracy"])),
                 ("swap consistency", f"{fmt_num(p['consistency_rate'])} ({p['consistent']}/{p['swapped']})"),
                 ("first-shown win rate (0.5 = no position bias)",
                  f"{fmt_num(p['first_shown_win_rate'])} ({p['first_shown_wins']}/{p['decided']})")]
        if isinstance(f.get("tokens"), Mapping):  # summaries written before tokens were recorded have none
            rows.append(("cost", token_line(part(f["tokens"]))))
    elif shape == "single":
        r = part(f["reward"])
        rows += [("scored", str(f["scored"])), ("inputs cut to fit", str(f["truncated_inputs"])),
                 ("reward mean ± std", f"{fmt_num(r['mean'])} ± {fmt_num(r['std'])}"),
                 ("reward min / median / max", f"{fmt_num(r['min'])} / {fmt_num(r['median'])} / {fmt_num(r['max'])}")]
        rows += [(f"mean reward under “{p}”", f"{fmt_num(v['mean'])} ({v['scored']})")
                 for p, v in ((p, part(v)) for p, v in part(f["by_principle"]).items())]
    else:
        j = part(f["judgments"])
        rows += [("responses", str(f["responses"])), ("judgments", str(j["total"])),
                 ("failed judgments", str(j["failed"])), ("mean reward", fmt_num(part(f["reward"])["mean"]))]
    return rows


def findings(summary: Mapping[str, JSONValue], shape: str) -> list[tuple[str, str]]:
    """Overview rows beside the figures: failures in a sentence when there are none, flag counts, the reasons
    flagged rows give (counted), and calibration against the labels (pairs)."""
    f, flagged = part(summary["overall"]), part(summary["flagged"])
    rows = []
    if not any_failure(f):
        rows.append(("failures", "none: no parse failure, truncation, backend error, empty response or invalid row"))
    counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in part(flagged["counts"]).items() if v)
    rows.append(("flagged rows", f"{flagged['total']}" + (f" ({counts})" if counts else "")))
    reasons = part(flagged.get("reasons") or {})
    if reasons:
        rows.append(("reasons of flagged rows", "; ".join(f"“{k}” × {v}" for k, v in reasons.items())))
    found = f.get("calibration") if shape == "pairs" else None
    cal = part(found) if found else None
    if cal and cal["labelled"]:
        rows.append(("calibration vs labels", _calibration_text(part(cal["measured"]), cal["labelled"])))
        if cal["raw"]:
            rows.append((f"before calibration {cal['calibration']}",
                         _calibration_text(part(cal["raw"]), cal["labelled"])))
    repeated = part(part(summary["run"]).get("duplicate_ids") or {})
    if repeated.get("count"):
        rows.append(("duplicate ids", f"{repeated['description']}; each row is judged and shown as its own item "
                     "(results are stored by content, never by id)"))
    seen = summary.get("calibration_overlap")
    if seen:
        rows.append(("calibration's own data", str(part(seen)["sentence"])))
    return rows


def accuracy_note(f: Mapping[str, JSONValue]) -> str:
    """Why the calibration section's accuracy (of P(A ≻ B): its more probable side against the label) and the
    overview's (of the verdicts) differ, counted; or that they are one figure (``f``: the ``overall`` figures)."""
    a, found = part(f["agreement"]), f.get("calibration")
    if not found:
        return ""
    cal = part(found)
    n, against = int(number(cal["labelled"]) or 0), int(number(cal.get("against")) or 0)
    left_out = int(number(a["labelled_ok"]) or 0) - n
    verdicts = f"{fmt_num(a['accuracy'])} ({a['correct']}/{a['labelled_ok']})"
    if number(part(cal["measured"])["accuracy"]) == number(a["accuracy"]) and not left_out:
        return f"This accuracy equals the overview's accuracy of the verdicts, {verdicts}, over the same judgments."
    why = [f"{against} of these {n} winners {'is' if against == 1 else 'are'} not the side their P(A≻B) makes more "
           "probable (a sampled verdict is one draw; a tie from swap)"] if against else []
    if left_out:
        why.append(f"{left_out} labelled ok {'judgment has' if left_out == 1 else 'judgments have'} no measured "
                   "P(A≻B) or a tie label")
    if not why:
        why.append("a P(A≻B) of exactly 0.5 counts half here, where its tie verdict counts as the overview counts ties")
    return (f"This accuracy is P(A≻B)'s (its more probable side against the label; 0.5 counts half); the overview's "
            f"accuracy of the verdicts is {verdicts}. They differ because " + " and ".join(why) + ".")


def _calibration_text(m: Mapping[str, JSONValue], n: JSONValue) -> str:
    return (f"ECE {fmt_num(m['ece'])}, Brier {fmt_num(m['brier'])}, log loss {fmt_num(m['log_loss'])} over {n} "
            "labelled ok judgments (10 equal-width bins of P(A≻B))")


def slice_table(values: Mapping[str, JSONValue], shape: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of one slice column's table (``values``: slice value -> its figures)."""
    figures = {v: part(f) for v, f in values.items()}
    if shape == "pairs":
        head = ["value", "rows", "judged", "A", "B", "tie", "win rate A", "accuracy", "consistency",
                "parse failures", "truncated", "invalid"]
        body = []
        for v, f in figures.items():
            w, rates = part(f["win_rate_a"]), part(f["rates"])
            body.append([v, str(f["rows"]), str(f["judged"]), str(w["A"]), str(w["B"]), str(w["tie"]),
                         fmt_num(w["rate"]), fmt_num(part(f["agreement"])["accuracy"]),
                         fmt_num(part(f["position"])["consistency_rate"]), fmt_pct(rates["parse_failure"]),
                         fmt_pct(rates["truncated"]), fmt_pct(f["invalid_input_rate"])])
    else:
        head = ["value", "rows", "judged", "mean reward", "truncated", "backend errors", "invalid"]
        body = [[v, str(f["rows"]), str(f["judged"]), fmt_num(part(f["reward"])["mean"]),
                 fmt_pct(part(f["rates"])["truncated"]), fmt_pct(part(f["rates"])["backend_error"]),
                 fmt_pct(f["invalid_input_rate"])] for v, f in figures.items()]
    return head, body


def flagged_view(row: AuditRow, shape: str) -> dict[str, object]:
    """What the flagged-items table shows of one row (plain strings; the template escapes them)."""
    rec = row.record or {}
    view: dict[str, object] = {"line": row.line, "id": row.record_id, "flags": ", ".join(row.flags),
                            "status": row.status, "reason": row.reason, "verdict": "", "texts": [], "turns": [],
                            "dimensions": "", "conversation": _conversation(rec)}
    res = row.result
    if isinstance(res, PairwiseJudgment):
        view["verdict"] = (f"winner {res.winner.value}; P(A≻B) {fmt_num(res.p_a)}; label {res.label.value}"
                           + ("" if res.consistent is None else f"; consistent {str(res.consistent).lower()}"))
        view["texts"] = [("Response A", rec.get("response_a", "")), ("Response B", rec.get("response_b", "")),
                         ("Analysis of A (turn 1)", res.analysis_a), ("Analysis of B (turn 1)", res.analysis_b)]
        orders = res.sub_judgments or (res,)
        turns: list[tuple[str, str]] = []
        for pos, (sj, shown) in enumerate(res.ordered_judgments()):
            name = "" if not res.sub_judgments else "forward (A first)" if shown is Verdict.A else "reversed (B first)"
            name += f" sample {pos % res.samples + 1}" if res.samples > 1 else ""
            turns += [(f"Turn 1 {name}".strip(), sj.turn1_text), (f"Turn 2 {name}".strip(), sj.turn2_text)]
        view["turns"] = turns
        view["dimensions"] = " | ".join(dict.fromkeys(d for sj in orders for d in sj.dimensions))
    elif isinstance(res, ScalarReward):
        view["verdict"] = f"reward {fmt_num(res.reward)}" + (f"; cut {res.truncated_tokens} tokens" if res.truncated
                                                            else "")
        view["texts"] = [("Response", rec.get("response", "")), ("Principle", rec.get("principle", ""))]
        view["turns"] = [("Judge output", res.text)] if res.text else []
    elif isinstance(res, GroupResult):
        view["verdict"] = (f"ranking {' > '.join(f'#{k}' for k in res.ranking) or 'none'}; failed judgments "
                           f"{res.failed}")
        responses = rec.get("responses", [])
        assert isinstance(responses, list), responses
        view["texts"] = [(f"Response #{k} (reward {fmt_num(r.reward)})", text)
                         for k, (text, r) in enumerate(zip(responses, res.rewards, strict=True))]
        bad = [j for j in res.judgments if not j.ok or j.consistent is False]
        view["turns"] = [(f"Judgment {k}: {j.status.value} {j.reason}".strip(), j.turn2_text or j.turn1_text)
                         for k, j in enumerate(bad[:6])]
        view["dimensions"] = " | ".join(dict.fromkeys(d for j in res.judgments for d in j.dimensions))
    return view


def _conversation(rec: Mapping[str, object]) -> str:
    msgs = rec.get("conversation") or []
    assert isinstance(msgs, list), msgs  # normalize() wrote the conversation's messages
    return "\n\n".join(f"[{m.get('role', '?')}] {m.get('content', '')}" for m in map(part, msgs))
