"""Benchmark outputs: per-item judgments (JSONL), the run's settings, the result (JSON, Markdown) and the table.

An output folder holds ``run.json`` (benchmark, subsets, orders, order seed, data source and the judge's
identity), ``judgments.jsonl`` (one line per item: ids, labels, every presentation's judgment, rewards),
``result.json`` and ``result.md``. ``judgments.jsonl`` is written chunk by chunk, so an interrupted run resumes
from it when the same command is run again (same benchmark and judge; :func:`check_resume`). Each line carries
its item's ``key`` (position among equal items and content hash, :func:`brrm.bench.core.item_keys`): a resume
matches lines to items by it, never by the benchmark's ids, and judges again the transient failures (and, under
sampled decoding or ``--retry-failed``, the parse failures and truncations: :mod:`brrm.types.retry`). Any brrm output
replays through ``brrm bench NAME --predictions judgments.jsonl`` (:func:`read_items`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from brrm.bench.core import BenchItem, BenchResult, ItemResult, Pair, Row, Shown
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, ScalarReward, Status, Verdict
from brrm.types.jsonread import as_list, as_number, as_object, as_text
from brrm.types.jsonvalue import JSONValue
from brrm.types.usage import token_line, turns_from_dict

if TYPE_CHECKING:
    from brrm.bench.base import Benchmark
    from brrm.bench.protocol import Scored

RUN_FILE, ITEMS_FILE, RESULT_JSON, RESULT_MD = "run.json", "judgments.jsonl", "result.json", "result.md"

IDENTITY = ("model", "kind", "recipe", "backend", "template_hash", "options")
"""Judge fields that must match for a run to resume from an earlier one's judgments."""


def item_row(result: ItemResult) -> dict[str, object]:
    """One ``judgments.jsonl`` line: the item (no texts), each presentation's full judgment, the rewards."""
    return {**result.item.to_dict(), **({"key": result.key} if result.key else {}),
            "presentations": [{"pair": s.pair, "swapped": s.swapped, "judgment": s.judgment.to_dict()}
                              for s in result.shown],
            "rewards": [r.to_dict() for r in result.rewards]}


def write_items(handle: IO[str], results: Sequence[ItemResult]) -> None:
    """Append results as JSON lines and flush (a crash loses at most the chunk being judged)."""
    for r in results:
        handle.write(json.dumps(item_row(r), ensure_ascii=False) + "\n")
    handle.flush()


def _judgment(value: JSONValue) -> PairwiseJudgment:
    d = as_object(value)
    p_a = d.get("p_a")
    return PairwiseJudgment(Verdict(as_text(d["winner"])), Status(as_text(d["status"])), as_text(d.get("reason", "")),
                            id=as_text(d.get("id", "")), p_a=math.nan if p_a is None else float(as_number(p_a)),
                            prompt_tokens=int(as_number(d.get("prompt_tokens", 0))),
                            generated_tokens=int(as_number(d.get("generated_tokens", 0))),
                            attempts=int(as_number(d.get("attempts", 1))), turns=turns_from_dict(d.get("turns")))


def _reward(value: JSONValue) -> ScalarReward:
    d = as_object(value)
    reward = d.get("reward")
    return ScalarReward(math.nan if reward is None else float(as_number(reward)), Status(as_text(d["status"])),
                        as_text(d.get("reason", "")), id=as_text(d.get("id", "")),
                        input_tokens=int(as_number(d.get("input_tokens", 0))))


def _pair(value: JSONValue) -> Pair:
    i, j, gold = as_list(value)
    return Pair(int(as_number(i)), int(as_number(j)), Verdict(as_text(gold)))


def parse_item(row: Mapping[str, JSONValue]) -> ItemResult:
    """An :class:`ItemResult` from a ``judgments.jsonl`` line (texts are not stored: responses come back empty).

    Raises:
        ConfigError: for a line that is not a brrm benchmark output.
    """
    try:
        item = BenchItem(str(row["id"]), str(row["subset"]), "", ("",) * int(as_number(row["n_responses"])),
                         tuple(_pair(p) for p in as_list(row["pairs"])), as_object(row["meta"]))
        shown = tuple(Shown(int(as_number(s["pair"])), bool(s["swapped"]), _judgment(s["judgment"]))
                      for s in map(as_object, as_list(row["presentations"])))
        rewards = tuple(_reward(r) for r in as_list(row.get("rewards") or []))
        key = as_text(row.get("key", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a brrm benchmark output line ({type(exc).__name__}: {exc})") from None
    return ItemResult(item, shown, rewards, key)


def is_brrm_output(path: Path) -> bool:
    """Whether a file's first line is a brrm ``judgments.jsonl`` line."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = next((ln for ln in handle if ln.strip()), "")
        row = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and "presentations" in row and "pairs" in row


def read_items(path: Path) -> list[ItemResult]:
    """Every item of a ``judgments.jsonl`` (a truncated last line of an interrupted run is dropped).

    Raises:
        ConfigError: naming the file and line of a malformed line elsewhere.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for k, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(parse_item(json.loads(line)))
        except (ValueError, ConfigError) as exc:
            if k == len(lines):
                break  # the line being written when the run stopped
            raise ConfigError(f"{path} line {k}: {exc}") from None
    return out


def keep_complete_lines(path: Path) -> None:
    """Rewrite ``path`` without a last line an interruption cut short (complete lines stay byte for byte), so a
    resumed run can append to it."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines:
        try:
            json.loads(lines[-1])
            break
        except ValueError:
            lines.pop()
    path.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines), encoding="utf-8")


def run_settings(bench: Benchmark, judge_info: Mapping[str, object], *, subsets: Sequence[str], orders: str,
                 seed: int, source: str | None, limit: int | None) -> dict[str, object]:
    """What ``run.json`` records (and what a resumed run must match)."""
    return {"benchmark": bench.name, "subsets": list(subsets), "orders": orders, "order_seed": seed,
            "data": source, "limit": limit, "judge": {k: judge_info.get(k) for k in IDENTITY}}


def check_resume(folder: Path, settings: Mapping[str, object]) -> dict[str, ItemResult]:
    """Results an earlier, interrupted run of the same settings left in ``folder`` (empty for a new folder).

    Raises:
        ConfigError: when the folder holds a run of another benchmark, protocol, judge or data (``data_revision``:
            another revision or file digest).
    """
    run_file, items_file = folder / RUN_FILE, folder / ITEMS_FILE
    if not run_file.exists():
        return {}
    earlier = json.loads(run_file.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(settings))  # compared as stored (tuples become lists)
    for run in (earlier, now):  # the data must be the same files; the items scored may differ by --subset/--limit
        if isinstance(run.get("data_revision"), dict):
            run["data_revision"] = {k: v for k, v in run["data_revision"].items() if k != "items_sha256"}
    same = {k: earlier.get(k) == v for k, v in now.items() if k not in ("subsets", "limit")}
    if not all(same.values()):
        differ = ", ".join(k for k, ok in same.items() if not ok)
        raise ConfigError(f"--output {str(folder)!r} holds a run with other settings ({differ}); use another folder "
                          "or remove it")
    if not items_file.exists():
        return {}
    done = read_items(items_file)
    if not all(r.key for r in done):
        raise ConfigError(f"--output {str(folder)!r}: {ITEMS_FILE} was written by a brrm that filed items by id "
                          "(repeated ids could swap results); use another folder or remove it")
    return {r.key: r for r in done}


def retried(done: Mapping[str, ItemResult], statuses: frozenset[str]) -> tuple[set[str], int]:
    """The keys of earlier results a resume judges again (any judgment or reward with a status in ``statuses``:
    :func:`brrm.types.retry.retry_statuses`), and how many failed results it keeps (a parse failure or truncation
    left as it was: the summary says so)."""
    from brrm.types.retry import FINAL_UNLESS_DIFFERENT

    again = {key for key, r in done.items() if any(s in statuses for s in r.statuses())}
    kept = sum(1 for key, r in done.items() if key not in again
               and any(s in FINAL_UNLESS_DIFFERENT for s in r.statuses()))
    return again, kept


def failed_seeds(path: Path) -> dict[str, int | None]:
    """Item key -> the ``provenance.seed`` of the item's first failed judgment or reward in ``judgments.jsonl``
    (None where it recorded none): what :func:`brrm.seeds.retry_id` moves a sampled retry on from."""
    from brrm.seeds import failed_seed

    out: dict[str, int | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if not isinstance(row, dict) or not row.get("key"):
            continue
        results = [p.get("judgment") for p in row.get("presentations") or []] + list(row.get("rewards") or [])
        bad = next((r for r in results if isinstance(r, dict) and r.get("status") != "ok"), None)
        out[str(row["key"])] = failed_seed(bad)
    return out


def drop_lines(path: Path, keys: set[str]) -> None:
    """Rewrite ``path`` without the lines of ``keys`` (results a resume judges again); every other line stays
    byte for byte."""
    if not keys or not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(ln for ln in lines if not ln.strip() or json.loads(ln).get("key") not in keys),
                    encoding="utf-8")


def published_figure(bench: Benchmark, model: str | None) -> float | None:
    """The model card's figure for this benchmark when the model is a known checkpoint (:data:`brrm.recipes.KNOWN`)."""
    from brrm.recipes import known_recipe, model_config

    recipe = known_recipe(model, model_config(model)) if model else None
    if recipe is None or not bench.published_key:
        return None
    return dict(recipe.published).get(bench.published_key)


def fmt(x: object) -> str:
    """A figure as the tables print it (two decimals; ``—`` for None or NaN)."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _details(extra: Mapping[str, object]) -> str:
    """The row's further official figures that are plain numbers (nested tables stay in result.json)."""
    parts = [f"{k} {fmt(v) if isinstance(v, float) else v}" for k, v in extra.items()
             if isinstance(v, int | float) and not isinstance(v, bool)]
    return "; ".join(parts)


def table_lines(result: BenchResult, published: float | None = None, *, markdown: bool = False) -> list[str]:
    """The score table: one line per row (score, items, ties, failures, further official figures), the headline
    row next to the model card's published figure when there is one."""
    head = ["row", "score", "n", "ties", "failures", "details"]
    body = [[r.name, fmt(r.score), str(r.n), str(r.ties), str(r.failures), _details(r.extra)] for r in result.rows]
    return _table(head, body, [r.name for r in result.rows], result.headline, published, left={0, 5},
                  markdown=markdown)


def protocol_table_lines(runs: Sequence[Scored], published: float | None = None, *,
                         markdown: bool = False) -> list[str]:
    """The score table of one or more protocols side by side (:class:`brrm.bench.protocol.Scored`): per row the
    items, then per protocol its score over all items, over parsed items (``=`` where the two agree, ``—`` where no
    item of the row parsed, ``n/a`` for official output files), ties, failures and further official figures, each
    column headed by the protocol's name; the headline row next to the model card's figure when there is one."""
    first = runs[0].all
    head = ["row", "n"]
    for run in runs:
        head += [f"{run.label}: all items", f"{run.label}: parsed items", f"{run.label}: ties",
                 f"{run.label}: failures", f"{run.label}: details"]
    body = []
    for r in first.rows:
        line = [r.name, str(r.n)]
        for run in runs:
            mine = next((x for x in run.all.rows if x.name == r.name), Row(r.name, math.nan, 0))
            other = run.parsed_score(mine.name)
            same = other is not None and (other == mine.score or (math.isnan(other) and math.isnan(mine.score)))
            shown = "n/a" if not run.per_item else "=" if same else fmt(other)
            line += [fmt(mine.score), shown, str(mine.ties), str(mine.failures),
                     _details(mine.extra)]
        body.append(line)
    left = {0} | {i for i, h in enumerate(head) if h.endswith(": details")}
    return _table(head, body, [r.name for r in first.rows], first.headline, published, left=left, markdown=markdown)


def _table(head: list[str], body: list[list[str]], names: Sequence[str], headline: str, published: float | None, *,
           left: set[int], markdown: bool) -> list[str]:
    """A score table's lines: the model card's figure beside the headline row (when given), then markdown, or
    aligned columns (``left`` ones left-aligned, the rest right-aligned)."""
    if published is not None:
        head = [*head, "published (model card)"]
        body = [[*b, fmt(published) if name == headline else ""] for name, b in zip(names, body, strict=True)]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return ["  ".join(x[i].ljust(widths[i]) if i in left else x[i].rjust(widths[i]) for i in range(len(head)))
            .rstrip() for x in [head, *body]]


def cost_line(result: BenchResult) -> str:
    """Judgments, generated tokens and wall time of a run (empty for a replay)."""
    c = result.cost
    if c is None:
        return ""
    rate = f"{c.judgments / c.seconds:.2f}" if c.seconds > 0 else "n/a"
    generated = f"{c.generated_tokens} generated tokens" if c.unit == "judgments" else "no generation measured"
    tokens = f"; {token_line(c.tokens)}" if c.tokens else ""
    return (f"cost: {c.judgments} {c.unit}, {generated}, {c.prompt_tokens} prompt tokens, {c.seconds:.1f} s wall "
            f"({rate} {c.unit}/s){tokens}")


def markdown(result: BenchResult, published: float | None = None) -> str:
    """``result.md``: the table, the metric, the cost and the notes."""
    judge = result.judge.get("model", "replayed outputs")
    lines = [f"# {result.benchmark}: {judge}", "", f"Metric: {result.metric}. Headline: **{result.headline}**.", "",
             *table_lines(result, published, markdown=True), ""]
    if result.cost is not None:
        lines += [cost_line(result), ""]
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def write_scored(folder: Path, runs: Sequence[Scored], published: float | None,
                 revision: Mapping[str, object]) -> None:
    """``result.json`` and ``result.md`` of a run under one or more protocols (:class:`~brrm.bench.protocol.Scored`).

    One protocol: the folder gets the result with its protocol, the parsed-only scores and the data revision. Two:
    each protocol's folder (``released/``, ``brrm/``) gets its own, and ``folder`` the side-by-side table and
    both results.
    """
    def data(run: Scored) -> dict[str, object]:
        return {**run.all.to_dict(), "published": published, **run.to_dict(), "data_revision": dict(revision)}

    first = runs[0].all
    lines = [f"# {first.benchmark}: {first.judge.get('model', 'replayed outputs')}", "",
             f"Metric: {first.metric}. Headline: **{first.headline}**.", "",
             f"Data: {revision.get('source')} @ {revision.get('commit') or 'unknown revision'}, files sha256 "
             f"{revision.get('sha256')}, items sha256 {revision.get('items_sha256')}.", "",
             *protocol_table_lines(runs, published, markdown=True), ""]
    for run in runs:
        lines += [f"- {run.label}: {note}" for note in run.all.notes]
        if run.all.cost is not None:
            lines.append(f"- {run.label} {cost_line(run.all)}")
        where = f"{run.label} " if len(runs) > 1 else ""
        lines += [f"- {where}calibration, {label}: ECE {m['ece']:.4f}, Brier {m['brier']:.4f}, "
                  f"log loss {m['log_loss']:.4f} (n {m['n']})" for label, m in run.calibration.items()]
    if len(runs) == 1:
        body: dict[str, object] = data(runs[0])
    else:
        body = {"benchmark": first.benchmark, "published": published, "data_revision": dict(revision),
                "protocols": [data(run) for run in runs]}
        for run in runs:
            write_result(folder / run.label, run.all, published, extra=data(run))
    (folder / RESULT_JSON).write_text(json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n",
                                      encoding="utf-8")
    (folder / RESULT_MD).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_result(folder: Path, result: BenchResult, published: float | None = None, *,
                 extra: Mapping[str, object] | None = None,
                 calibration: Mapping[str, Mapping[str, object]] | None = None) -> None:
    """Write ``result.json`` and ``result.md`` into ``folder`` (``extra``: further JSON fields; ``calibration``:
    label -> ECE/Brier/log loss figures of :mod:`brrm.bench.calibration_report`, kept under ``"calibration"`` and
    listed in ``result.md``)."""
    data = {**result.to_dict(), "published": published, **(extra or {}),
            **({"calibration": dict(calibration)} if calibration else {})}
    text = json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False)
    (folder / RESULT_JSON).write_text(text + "\n", encoding="utf-8")
    md = markdown(result, published)
    for label, m in (calibration or {}).items():
        md += (f"- calibration, {label}: ECE {fmt(m['ece'])}, Brier {fmt(m['brier'])}, "
               f"log loss {fmt(m['log_loss'])} (n {m['n']})\n")
    (folder / RESULT_MD).write_text(md, encoding="utf-8")
