"""``brrm judge``: pairwise judgments of records, streamed as JSONL, with verdict lines and a summary.

Output contract: one JSON object per input record, in input order, to ``--output`` (or stdout), each written and
flushed as soon as it and every earlier record are done; a one-line verdict per pair the moment that pair is done,
and a summary, to the terminal (stderr when JSONL goes to stdout). Malformed records become ``invalid_input``
lines with their line number; the rest are judged. ``--resume`` continues a killed run's file.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

from brrm.cli import common
from brrm.cli.command import Command
from brrm.cli.resume import ResumePlan, resume_plan, resumed_output
from brrm.progress import Progress
from brrm.types.protocols import RewardJudge
from brrm.types.retry import kept_note


def _arguments(p: argparse.ArgumentParser) -> None:
    common.add_input_args(p, verb="judge", fields="id, conversation, prompt, response_a, response_b, label")
    common.add_model_args(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no per-pair lines, summary only")
    common.add_resume_arg(p)
    common.add_retry_failed_arg(p)


def run(args: argparse.Namespace) -> int:
    """Read records, judge them, stream JSONL, print verdicts and a summary; returns the exit code."""
    from brrm.records import FieldMap, RecordError, read_records

    common.check_output(args.output, args)
    common.load_options(args)  # flag combinations are checked before reading or loading anything
    skip = common.resumed_lines(args)
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "pairs", fields=fields, limit=args.limit, format=args.input_format)
    common.require_records(records, args.input)
    term = common.terminal(args.output)
    common.report_bad_records(records, term)
    repeated = common.report_duplicate_ids(records, term)
    common.report_resume(skip, len(records), args.output, term)
    judge = common.load_judge(args, kind="brrm")
    common.header(term, "judge", judge, len(records), args.input)
    plan = _resume_plan(args, skip, judge, term)
    n_good = sum(not isinstance(r, RecordError) for r in records[skip:]) + len(plan.retry)
    print(f"cost: {judge.judgment_cost('pairs', n_good).describe()}", file=term)
    results: dict[int, Any] = {}
    started = time.perf_counter()
    with resumed_output(args.output, plan) as sink:
        _judge(judge, plan.todo(records, sink, invalid_row), results, sink, args, term, plan)
    ran = [r for k, r in enumerate(records) if plan.judged(k)]
    summary(term, list(results.values()), ran, time.perf_counter() - started, kept=skip - len(plan.retry),
            repeated=repeated.describe())
    if plan.kept:
        print(f"  note: {kept_note(plan.kept, what='kept lines')}", file=term)
    judge.close()
    return 0


def _resume_plan(args: argparse.Namespace, skip: int, judge: RewardJudge, term: TextIO) -> ResumePlan:
    """Which kept lines a resume judges again (:mod:`brrm.cli.resume`), said on the terminal."""
    from brrm.types.retry import is_sampled

    plan = resume_plan(args.output, skip, sampled=is_sampled(judge.info), retry_failed=args.retry_failed)
    if plan.retry:
        print(f"resuming: {len(plan.retry)} kept lines failed (backend error or timeout"
              + (", or parse failure/truncation" if plan.sampled or args.retry_failed else "")
              + "): judged again in place" + (" under new seeds" if plan.sampled else ""), file=term)
    return plan


def invalid_row(rec: Any) -> dict[str, Any]:
    """The output line of a malformed record."""
    return {"id": rec.id, "line": rec.line, "winner": "none", "status": "invalid_input", "reason": rec.reason}


def _judge(judge: RewardJudge, good: list[tuple[int, Any]], results: dict[int, Any], sink: common.OrderedLines,
           args: argparse.Namespace, term: TextIO, plan: ResumePlan) -> None:
    """Judge ``(position, record)`` pairs; each result goes to ``sink`` and the terminal as soon as it is final.
    Results are filed by position, never by id: records whose ids repeat each get their own line."""
    from brrm.calibration.data import content_key
    from brrm.records import seed_ids
    from brrm.service.items import PairItem
    from brrm.service.run import run as run_jobs

    recs = [r for _, r in good]
    ids = [plan.seed_id(k, i) for (k, _), i in zip(good, seed_ids(recs), strict=True)]
    jobs = [PairItem(r.conversation, r.response_a, r.response_b, id=i, label=r.label)
            for r, i in zip(recs, ids, strict=True)]
    written = common.WrittenCount([k for k, _ in good])
    with Progress(len(good), desc="judging (pairs written)", unit="pair", disable=args.no_progress) as bar:
        def finished(i: int, res: Any) -> None:
            k, rec = good[i]
            res = common.with_id(res, rec.id)
            results[k] = res
            sink.put(k, {"line": rec.line, "content_key": content_key(rec.conversation, rec.response_a,
                                                                      rec.response_b), **res.to_dict()})
            bar.done_to(written.upto(sink.next))
            if not args.quiet:
                bar.write(verdict_line(res.to_dict()), file=term)

        run_jobs(judge, jobs, chunk_size=judge.info.chunk_size, progress=bar.turns, on_result=finished,
            on_step=StepMeter(bar))


class StepMeter:
    """The judge's ``on_step`` hook: rows decoding and tokens per second on the progress bar, redrawn at most every
    ``every_s`` seconds while rows decode (a continuously batching backend reports every step)."""

    def __init__(self, bar: Progress, every_s: float = 0.5) -> None:
        self.bar, self.every_s = bar, every_s
        self.tokens, self.started = 0, time.perf_counter()
        self.shown = self.started

    def __call__(self, rows: int, tokens: int) -> None:
        self.tokens += tokens
        now = time.perf_counter()
        if now - self.shown >= self.every_s:
            self.shown = now
            self.bar.steps(f"{rows} rows decoding, {self.tokens / (now - self.started):.0f} tok/s")


def verdict_line(row: dict[str, Any]) -> str:
    """One terminal line per judgment."""
    p = row.get("p_a")
    prob = f"P(A>B)={p:.3f}" if isinstance(p, float) else "P(A>B)=n/a"
    parts = [f"{common.printable(row['id']):<24}", f"winner={row['winner']:<4}", f"{row['status']:<13}", prob]
    drawn = sampled_at(row)
    if drawn is not None:
        parts.append(f"sampled(T={drawn:g})")
    if row.get("consistent") is not None:
        parts.append(f"consistent={str(row['consistent']).lower()}")
    if isinstance(row.get("agreement"), float):
        parts.append(f"agreement={row['agreement']:.2f} of {len(row.get('sub_judgments', []))}")
    if row.get("label") not in (None, "none"):
        parts.append(f"label={row['label']}")
    if row.get("dimensions"):
        parts.append("dims=" + "|".join(row["dimensions"]))
    if row["status"] != "ok" or row.get("reason"):
        parts.append(f"reason={common.printable(row['reason'][:120])}")
    return "  ".join(parts)


def sampled_at(row: dict[str, Any]) -> float | None:
    """The temperature a judgment's verdict was drawn at (its ``provenance.sampling``), or None when it was greedy
    or took no sampling (a Bradley–Terry comparison): a sampled winner is one draw, which can go against P(A>B)."""
    from brrm.types.retry import record_is_sampled

    provenance = row.get("provenance") or {}
    if not isinstance(provenance, dict) or not record_is_sampled(provenance):
        return None
    return float(provenance["sampling"]["temperature"])


def _sampled_note(results: list[Any]) -> str:
    """The summary's line on sampled verdicts: at which temperature, and how many winners went against P(A>B)."""
    rows = [r.to_dict() for r in results if r.ok]
    temps = sorted({t for t in map(sampled_at, rows) if t is not None})
    if not temps:
        return ""
    against = sum(1 for row in rows if sampled_at(row) is not None and isinstance(row["p_a"], float)
                  and ((row["winner"] == "A" and row["p_a"] < 0.5) or (row["winner"] == "B" and row["p_a"] > 0.5)))
    return (f"  sampled verdicts (temperature {', '.join(f'{t:g}' for t in temps)}): each winner is one draw from the "
            f"judge, P(A>B) its probability; {against} of {len(rows)} drawn winners go against P(A>B)")


def summary(term: TextIO, results: list[Any], records: list[Any], seconds: float, kept: int = 0,
            repeated: str = "") -> None:
    """Counts by status and verdict, accuracy, consistency and throughput of this run's ``records`` (a resumed run's
    ``kept`` lines, judged before, are not read back: the header says so); ``repeated``: the input's repeated ids
    in words (:meth:`brrm.records.duplicates.DuplicateIds.describe`), said again here when not empty."""
    from brrm.records import RecordError
    from brrm.types import Verdict, summarize
    from brrm.types.usage import token_line, token_report

    s = summarize(results)
    gen = sum(r.generated_tokens for r in results)
    invalid = sum(isinstance(r, RecordError) for r in records)
    print(f"summary of this run (the {kept} lines kept from before are not counted):" if kept else "summary:",
          file=term)
    print(f"  records {len(records)}; judged {s.total}; invalid records {invalid}", file=term)
    if repeated:
        print(f"  duplicate ids: {common.printable(repeated)} (each record has its own line)", file=term)
    print(f"  verdicts A {s.by_winner['A']}, B {s.by_winner['B']}, tie {s.by_winner['tie']}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(s.by_status.items()) if v), file=term)
    if note := _sampled_note(results):
        print(note, file=term)
    print(f"  parse failures {s.by_status['parse_failure']}; truncations {s.by_status['truncated']}; "
          f"backend errors {s.by_status['backend_error']}", file=term)
    any_label = any(r.label is not Verdict.NONE for r in results)
    acc = (f"{s.accuracy:.3f} ({s.correct}/{s.labelled} labelled ok pairs)" if s.labelled
           else "n/a (no labelled pair was judged ok)" if any_label else "n/a (no pair judged)" if not results
           else "n/a (no labels)")
    print(f"  accuracy {acc}", file=term)
    if s.swapped:
        print(f"  swap consistency rate {s.consistency_rate:.3f} ({s.consistent}/{s.swapped})", file=term)
    voted = [r.agreement for r in results if r.ok and r.samples > 1 and r.agreement == r.agreement]
    if voted:
        print(f"  voting: {results[0].samples} samples per order; mean agreement {sum(voted) / len(voted):.3f} "
              f"({len(voted)} voted pairs)", file=term)
    if s.order_labelled:
        print(f"  order-averaged accuracy {s.order_averaged_accuracy:.3f} (each order scored alone, as LLMBar's "
              "correct_average; a position-inconsistent tie earns half)", file=term)
    print(f"  time {seconds:.1f} s; generated tokens {gen} ({gen / max(seconds, 1e-9):.1f}/s)", file=term)
    print(f"  {token_line(token_report(results, seconds))}", file=term)


COMMAND = Command(
    "judge", arguments=_arguments, run=run, progress=True,
    help="judge response pairs (JSONL/JSON/Parquet/CSV records)",
    description="Judge each record's response_a against response_b with any model kind "
                "(BR-RM natively; scalar models through sigma(r_A - r_B)).")
