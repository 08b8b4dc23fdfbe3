"""The figures of an audit, overall and per slice, and its flagged items: the JSON summary the report draws.

Every figure is computed from typed results read back from the store (:mod:`brrm.audit.codec`) through
:func:`brrm.summarize` / :func:`brrm.summarize_rewards`, so only ``ok`` results enter an average or a rate's
numerator of verdicts; a parse failure, truncation or backend error is counted under its status and never
becomes a number. Rates of failures are over the judged rows (``invalid_input`` rows are counted apart, over
all rows).

Pairwise audits report verdict counts, the adjusted win rate of response A ((A + ½·tie) / ok, as FastChat's
fixed ``show_result``; raw counts alongside), the P(A ≻ B) histogram, turn-1 dimension frequencies, position
consistency under swap and the first-shown win rate (position bias; 0.5 = none), parse-failure and truncation
rates, and agreement with labels (accuracy, LLMBar's order-averaged accuracy under swap, a label × verdict
table). Single-response audits report the reward distribution; group audits the rewards, where the best
response stood, and their judgments' figures.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.audit.calib import calibration_figures
from brrm.audit.codec import result_from_dict
from brrm.audit.store import AuditStore
from brrm.numerics import bin_edges, bin_index
from brrm.types import (
    GroupResult,
    JudgmentSummary,
    PairwiseJudgment,
    ScalarReward,
    Verdict,
    summarize,
    summarize_rewards,
)
from brrm.types.jsonread import as_list, as_object
from brrm.types.jsonvalue import JSONDict, JSONValue
from brrm.types.usage import token_report

if TYPE_CHECKING:
    from brrm.audit.options import AuditOptions

SUMMARY_FILE = "summary.json"
SUMMARY_SCHEMA = "brrm.audit.summary/1"

FLAGS = ("invalid_input", "parse_failure", "truncated", "backend_error", "empty", "inconsistent", "low_margin")
"""Why a row is flagged: its status, position-inconsistent under swap, or |P(A≻B) − 0.5| < the threshold."""

HIST_BINS = 10
"""Bins of the P(A≻B) histogram over [0, 1] and of reward histograms over [min, max]."""

FINE_BINS = 50
"""Bins (0.02 wide) of the P(A≻B) histogram the report draws, with every value as a tick when few."""

STRIP_MAX = 1000
"""Up to this many P(A≻B) values are kept in the summary for the report's strip of ticks."""

MAX_SLICE_VALUES = 30
"""Most values of one ``--slice-by`` column shown separately; the rest are summed as ``(other)``."""


@dataclass(frozen=True)
class AuditRow:
    """One planned row of a run with its decoded result.

    Attributes:
        position, line, record_id, item_hash, slices: as planned (see :class:`~brrm.audit.plan.AuditItem`).
        status: the result's status, ``invalid_input`` for a bad row, ``pending`` when not judged yet.
        reason: the result's (or the bad row's) reason.
        record: the normalized record (None for a bad row).
        result: the typed result (None for a bad or pending row).
        result_dict: the result as stored (its ``to_dict()``).
        flags: which of :data:`FLAGS` apply.
    """

    position: int
    line: int
    record_id: str
    item_hash: str
    slices: Mapping[str, str]
    status: str
    reason: str
    record: Mapping[str, JSONValue] | None
    result: PairwiseJudgment | ScalarReward | GroupResult | None
    result_dict: Mapping[str, JSONValue] | None
    flags: tuple[str, ...] = ()


def load_rows(store: AuditStore, run_id: int, shape: str, *, low_margin: float = 0.1) -> list[AuditRow]:
    """A run's rows in input order, results decoded and flags set."""
    out = []
    for r in store.run_rows(run_id):
        planned = (r.position, r.line, r.record_id, r.item_hash, r.slices)
        if r.invalid_reason:
            row = AuditRow(*planned, "invalid_input", r.invalid_reason, None, None, None)
        elif r.stored is None:
            row = AuditRow(*planned, "pending", "not judged yet", None, None, None)
        else:
            s = r.stored
            row = AuditRow(*planned, s.status, s.reason, s.record, result_from_dict(shape, s.result), s.result)
        out.append(_flag(row, low_margin))
    return out


def _flag(row: AuditRow, low_margin: float) -> AuditRow:
    flags = [row.status] if row.status in FLAGS else []
    res = row.result
    if isinstance(res, PairwiseJudgment):
        if res.consistent is False:
            flags.append("inconsistent")
        if res.ok and math.isfinite(res.p_a) and abs(res.p_a - 0.5) < low_margin:
            flags.append("low_margin")
    elif isinstance(res, ScalarReward):
        if res.ok and res.truncated:
            flags.append("truncated")
    elif isinstance(res, GroupResult):
        inner = {j.status.value for j in res.judgments if not j.ok} | {r.status.value for r in res.rewards if not r.ok}
        flags += [f for f in FLAGS if f in inner and f not in flags]
        if any(j.consistent is False for j in res.judgments):
            flags.append("inconsistent")
    return replace(row, flags=tuple(dict.fromkeys(flags)))


Figures = dict[str, object]
"""Figures of some rows by name, before :func:`clean` makes them JSON (NaN floats, tuples)."""


def build_summary(store: AuditStore, run_id: int, rows: Sequence[AuditRow], options: AuditOptions) -> JSONDict:
    """The JSON summary of a run (see the module docstring); NaN figures are ``null``."""
    found = store.run(run_id)
    run: Mapping[str, object] = found or {}
    provenance: dict[str, object] = {**(found["provenance"] if found else {}), "argv": run.get("argv")}
    info = store.config_info(found["config_hash"] if found else None) or {}
    kind = str(info.get("kind") or "")
    figures = {"pairs": pair_figures, "single": single_figures, "groups": group_figures}[options.shape]
    flagged = [r for r in rows if r.flags]
    slices = {col: _slices(rows, col, figures, kind, options.shape) for col in options.slice_by}
    progress = store.progress(run_id)
    summary = clean({
        "schema": SUMMARY_SCHEMA,
        "run": {"run_id": run_id, "state": run.get("state"), "input": run.get("input"), "shape": options.shape,
                "strategy": options.strategy, "config_hash": run.get("config_hash"), "rows": len(rows),
                "valid_rows": sum(r.status != "invalid_input" for r in rows), "started_at": run.get("started_at"),
                "judged_this_run": progress["judged_this_run"], "generated_at": time.time(),
                "duplicate_ids": repeated_ids(rows), "sampled": sampled(info),
                "judgments_per_second": run_rate(run, progress["judged_this_run"])},
        "judge": info,
        "provenance": provenance,
        "runs": [{k: r[k] for k in ("run_id", "state", "started_at", "finished_at", "pending", "message")}
                 for r in store.runs()],
        "thresholds": {"low_margin": options.low_margin},
        "overall": figures(rows, kind),
        **({"calibration_overlap": calibration_overlap(rows, options.calibration)}
           if options.calibration and options.shape == "pairs" else {}),
        "slices": slices,
        "flagged": {"counts": {f: sum(f in r.flags for r in rows) for f in FLAGS}, "total": len(flagged),
                    "reasons": flag_reasons(flagged),
                    "items": [{"line": r.line, "id": r.record_id, "flags": list(r.flags), "reason": r.reason}
                              for r in flagged[:options.max_flagged]]},
    })
    assert isinstance(summary, dict)
    return summary


def run_rate(run: Mapping[str, object], judged: object) -> float | None:
    """Judgments per second of the latest run: what it judged over its wall time (None while it runs or when it
    judged nothing)."""
    start, end = run.get("started_at"), run.get("finished_at")
    if not isinstance(start, int | float) or not isinstance(end, int | float) or not isinstance(judged, int):
        return None
    return round(judged / (end - start), 4) if judged and end > start else None


def sampled(info: Mapping[str, object]) -> JSONDict:
    """Whether the run's verdicts were sampled (decoding at a temperature above 0: each verdict one draw, which may go
    against its own P(A ≻ B)) and at which temperature; a scalar judge, which decodes nothing, is never sampled."""
    options = info.get("options")
    sampling = options.get("sampling") if isinstance(options, Mapping) else None
    value = sampling.get("temperature") if isinstance(sampling, Mapping) else None
    temperature = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return {"sampled": bool(temperature and temperature > 0), "temperature": temperature}


def repeated_ids(rows: Sequence[AuditRow], shown: int = 100) -> JSONDict:
    """The input's record ids that appear on more than one row (a row judged under several principles counts once):
    ``{"count": n, "description": "2 ids appear more than once: a (×3), b (×2)", "ids": {id: times}}`` (the first
    ``shown`` ids; ``count`` 0 and ``description`` ``""`` when every id is unique). Each row stays its own item."""
    from brrm.records.duplicates import duplicate_ids

    found = duplicate_ids(rid for _, rid in dict.fromkeys((r.line, r.record_id) for r in rows))
    return {"count": len(found.counts), "description": found.describe(),
            "ids": {i: c for i, c in found.counts[:shown]}}


def calibration_overlap(rows: Sequence[AuditRow], path: str) -> dict[str, object]:
    """How many of the run's pairs (by content group, :func:`brrm.calibration.data.content_key`) were in the fit
    and held-out splits of the calibration at ``path`` (:func:`brrm.calibration.split.overlap`), with its sentence.

    Raises:
        ConfigError: when ``path`` is not a readable calibration (checked before judging by ``brrm.load``).
    """
    from brrm.calibration.data import row_content_key
    from brrm.calibration.split import overlap
    from brrm.types.calibration import read_calibration

    keys = [row_content_key(r.record, r.line) for r in rows if r.record is not None]
    found = overlap(read_calibration(path).details, keys)
    return {**found.to_dict(), "sentence": found.sentence()}


def flag_reasons(flagged: Sequence[AuditRow], top: int = 12) -> dict[str, int]:
    """How many flagged rows give each reason clause (reasons are split at "; "), most frequent first."""
    counts = Counter(c.strip() for r in flagged for c in dict.fromkeys(r.reason.split("; ")) if c.strip())
    return dict(counts.most_common(top))


def part(value: JSONValue) -> Mapping[str, JSONValue]:
    """A JSON object of the summary (see the module docstring), for readers (the report, the plots).

    Raises:
        TypeError: for another value (a summary of another shape: a programming error).
    """
    return as_object(value, "an object of the audit summary")


def entries(value: JSONValue) -> list[JSONValue]:
    """A JSON list of the summary.

    Raises:
        TypeError: for another value.
    """
    return as_list(value, "a list of the audit summary")


def number(value: JSONValue) -> float | None:
    """A number of the summary; None for null (a NaN figure).

    Raises:
        TypeError: for another value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"the audit summary has {value!r} where a number belongs")
    return float(value)


def numbers(value: JSONValue) -> list[float]:
    """A list of numbers of the summary, nulls as NaN.

    Raises:
        TypeError: for another value.
    """
    return [math.nan if (x := number(v)) is None else x for v in entries(value)]


def write_summary(summary: Mapping[str, JSONValue], directory: Path) -> Path:
    """Write ``summary.json`` atomically (a temporary file renamed over it)."""
    path = Path(directory) / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _slices(rows: Sequence[AuditRow], col: str, figures: Callable[[Sequence[AuditRow], str], Figures], kind: str,
            shape: str) -> Figures:
    by_value: dict[str, list[AuditRow]] = {}
    for r in rows:
        by_value.setdefault(r.slices.get(col, ""), []).append(r)
    ordered = sorted(by_value, key=lambda v: (-len(by_value[v]), v))
    shown, rest = ordered[:MAX_SLICE_VALUES], ordered[MAX_SLICE_VALUES:]
    values = {v: figures(by_value[v], kind) for v in shown}
    if rest:
        values["(other)"] = figures([r for v in rest for r in by_value[v]], kind)
    out: Figures = {"values": values, "other_values": len(rest)}
    if shape == "pairs":
        rate = {v: _win_rate_a(values[v]) for v in values}
        rated = [v for v in values if rate[v] == rate[v]]
        out["ranked_by_win_rate_a"] = sorted(rated, key=lambda v: (-rate[v], v))
    return out


def _win_rate_a(figures: Figures) -> float:
    """The ``win_rate_a`` rate of :func:`pair_figures` (NaN without ok judgments)."""
    win = figures["win_rate_a"]
    assert isinstance(win, dict) and isinstance(win["rate"], float | int), win
    return float(win["rate"])


def _counts(rows: Sequence[AuditRow]) -> Figures:
    by_status = Counter(r.status for r in rows)
    judged = len(rows) - by_status["invalid_input"] - by_status["pending"]
    return {"rows": len(rows), "judged": judged, "by_status": dict(sorted(by_status.items())),
            "invalid_input_rate": by_status["invalid_input"] / len(rows) if rows else math.nan,
            "rates": {k: by_status[k] / judged if judged else math.nan
                      for k in ("parse_failure", "truncated", "backend_error", "empty")}}


def histogram(values: Sequence[float], low: float, high: float, bins: int = HIST_BINS) -> Figures:
    """Counts of ``values`` in ``bins`` equal bins over [low, high], by brrm's one binning rule
    (:func:`brrm.numerics.bin_index`: a value on an inner edge opens the bin above it; the last bin is closed) — the
    rule of the ECE and reliability bins too, so a P(A ≻ B) lands in the same bin in every figure."""
    if not values:
        return {"edges": [], "counts": []}
    if high <= low:
        high = low + 1.0
    edges = bin_edges(bins, low, high)
    counts = [0] * bins
    for v in values:
        counts[bin_index(v, edges)] += 1
    return {"edges": edges, "counts": counts}


def pair_figures(rows: Sequence[AuditRow], kind: str) -> Figures:
    """Figures of pairwise rows (see the module docstring)."""
    judged = [r.result for r in rows if isinstance(r.result, PairwiseJudgment)]
    s = summarize(judged)
    ok = [j for j in judged if j.ok]
    probs = [j.p_a for j in ok if math.isfinite(j.p_a)]
    a, b, tie = s.by_winner["A"], s.by_winner["B"], s.by_winner["tie"]
    return {**_counts(rows),
            "verdicts": dict(s.by_winner),
            "win_rate_a": {"rate": (a + 0.5 * tie) / len(ok) if ok else math.nan, "A": a, "B": b, "tie": tie},
            "p_a": {"measured": len(probs), "mean": statistics.fmean(probs) if probs else math.nan,
                    "histogram": histogram(probs, 0.0, 1.0), "fine_histogram": histogram(probs, 0.0, 1.0, FINE_BINS),
                    "values": sorted(probs) if len(probs) <= STRIP_MAX else []},
            "calibration": calibration_figures(judged),
            "dimensions": dimension_figures(judged),
            "position": position_figures(judged, kind, s),
            "agreement": agreement_figures(judged, s),
            "generated_tokens": sum(j.generated_tokens for j in judged),
            "tokens": token_report(judged)}


def dimension_figures(judged: Sequence[PairwiseJudgment]) -> Figures:
    """How often turn 1 chose each dimension, over ordered judgments that chose any (each order under swap)."""
    ordered = [sj for j in judged for sj in (j.sub_judgments or (j,))]
    with_dims = [sj for sj in ordered if sj.dimensions]
    counts = Counter(d for sj in with_dims for d in sj.dimensions)
    unknown = Counter(d for sj in ordered for d in sj.unknown_dimensions)
    return {"judgments_with_dimensions": len(with_dims), "counts": dict(counts.most_common()),
            "frequencies": {d: n / len(with_dims) for d, n in counts.most_common()},
            "unknown": dict(unknown.most_common(20))}


def position_figures(judged: Sequence[PairwiseJudgment], kind: str, s: JudgmentSummary) -> Figures:
    """Swap consistency and the first-shown win rate (BR-RM only: a scalar model's verdict has no order)."""
    if kind and kind != "brrm":
        return {"applies": False, "swapped": 0, "consistent": 0, "consistency_rate": math.nan,
                "first_shown_wins": 0, "decided": 0, "first_shown_win_rate": math.nan}
    first = decided = 0
    for j in judged:
        for sj, shown_first in j.ordered_judgments():  # reversed (mirrored into the A/B frame) showed B first
            if sj.ok and sj.winner in (Verdict.A, Verdict.B):
                decided += 1
                first += sj.winner is shown_first
    return {"applies": True, "swapped": s.swapped, "consistent": s.consistent, "consistency_rate": s.consistency_rate,
            "first_shown_wins": first, "decided": decided,
            "first_shown_win_rate": first / decided if decided else math.nan}


def agreement_figures(judged: Sequence[PairwiseJudgment], s: JudgmentSummary) -> Figures:
    """Agreement with labels: accuracy over labelled ok judgments, order-averaged accuracy, label × verdict."""
    labelled = [j for j in judged if j.label is not Verdict.NONE]
    table: dict[str, dict[str, int]] = {}
    for j in labelled:
        key = j.winner.value if j.ok else "no verdict"
        row = table.setdefault(j.label.value, {})
        row[key] = row.get(key, 0) + 1
    return {"labelled": len(labelled), "labelled_ok": s.labelled, "correct": s.correct, "accuracy": s.accuracy,
            "order_averaged_accuracy": s.order_averaged_accuracy, "label_by_verdict": table}


def single_figures(rows: Sequence[AuditRow], kind: str) -> Figures:
    """Figures of single-response rows: counts, reward distribution, truncation, per principle."""
    rewards = [r.result for r in rows if isinstance(r.result, ScalarReward)]
    s = summarize_rewards(rewards)
    values = [r.reward for r in rewards if r.ok]
    counts = _counts(rows)
    rates = counts["rates"]
    assert isinstance(rates, dict)
    rates["truncated"] = s["truncated"] / len(rewards) if rewards else math.nan
    by_principle: dict[str, list[float]] = {}
    for r in rewards:
        if r.ok and r.principle:
            by_principle.setdefault(r.principle, []).append(r.reward)
    return {**counts, "scored": s["scored"], "truncated_inputs": s["truncated"],
            "reward": {"mean": statistics.fmean(values) if values else math.nan,
                       "std": statistics.pstdev(values) if values else math.nan,
                       "min": min(values, default=math.nan), "max": max(values, default=math.nan),
                       "median": statistics.median(values) if values else math.nan,
                       "histogram": histogram(values, min(values, default=0.0), max(values, default=1.0))},
            "by_principle": {p: {"scored": len(v), "mean": statistics.fmean(v)} for p, v in by_principle.items()}}


def group_figures(rows: Sequence[AuditRow], kind: str) -> Figures:
    """Figures of group rows: counts, rewards, where the best response stood, and their judgments' figures."""
    groups = [r.result for r in rows if isinstance(r.result, GroupResult)]
    judgments = [j for g in groups for j in g.judgments]
    s = summarize(judgments)
    values = [r.reward for g in groups for r in g.rewards if r.ok]
    best = Counter(g.ranking[0] for g in groups if g.ranking)
    return {**_counts(rows),
            "responses": sum(len(g.rewards) for g in groups),
            "judgments": {"total": s.total, "by_status": dict(s.by_status), "failed": sum(g.failed for g in groups),
                          "parse_failure_rate": s.by_status["parse_failure"] / s.total if s.total else math.nan,
                          "truncation_rate": s.by_status["truncated"] / s.total if s.total else math.nan},
            "reward": {"mean": statistics.fmean(values) if values else math.nan,
                       "histogram": histogram(values, min(values, default=0.0), max(values, default=1.0))},
            "best_position": {str(k): best[k] for k in sorted(best)},
            "dimensions": dimension_figures(judgments),
            "position": position_figures(judgments, kind, s)}


def clean(value: object) -> JSONValue:
    """JSON-ready: NaN/inf -> None, floats rounded to 6 digits, tuples -> lists."""
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if value is None or isinstance(value, str | int):  # bool is an int
        return value
    raise TypeError(f"the summary has a {type(value).__name__}, not a JSON value: {value!r}")
