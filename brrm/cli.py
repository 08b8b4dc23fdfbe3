"""The ``brrm`` command line: ``brrm judge`` (pairwise judging of records) and friends.

Output contract of ``brrm judge``: one JSON object per input record, in input order, to ``--output``
(or stdout); a one-line verdict per pair and a summary to the terminal (stderr when JSONL goes to
stdout). Malformed records become ``invalid_input`` lines with their line number; the rest are judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TextIO

from brrm.errors import BrrmError, ConfigError
from brrm.types import SamplingConfig

EMBEDDED_BUDGETS = {"max_new_tokens_per_turn": 400, "max_total_tokens": 4096, "block_token_cap": 32}
"""Budgets of the embedded 135M demo model (the published BR-RM budgets are 8192 per turn, 16384 total)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brrm`` console script; returns the exit code."""
    import os

    # outlines' mask kernel is torch.compile'd; on CPU its first call would spend 10-23 s compiling
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except BrrmError as exc:
        print(f"brrm: error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brrm", description="Judge LLM responses with reward models.")
    sub = parser.add_subparsers(dest="command")
    _add_judge(sub)
    try:
        from brrm.cli_rewards import add_score_parser
    except ImportError:  # pragma: no cover - the rewards CLI ships with the reward models
        pass
    else:
        add_score_parser(sub)
    return parser


def _add_judge(sub: Any) -> None:
    p = sub.add_parser("judge", help="judge response pairs (JSONL/JSON/Parquet/CSV records)",
                       description="Judge each record's response_a against response_b.")
    p.add_argument("--input", "-i", required=True, help="records file (.jsonl, .json, .parquet, .csv, .tsv)")
    p.add_argument("--output", "-o", default="-", help="JSONL output path ('-' = stdout, the default)")
    p.add_argument("--model", "-m", default=None,
                   help="hub id or local dir (e.g. nvidia/Qwen3-Nemotron-14B-BRRM); default: the embedded "
                        "SmolLM2-135M-Instruct demo model")
    p.add_argument("--model-type", choices=("brrm", "bt", "principle"), default="brrm",
                   help="brrm: two-turn BR-RM judge; bt: Bradley-Terry scalar RM; principle: RLBFF principle RM")
    p.add_argument("--principle", action="append", default=None,
                   help="principle for --model-type principle (repeatable)")
    p.add_argument("--backend", choices=("transformers", "vllm", "openai"), default="transformers")
    p.add_argument("--base-url", action="append", default=None, help="OpenAI-compatible server URL (repeatable)")
    p.add_argument("--served-model-name", default=None, help="openai: the model name the server expects")
    p.add_argument("--max-model-len", type=int, default=None, help="vllm: engine context length")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm: GPUs per model replica")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vllm: fraction of GPU memory")
    p.add_argument("--decoding", choices=("constrained", "faithful"), default="constrained")
    p.add_argument("--swap", action="store_true", help="judge both orders; disagreement is a tie")
    p.add_argument("--thinking", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--limit", type=int, default=None, help="judge only the first N records")
    p.add_argument("--batch-size", type=int, default=8, help="rows decoded together (transformers backend)")
    p.add_argument("--temperature", type=float, default=None, help="default 1.0 (published)")
    p.add_argument("--top-p", type=float, default=None, help="default 1.0 (published)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="per turn; default 8192 (published)")
    p.add_argument("--max-total-tokens", type=int, default=None, help="whole two-turn sequence; default 16384")
    p.add_argument("--block-token-cap", type=int, default=None, help="constrained free-text block cap")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-retries", type=int, default=0, help="re-runs of failed/truncated judgments")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda")
    p.add_argument("--field", action="append", default=None, metavar="FIELD=COLUMN",
                   help="remap an input column, e.g. --field prompt=instruction (fields: id, conversation, "
                        "prompt, response_a, response_b, label)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--quiet", "-q", action="store_true", help="no per-pair lines, summary only")
    p.set_defaults(func=run_judge)


@dataclass
class _Plan:
    model: str
    embedded: bool
    sampling: SamplingConfig
    block_token_cap: int


def _plan(args: argparse.Namespace) -> _Plan:
    embedded = args.model is None
    if embedded and args.model_type != "brrm":
        raise ConfigError(f"--model-type {args.model_type} needs --model (a {args.model_type} reward model); the "
                          "embedded demo model is a generative chat model, usable only with --model-type brrm")
    model = args.model
    if embedded:
        from brrm.embedded import embedded_model_dir

        model = str(embedded_model_dir())
    budgets = EMBEDDED_BUDGETS if embedded else {}
    defaults = SamplingConfig()
    sampling = SamplingConfig(
        temperature=defaults.temperature if args.temperature is None else args.temperature,
        top_p=defaults.top_p if args.top_p is None else args.top_p,
        max_new_tokens_per_turn=args.max_new_tokens or budgets.get("max_new_tokens_per_turn",
                                                                   defaults.max_new_tokens_per_turn),
        max_total_tokens=args.max_total_tokens or budgets.get("max_total_tokens", defaults.max_total_tokens),
        seed=args.seed,
    )
    cap = args.block_token_cap or budgets.get("block_token_cap", 512)
    return _Plan(model, embedded, sampling, cap)


def _build_judge(args: argparse.Namespace, plan: _Plan) -> Any:
    if args.model_type != "brrm":
        from brrm.cli_rewards import build_pairwise_judge

        return build_pairwise_judge(args.model_type, plan.model, principles=args.principle,
                                    backend=args.backend, batch_size=args.batch_size, dtype=args.dtype,
                                    device=args.device)
    from brrm.backends import load_backend
    from brrm.judges.brrm import BRRMConfig, BRRMJudge

    options: dict[str, Any] = {"batch_size": args.batch_size, "dtype": args.dtype, "device": args.device}
    if args.backend == "vllm":
        options = {"dtype": args.dtype, "seed": args.seed, "max_model_len": args.max_model_len,
                   "tensor_parallel_size": args.tensor_parallel_size,
                   "gpu_memory_utilization": args.gpu_memory_utilization}
    elif args.backend == "openai":
        options = {"base_urls": args.base_url or [], "served_model_name": args.served_model_name}
    backend = load_backend(args.backend, plan.model, **options)
    config = BRRMConfig(decoding=args.decoding, sampling=plan.sampling, thinking=args.thinking,
                        block_token_cap=plan.block_token_cap, swap=args.swap, max_retries=args.max_retries)
    return BRRMJudge(backend, config)


def _quiet_libraries() -> None:
    """Keep the terminal for our own progress bar and verdict lines (no per-library loading bars)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def run_judge(args: argparse.Namespace) -> int:
    """``brrm judge``: read records, judge them in chunks, stream JSONL, print verdicts and a summary."""
    from brrm.records import FieldMap, RecordError, read_pair_records

    _quiet_libraries()
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_pair_records(args.input, fields=fields, limit=args.limit)
    plan = _plan(args)
    to_stdout = args.output == "-"
    term = sys.stderr if to_stdout else sys.stdout
    _print_header(term, args, plan, len(records))
    judge = _build_judge(args, plan)
    good = [r for r in records if not isinstance(r, RecordError)]
    by_line: dict[int, Any] = {}
    started = time.perf_counter()
    sink = nullcontext(sys.stdout) if to_stdout else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    with sink as out:
        _judge_in_chunks(judge, good, by_line, args, term)
        for rec in records:
            row = ({"line": rec.line, **by_line[rec.line].to_dict()} if not isinstance(rec, RecordError)
                   else _invalid_row(rec))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    _print_summary(term, list(by_line.values()), records, time.perf_counter() - started, args)
    return 0


def _invalid_row(rec: Any) -> dict[str, Any]:
    return {"id": rec.id, "line": rec.line, "winner": "none", "status": "invalid_input", "reason": rec.reason}


def _judge_in_chunks(judge: Any, good: list[Any], by_line: dict[int, Any], args: argparse.Namespace,
                     term: TextIO) -> None:
    from tqdm import tqdm

    # transformers: one decoding batch per chunk; vLLM / servers: large chunks so the engine can schedule
    chunk = max(1, args.batch_size, int(getattr(getattr(judge, "backend", None), "judge_chunk_size", 0)))
    with tqdm(total=len(good), desc="judging", unit="pair", disable=args.no_progress, file=sys.stderr) as bar:
        for start in range(0, len(good), chunk):
            part = good[start:start + chunk]
            results = judge.judge_pairs([r.conversation for r in part], [r.response_a for r in part],
                                        [r.response_b for r in part], ids=[r.id for r in part],
                                        labels=[r.label for r in part])
            for rec, res in zip(part, results, strict=True):
                by_line[rec.line] = res
                if not args.quiet:
                    bar.write(_verdict_line(res.to_dict()), file=term)
            bar.update(len(part))


def _verdict_line(row: dict[str, Any]) -> str:
    p = row.get("p_a")
    prob = f"P(A>B)={p:.3f}" if isinstance(p, float) else "P(A>B)=n/a"
    parts = [f"{row['id']:<24}", f"winner={row['winner']:<4}", f"{row['status']:<13}", prob]
    if row.get("sub_judgments"):
        parts.append(f"consistent={str(row['consistent']).lower()}")
    if row.get("label") not in (None, "none"):
        parts.append(f"label={row['label']}")
    if row.get("dimensions"):
        parts.append("dims=" + "|".join(row["dimensions"]))
    if row["status"] != "ok" or row.get("reason"):
        parts.append(f"reason={row['reason'][:120]}")
    return "  ".join(parts)


def _print_header(term: TextIO, args: argparse.Namespace, plan: _Plan, n: int) -> None:
    s = plan.sampling
    name = "embedded SmolLM2-135M-Instruct (demo; pass --model for a real BR-RM)" if plan.embedded else plan.model
    print(f"brrm judge: {n} records from {args.input}; model {name}; backend {args.backend}; "
          f"type {args.model_type}; decoding {args.decoding}; swap {args.swap}", file=term)
    print(f"budgets: temperature {s.temperature}, top_p {s.top_p}, {s.max_new_tokens_per_turn} new tokens "
          f"per turn, {s.max_total_tokens} total, block cap {plan.block_token_cap}, seed {s.seed}"
          + (" (small demo budgets; published: 8192 per turn, 16384 total)" if plan.embedded else ""), file=term)
    if args.decoding == "constrained" and args.model_type == "brrm":
        print("note: the first constrained run for a tokenizer compiles its output grammar once (seconds to a "
              "minute); it is cached on disk for later runs", file=term)


def _print_summary(term: TextIO, results: list[Any], records: list[Any], seconds: float,
                   args: argparse.Namespace) -> None:
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
    if args.swap:
        rate = f"{s.consistency_rate:.3f} ({s.consistent}/{s.swapped})" if s.swapped else "n/a"
        print(f"  swap consistency rate {rate}", file=term)
        if s.order_labelled:
            print(f"  order-averaged accuracy {s.order_averaged_accuracy:.3f} (each order scored alone, as "
                  "LLMBar's correct_average; a position-inconsistent tie earns half)", file=term)
    print(f"  time {seconds:.1f} s; generated tokens {gen} ({gen / max(seconds, 1e-9):.1f}/s)", file=term)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
