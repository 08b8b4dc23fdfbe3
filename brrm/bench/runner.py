"""Run any :class:`~brrm.RewardJudge` on a benchmark with the benchmark's presentation-order protocol.

Pairwise judges (BR-RM) judge every presentation the protocol lists, one ordered judgment each (``swap=False``:
the protocol, not the judge's swap setting, decides the orders). Scalar reward models (Bradley–Terry, principle)
score every response once and every presentation is derived from those rewards (σ(r_first − r_second), a tie
within the judge's ``margin``), so N-way items cost N rewards, not N·(N−1) judgments. Items are judged in chunks
of about the judge's preferred ``chunk_size``; each finished chunk goes to ``sink`` (the output file), so an
interrupted run keeps what it finished and can resume. Every result depends only on the item, the options and
the seeds: sampler streams are keyed by ``<item id>#<pair><AB|BA>`` and random orders by (order seed, item id,
pair).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from brrm.bench.core import BenchItem, Cost, ItemResult, Shown, presentations, shown_from_rewards
from brrm.types.protocols import RewardJudge

Progress = Callable[[float], None] | None
Sink = Callable[[list[ItemResult]], None] | None


def is_pairwise(judge: RewardJudge) -> bool:
    """Whether the judge is a pairwise model (BR-RM) rather than a scalar reward model."""
    return bool(judge.info.pairwise)


def planned_judgments(judge: RewardJudge, items: Sequence[BenchItem], *, orders: str, seed: int) -> int:
    """Model calls a run will make: ordered judgments (pairwise judges; x samples under self-consistency voting) or
    scored responses (scalar models)."""
    if is_pairwise(judge):
        samples = int(judge.info.options.get("samples", 1))
        return samples * sum(len(presentations(orders, it, seed=seed)) for it in items)
    return sum(len(it.responses) for it in items)


def _chunks(items: Sequence[BenchItem], size: int, weight: Callable[[BenchItem], int]) -> Iterator[list[BenchItem]]:
    part: list[BenchItem] = []
    load = 0
    for item in items:
        part.append(item)
        load += weight(item)
        if load >= size:
            yield part
            part, load = [], 0
    if part:
        yield part


def run(judge: RewardJudge, items: Sequence[BenchItem], *, orders: str, seed: int = 0, progress: Progress = None,
        sink: Sink = None, done: Mapping[str, ItemResult] | None = None) -> tuple[list[ItemResult], Cost]:
    """Judge every item under the order policy; returns results in item order and the cost of this run.

    Args:
        judge: any :class:`~brrm.RewardJudge` (from :func:`brrm.load`).
        items: the benchmark items.
        orders: ``both``, ``given`` or ``random`` (see :func:`brrm.bench.core.presentations`).
        seed: the order seed of ``random``.
        progress: called with finished judgments (or scored responses).
        sink: called with each finished chunk of results (e.g. to append them to the output file).
        done: results of an interrupted earlier run, by item id: those items are not judged again.

    Raises:
        ConfigError: on inputs the judge refuses (before any model call for that chunk).
    """
    done = done or {}
    todo = [it for it in items if it.id not in done]
    pairwise = is_pairwise(judge)
    size = max(1, int(judge.info.chunk_size))
    cost = [0, 0, 0]
    fresh: dict[str, ItemResult] = {}
    started = time.perf_counter()
    for part in _chunks(todo, size, (lambda it: len(presentations(orders, it, seed=seed))) if pairwise
                        else (lambda it: len(it.responses))):
        judged = (_pairwise_chunk if pairwise else _scalar_chunk)(judge, part, orders, seed, progress, cost)
        fresh.update((r.item.id, r) for r in judged)
        if sink is not None:
            sink(judged)
    seconds = time.perf_counter() - started
    results = [done.get(it.id) or fresh[it.id] for it in items]
    return results, Cost(cost[0], cost[1], cost[2], seconds, "judgments" if pairwise else "rewards")


def _pairwise_chunk(judge: RewardJudge, part: list[BenchItem], orders: str, seed: int, progress: Progress,
                    cost: list[int]) -> list[ItemResult]:
    plan = [(it, k, swapped) for it in part for k, swapped in presentations(orders, it, seed=seed)]
    from brrm.service.items import PairItem, PairsCall
    from brrm.service.run import run

    jobs = []
    for it, k, swapped in plan:
        p = it.pairs[k]
        a, b = (p.j, p.i) if swapped else (p.i, p.j)
        order = "BA" if swapped else "AB"
        jobs.append(PairItem(it.conversation, it.responses[a], it.responses[b], f"{it.id}#{k}{order}"))
    judged = run(judge, jobs, call=PairsCall(swap=False), progress=progress)
    shown: dict[str, list[Shown]] = {it.id: [] for it in part}
    for (it, k, swapped), j in zip(plan, judged, strict=True):
        shown[it.id].append(Shown(k, swapped, j))
        cost[0] += max(1, j.samples)  # self-consistency voting: each sample is one model run
        cost[1] += j.generated_tokens
        cost[2] += j.prompt_tokens
    return [ItemResult(it, tuple(shown[it.id])) for it in part]


def _scalar_chunk(judge: RewardJudge, part: list[BenchItem], orders: str, seed: int, progress: Progress,
                  cost: list[int]) -> list[ItemResult]:
    convs = [it.conversation for it in part for _ in it.responses]
    texts = [r for it in part for r in it.responses]
    ids = [f"{it.id}#r{m}" for it in part for m in range(len(it.responses))]
    from brrm.service.items import ScoreItem
    from brrm.service.run import run

    rewards = run(judge, [ScoreItem(c, t, id=i) for c, t, i in zip(convs, texts, ids, strict=True)],
                  progress=progress)
    margin = float(judge.info.options.get("margin", 0.0) or 0.0)
    from brrm.calibration.apply import CalibratedScalarJudge

    # a calibrated scalar judge: the pairs shown get σ(s·Δ), the raw rewards kept beside them
    calibration = judge.calibration if isinstance(judge, CalibratedScalarJudge) else None
    out, pos = [], 0
    for it in part:
        mine = tuple(rewards[pos:pos + len(it.responses)])
        pos += len(it.responses)
        shown = shown_from_rewards(it, mine, presentations(orders, it, seed=seed), margin=margin)
        if calibration is not None:
            shown = tuple(replace(s, judgment=calibration.apply(s.judgment)) for s in shown)
        out.append(ItemResult(it, shown, mine))
        cost[0] += len(mine)
        cost[2] += sum(r.input_tokens for r in mine)
    return out
