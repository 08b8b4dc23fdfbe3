"""``brrm judge``: pairwise judgments of records, streamed as JSONL, with verdict lines and a summary.

Output contract: one JSON object per input record, in input order, to ``--output`` (or stdout); a one-line
verdict per pair and a summary to the terminal (stderr when JSONL goes to stdout). Malformed records become
``invalid_input`` lines with their line number; the rest are judged.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

from brrm.cli import common
from brrm.types.protocols import RewardJudge


def add_parser(sub: Any) -> None:
    p = sub.add_parser("judge", help="judge response pairs (JSONL/JSON/Parquet/CSV records)",
                       description="Judge each record's response_a against response_b with any model kind "
                                   "(BR-RM natively; scalar models through sigma(r_A - r_B)).")
    common.add_input_args(p, verb="judge", fields="id, conversation, prompt, response_a, response_b, label")
    common.add_model_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--quiet", "-q", action="store_true", help="no per-pair lines, summary only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read records, judge them, stream JSONL, print verdicts and a summary; returns the exit code."""
    from brrm.records import FieldMap, RecordError, read_records

    common.check_output(args.output)
    common.load_options(args)  # flag combinations are checked before reading or loading anything
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "pairs", fields=fields, limit=args.limit, format=args.input_format)
    common.require_records(records, args.input)
    term = common.terminal(args.output)
    common.report_bad_records(records, term)
    judge = common.load_judge(args, kind="brrm")
    common.header(term, "judge", judge, len(records), args.input)
    good = [r for r in records if not isinstance(r, RecordError)]
    results: dict[int, Any] = {}
    started = time.perf_counter()
    with common.open_output(args.output) as out:
        _judge(judge, good, results, args, term)
        for rec in records:
            row = ({"line": rec.line, **results[id(rec)].to_dict()} if not isinstance(rec, RecordError)
                   else invalid_row(rec))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    summary(term, list(results.values()), records, time.perf_counter() - started)
    judge.close()
    return 0


def invalid_row(rec: Any) -> dict[str, Any]:
    """The output line of a malformed record."""
    return {"id": rec.id, "line": rec.line, "winner": "none", "status": "invalid_input", "reason": rec.reason}


def _judge(judge: RewardJudge, good: list[Any], results: dict[int, Any], args: argparse.Namespace,
           term: TextIO) -> None:
    from brrm.records import seed_ids

    chunk = judge.info.chunk_size
    with common.progress_bar(len(good), desc="judging", unit="pair", disable=args.no_progress) as bar:
        for start in range(0, len(good), chunk):
            part = good[start:start + chunk]
            done = bar.n
            out = judge.judge_pairs([r.conversation for r in part], [r.response_a for r in part],
                                    [r.response_b for r in part], ids=seed_ids(part),
                                    labels=[r.label for r in part], progress=bar.update)
            out = [common.with_id(j, r.id) for j, r in zip(out, part, strict=True)]
            bar.n = done + len(part)
            bar.refresh()
            for rec, res in zip(part, out, strict=True):
                results[id(rec)] = res
                if not args.quiet:
                    bar.write(verdict_line(res.to_dict()), file=term)


def verdict_line(row: dict[str, Any]) -> str:
    """One terminal line per judgment."""
    p = row.get("p_a")
    prob = f"P(A>B)={p:.3f}" if isinstance(p, float) else "P(A>B)=n/a"
    parts = [f"{common.printable(row['id']):<24}", f"winner={row['winner']:<4}", f"{row['status']:<13}", prob]
    if row.get("consistent") is not None:
        parts.append(f"consistent={str(row['consistent']).lower()}")
    if row.get("label") not in (None, "none"):
        parts.append(f"label={row['label']}")
    if row.get("dimensions"):
        parts.append("dims=" + "|".join(row["dimensions"]))
    if row["status"] != "ok" or row.get("reason"):
        parts.append(f"reason={common.printable(row['reason'][:120])}")
    return "  ".join(parts)


def summary(term: TextIO, results: list[Any], records: list[Any], seconds: float) -> None:
    """Counts by status and verdict, accuracy, consistency and throughput."""
    from brrm.records import RecordError
    from brrm.types import Verdict, summarize

    s = summarize(results)
    gen = sum(r.generated_tokens for r in results)
    invalid = sum(isinstance(r, RecordError) for r in records)
    print("summary:", file=term)
    print(f"  records {len(records)}; judged {s.total}; invalid records {invalid}", file=term)
    print(f"  verdicts A {s.by_winner['A']}, B {s.by_winner['B']}, tie {s.by_winner['tie']}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(s.by_status.items()) if v), file=term)
    print(f"  parse failures {s.by_status['parse_failure']}; truncations {s.by_status['truncated']}; "
          f"backend errors {s.by_status['backend_error']}", file=term)
    any_label = any(r.label is not Verdict.NONE for r in results)
    acc = (f"{s.accuracy:.3f} ({s.correct}/{s.labelled} labelled ok pairs)" if s.labelled
           else "n/a (no labelled pair was judged ok)" if any_label else "n/a (no labels)")
    print(f"  accuracy {acc}", file=term)
    if s.swapped:
        print(f"  swap consistency rate {s.consistency_rate:.3f} ({s.consistent}/{s.swapped})", file=term)
    if s.order_labelled:
        print(f"  order-averaged accuracy {s.order_averaged_accuracy:.3f} (each order scored alone, as LLMBar's "
              "correct_average; a position-inconsistent tie earns half)", file=term)
    print(f"  time {seconds:.1f} s; generated tokens {gen} ({gen / max(seconds, 1e-9):.1f}/s)", file=term)
