"""Reward-model benchmarks, each with its own protocol and its official metric, and replay of stored outputs.

One module per benchmark (loader, presentation-order protocol, official metric, replay of official output
files): :mod:`~brrm.bench.llmbar`, :mod:`~brrm.bench.judgebench`, :mod:`~brrm.bench.rmbench`,
:mod:`~brrm.bench.rmb`, :mod:`~brrm.bench.autoj`, :mod:`~brrm.bench.mtbench`, :mod:`~brrm.bench.pandalm`,
:mod:`~brrm.bench.rewardbench`. Shared pieces: :mod:`~brrm.bench.core` (items, presentations, results, score
rows), :mod:`~brrm.bench.data` (local files and hub ids through ``datasets``), :mod:`~brrm.bench.runner` (any
:class:`~brrm.RewardJudge` on a benchmark), :mod:`~brrm.bench.report` (JSONL / JSON / Markdown outputs, resume)
and :mod:`~brrm.bench.registry` (names for ``brrm bench NAME``).

Example::

    import brrm
    from brrm.bench import evaluate, get_benchmark

    bench = get_benchmark("llmbar")
    with brrm.load("nvidia/Qwen3-Nemotron-14B-BRRM", backend="vllm") as judge:
        result = evaluate(bench, judge, subsets=["Natural"], limit=50)
    print(result.scores)
"""

from __future__ import annotations

from collections.abc import Sequence

from brrm.bench.base import Benchmark
from brrm.bench.core import BenchItem, BenchResult, Cost, ItemResult, Pair, Row, Shown
from brrm.bench.registry import BENCHMARKS, get_benchmark, names
from brrm.types.protocols import RewardJudge

__all__ = ["BENCHMARKS", "BenchItem", "BenchResult", "Benchmark", "Cost", "ItemResult", "Pair", "Row", "Shown",
           "evaluate", "get_benchmark", "names"]


def evaluate(bench: Benchmark, judge: RewardJudge, *, subsets: Sequence[str] | None = None, limit: int | None = None,
             orders: str | None = None, order_seed: int = 0, data_dir: str | None = None,
             data: str | None = None) -> BenchResult:
    """Run ``judge`` on ``bench`` with its protocol and score it with its official metric (no files written).

    Args:
        bench: from :func:`get_benchmark`.
        judge: any :class:`~brrm.RewardJudge`.
        subsets: subset names (default: all); ``limit``: first N items per subset.
        orders: None / ``official`` (the benchmark's protocol) or ``both`` where the metric allows it.
        order_seed: seed of the benchmark's random presentation orders.
        data_dir: the local data root; ``data``: a hub id or local copy for hub-only data (RewardBench).

    Returns:
        The :class:`BenchResult`, with the run's cost, the judge's info and the data's revision and digests
        (``data_revision``: what ``run.json`` records); a note names item ids that repeat, with their counts.

    Raises:
        ConfigError: for unknown subsets or orders, missing data, or inputs the judge refuses.
    """
    from dataclasses import replace

    from brrm.bench.data import run_revision, with_data
    from brrm.bench.runner import run

    policy = bench.orders(orders)
    items = bench.load(bench.resolve_subsets(subsets), root=data_dir, limit=limit, source=data)
    results, cost = run(judge, items, orders=policy, seed=order_seed)
    return with_data(replace(bench.score(results), cost=cost, judge=judge.info.to_dict()), items,
                     run_revision(bench, items, root=data_dir, source=data))
