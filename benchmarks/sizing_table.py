"""The sizing table of docs/performance.md: BR-RM's prompt tokens per turn on the real benchmarks, and the judgments
(and tokens) per second a deployment must sustain for a named RLHF step shape.

Run it from the repository root (about a minute per 10,000 pairs on one CPU core)::

    python benchmarks/sizing_table.py                    # every local benchmark, the default step shape
    python benchmarks/sizing_table.py --limit 20 --json sizing.json

Method. Every pair each benchmark asks for (:mod:`brrm.bench` loaders over ``../shared/data``, each folder's
``SOURCE.md`` naming its upstream commit), in the frame the benchmark gives it (response ``i`` shown first), is sent
through brrm's own BR-RM judge in ``faithful`` decoding (the released prompts and input policies, which match
``../shared/reference/brrm`` byte for byte) on a scripted backend over the exact Qwen3 tokenizer
(:func:`brrm.testing.tokenizers.build_qwen3_tokenizer`, offline). The backend generates nothing (an empty turn 1),
so the prompts it is sent are measured exactly: turn 1's prompt ``P1``, and turn 2's ``P1 + C`` where ``C`` is the
seam and the turn-2 message through the chat template. With ``g1`` generated turn-1 tokens turn 2's prompt is
``P1 + g1 + C`` (exact for ``turn2_tokens=concat``; the released re-tokenization of ``T1 + "\\n"`` may merge one
token at the seam). Generated tokens are a stated parameter, never measured here: the published budget (8,192 new
tokens per turn, ``../shared/reference/README.md``) and the embedded demo's measured lengths (SmolLM2-135M, a demo,
not BR-RM's own lengths).

Step shape. ``--group`` completions per prompt judged circularly (completion i against i+1, the last against the
first: ``group`` pairs), in both orders (swap), for ``--prompts`` prompts per step, the rewards due within
``--step-seconds``: judgments per second = group x 2 x prompts / step seconds. Tokens per second follow from the
measured prompts and the stated generation lengths. No throughput of any engine is assumed or invented.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"

BENCHMARKS = ("llmbar", "judgebench", "rm-bench", "rmb", "autoj", "pandalm", "evalbiasbench")
"""The benchmarks whose pairs are in ``../shared/data`` (RewardBench 1 and 2 and MT-Bench's human judgments are read
from the hub: not here)."""

BUDGET = 8192
"""Published new-token budget per turn (``../shared/reference/README.md``: 8192 per turn, 16384 in total)."""

TOTAL_LIMIT = 16384
"""Published limit on a whole judgment's sequence in tokens (``../shared/reference/README.md``)."""

DEMO_GENERATED = (136, 127)
"""Mean generated tokens of turn 1 and turn 2 of the embedded demo (SmolLM2-135M-Instruct, constrained decoding,
400 new tokens per turn, temperature 1.0, seed 0) on the 8 pairs of examples/pairs.jsonl, read off the judgments'
``turns`` (``brrm judge --input examples/pairs.jsonl``, 2026-12-07): 135.9 and 126.8, in SmolLM2's tokens. A demo,
not BR-RM's own lengths."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python benchmarks/sizing_table.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(DATA), help="folder holding LLMBar/, RM-Bench/, ... (default "
                   "../shared/data)")
    p.add_argument("--benchmark", action="append", choices=BENCHMARKS, help="benchmark to measure (repeatable; "
                   "default: all of them)")
    p.add_argument("--limit", type=int, default=None, help="first N items of each subset (default: all)")
    p.add_argument("--budget", type=int, default=BUDGET, help="generated tokens per turn at the budget "
                   f"(default {BUDGET}, published)")
    p.add_argument("--demo-generated", default=",".join(map(str, DEMO_GENERATED)), help="turn-1,turn-2 mean "
                   "generated tokens labelled demo (default: the embedded demo's measured lengths)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (GRPO group), default 8")
    p.add_argument("--prompts", type=int, default=128, help="prompts per RLHF step, default 128")
    p.add_argument("--step-seconds", type=float, default=60.0, help="seconds the step's rewards are due in, "
                   "default 60 (an assumption: set your own)")
    p.add_argument("--json", default=None, help="also write the figures (and every pair's measured counts) as JSON")
    p.add_argument("--measured", nargs="+", default=None, help="re-render from the pairs' counts in earlier --json "
                   "files instead of measuring (benchmarks in the order given)")
    args = p.parse_args(argv)
    for name in ("limit", "budget", "group", "prompts"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.step_seconds <= 0:
        p.error(f"--step-seconds must be > 0, got {args.step_seconds}")
    try:
        demo = tuple(int(x) for x in args.demo_generated.split(","))
    except ValueError:
        demo = ()
    if len(demo) != 2 or min(demo) < 0:
        p.error(f"--demo-generated takes two counts >= 0 as T1,T2, got {args.demo_generated!r}")
    args.demo = demo
    return args


def measuring_judge():  # type: ignore[no-untyped-def]
    """BR-RM's judge in faithful decoding over the exact Qwen3 tokenizer on a backend that generates nothing: the
    prompts it sends are the released prompts, and every turn's prompt is recorded on its judgment."""
    from brrm.backends.base import Completion
    from brrm.backends.fake import FakeBackend
    from brrm.judges.brrm import BRRMConfig, BRRMJudge
    from brrm.testing.tokenizers import build_qwen3_tokenizer
    from brrm.types import SamplingConfig

    backend = FakeBackend(build_qwen3_tokenizer(), lambda prompt, request: Completion((), "", "stop"),
                          model_id="Qwen3 tokenizer (sizing)", max_context=1 << 30)
    backend.prompts = _Discard()  # the texts are not needed; keeping thousands of long prompts is
    sampling = SamplingConfig(temperature=0, max_new_tokens=BUDGET, max_total_tokens=1 << 30)
    return BRRMJudge(backend, BRRMConfig(decoding="faithful", sampling=sampling, max_retries=0))


class _Discard(list):  # type: ignore[type-arg]
    """A list that keeps nothing appended to it."""

    def append(self, _item: object) -> None:
        return None


def pairs_of(name: str, root: str, limit: int | None) -> list[tuple[object, str, str]]:
    """(conversation, first shown, second shown) of every pair the benchmark asks for, in its given frame."""
    from brrm.bench.registry import get_benchmark

    bench = get_benchmark(name)
    items = bench.load(bench.subsets, root=root, limit=limit)
    # a few PandaLM responses are JSON booleans: shown as Python formats them, as a released script's f-string would
    return [(it.conversation, str(it.responses[p.i]), str(it.responses[p.j])) for it in items for p in it.pairs]


def measure(judge, pairs: list[tuple[object, str, str]]) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """(P1 lengths, C lengths) of every pair, in tokens, read off the judgments' turns (what the backend was sent).

    Raises:
        RuntimeError: when a pair's prompts were not both sent (the judge refused the record).
    """
    p1: list[int] = []
    seam: list[int] = []
    chunk = 256
    for lo in range(0, len(pairs), chunk):
        part = pairs[lo:lo + chunk]
        results = judge.judge_ordered([c for c, _, _ in part], [a for _, a, _ in part], [b for _, _, b in part])
        for j in results:
            if len(j.turns) != 2:
                raise RuntimeError(f"a pair was not sent in two turns: {j.status.value}: {j.reason}")
            t1, t2 = j.turns
            p1.append(t1.prompt)
            seam.append(t2.prompt - t1.prompt - t1.generated)
    return p1, seam


def spread(values: Sequence[float]) -> dict[str, float]:
    """mean, p50, p95 (linear interpolation, numpy's default) and max of ``values``."""
    qs = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else [values[0]] * 19
    return {"mean": round(statistics.fmean(values), 1), "p50": round(statistics.median(values), 1),
            "p95": round(qs[18], 1), "max": max(values)}


def benchmark_row(name: str, p1: list[int], seam: list[int], budget: int, demo: tuple[int, int]) -> dict:  # type: ignore[type-arg]
    """One benchmark's figures: turn-1 prompt, turn-2 prompt at the demo's and at the budget's turn-1 length, and
    what turn 2 may still generate after a full turn 1 inside the published total limit (the judge gives each turn
    ``min(budget, total limit - its prompt)``)."""
    turn2_demo = [a + demo[0] + c for a, c in zip(p1, seam, strict=True)]
    turn2_budget = [a + budget + c for a, c in zip(p1, seam, strict=True)]
    return {"benchmark": name, "pairs": len(p1), "turn1_prompt": spread(p1),
            "seam_tokens": sorted(set(seam)), "turn2_prompt_demo": spread(turn2_demo),
            "turn2_prompt_budget": spread(turn2_budget),
            "turn2_budget_generated": spread([max(0, min(budget, TOTAL_LIMIT - p)) for p in turn2_budget])}


def step_demand(rows: list[dict], args: argparse.Namespace) -> dict:  # type: ignore[type-arg]
    """What the step shape asks of a deployment, per benchmark's mean prompt: judgments/s, prompt tokens/s (of
    which new with turn 1's KV reused by turn 2) and generated tokens/s, at the demo's lengths and the budget."""
    judgments = args.group * 2 * args.prompts
    rate = judgments / args.step_seconds
    out = {"judgments_per_step": judgments, "judgments_per_second": round(rate, 3), "by_benchmark": []}
    for row in rows:
        p1 = row["turn1_prompt"]["mean"]
        seam = statistics.fmean(row["seam_tokens"])
        limited = round(row["turn2_budget_generated"]["mean"])
        for label, (g1, g2) in (("demo", args.demo), ("budget", (args.budget, limited))):
            prompt = p1 + (p1 + g1 + seam)
            fresh = p1 + seam  # turn 2 reads P1 + T1 from turn 1's KV; only the seam and its message are new
            out["by_benchmark"].append({"benchmark": row["benchmark"], "generated": label, "t1": g1, "t2": g2,
                                        "prompt_tokens_per_judgment": round(prompt, 1),
                                        "prompt_tokens_per_second": round(rate * prompt),
                                        "new_prompt_tokens_per_second_with_kv_reuse": round(rate * fresh),
                                        "generated_tokens_per_second": round(rate * (g1 + g2))})
    return out


def markdown(rows: list[dict], demand: dict, args: argparse.Namespace) -> str:  # type: ignore[type-arg]
    """The two tables of docs/performance.md."""
    def cell(s: dict) -> str:  # type: ignore[type-arg]
        return f"{s['mean']:,.0f} / {s['p50']:,.0f} / {s['p95']:,.0f}"

    lines = ["| benchmark | pairs | turn-1 prompt (mean / p50 / p95) | max | turn-2 prompt, demo T1 = "
             f"{args.demo[0]} (mean / p50 / p95) | turn-2 prompt, T1 = {args.budget:,} (mean / p50 / p95) | "
             f"turn 2 may generate after T1 = {args.budget:,}, within {TOTAL_LIMIT:,} (mean / p50 / p95) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['benchmark']} | {r['pairs']:,} | {cell(r['turn1_prompt'])} | "
                     f"{r['turn1_prompt']['max']:,} | {cell(r['turn2_prompt_demo'])} | "
                     f"{cell(r['turn2_prompt_budget'])} | {cell(r['turn2_budget_generated'])} |")
    lines += ["", f"Step shape: GRPO group of {args.group}, judged circularly in both orders "
              f"({2 * args.group} judgments per prompt), {args.prompts} prompts per step, rewards due in "
              f"{args.step_seconds:g} s: **{demand['judgments_per_step']:,} judgments per step, "
              f"{demand['judgments_per_second']:,} judgments/s**.", "",
              "| benchmark | generated (T1, T2) | prompt tokens / judgment | prompt tokens/s | new prompt tokens/s "
              "(turn 2 reusing turn 1's KV) | generated tokens/s |", "|---|---|---|---|---|---|"]
    for d in demand["by_benchmark"]:
        lines.append(f"| {d['benchmark']} | {d['generated']} ({d['t1']:,}, {d['t2']:,}) | "
                     f"{d['prompt_tokens_per_judgment']:,.0f} | {d['prompt_tokens_per_second']:,} | "
                     f"{d['new_prompt_tokens_per_second_with_kv_reuse']:,} | {d['generated_tokens_per_second']:,} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the tables (and write ``--json``); 0 on success."""
    args = parse_args(argv)
    counts = measured(args.measured) if args.measured else measure_all(args)
    rows = [benchmark_row(c["benchmark"], c["p1"], c["seam"], args.budget, args.demo) for c in counts]
    demand = step_demand(rows, args)
    print(markdown(rows, demand, args))
    if args.json:
        assumptions = {"tokenizer": "Qwen3 (exact, brrm.testing.tokenizers.build_qwen3_tokenizer)",
                       "prompts": "brrm BR-RM judge, faithful decoding (released prompts), pairs in the benchmark's "
                       "given frame", "budget_per_turn": args.budget, "demo_generated": list(args.demo),
                       "group": args.group, "prompts_per_step": args.prompts, "step_seconds": args.step_seconds,
                       "limit": args.limit}
        Path(args.json).write_text(json.dumps({"assumptions": assumptions, "benchmarks": rows, "demand": demand,
                                               "counts": counts}) + "\n")
    return 0


def measure_all(args: argparse.Namespace) -> list[dict]:  # type: ignore[type-arg]
    """Every asked benchmark's pairs measured: ``{"benchmark", "p1": [...], "seam": [...]}`` each."""
    judge = measuring_judge()
    out = []
    for name in args.benchmark or BENCHMARKS:
        p1, seam = measure(judge, pairs_of(name, args.data_dir, args.limit))
        out.append({"benchmark": name, "limit": args.limit, "p1": p1, "seam": seam})
        print(f"measured {name}: {len(p1)} pairs", file=sys.stderr)
    return out


def measured(paths: Sequence[str]) -> list[dict]:  # type: ignore[type-arg]
    """The pairs' counts stored by earlier ``--json`` runs, in the order of the files."""
    return [c for path in paths for c in json.loads(Path(path).read_text())["counts"]]


if __name__ == "__main__":
    sys.exit(main())
