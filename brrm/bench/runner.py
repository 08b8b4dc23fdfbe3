"""Run any :class:`~brrm.RewardJudge` on a benchmark with the benchmark's presentation-order protocol.

Pairwise judges (BR-RM) judge every presentation the protocol lists, one ordered judgment each (``swap=False``:
the protocol, not the judge's swap setting, decides the orders). Scalar reward models (Bradley–Terry, principle)
score every response once and every presentation is derived from those rewards (σ(r_first − r_second), a tie
within the judge's ``margin``), so N-way items cost N rewards, not N·(N−1) judgments. Items are judged in chunks
of about the judge's preferred ``chunk_size``; each finished chunk goes to ``sink`` (the output file), so an
interrupted run keeps what it finished and can resume. Every result depends only on the item, the options and
the seeds: sampler streams are keyed by ``<item id>#<pair><AB|BA>`` and random orders by (order seed, item id,
pair). Results are filed and resumed by each item's position and content (:func:`brrm.bench.core.item_keys`),
never by its id: a benchmark file whose ids repeat keeps every item apart (they are not refused — real data
has such files — and no item ever gets another's result).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from brrm.bench.core import BenchItem, Cost, ItemResult, Shown, item_keys, presentations, shown_from_rewards
from brrm.types import PairwiseJudgment, ScalarReward
from brrm.types.protocols import RewardJudge
from brrm.types.usage import token_report

Progress = Callable[[float], None] | None
Sink = Callable[[list[ItemResult]], None] | None


def is_pairwise(judge: RewardJudge) -> bool:
    """Whether the judge is a pairwise model (BR-RM) rather than a scalar reward model."""
    return bool(judge.info.pairwise)


def planned_judgments(judge: RewardJudge, items: Sequence[BenchItem], *, orders: str, seed: int) -> int:
    """Model calls a run will make: ordered judgments (pairwise judges; x samples under self-consistency voting) or
    scored responses (scalar models)."""
    if is_pairwise(judge):  # each presentation one ordered judgment
        return judge.cost("pairs", sum(len(presentations(orders, it, seed=seed)) for it in items), swap=False)
    return judge.cost("score", sum(len(it.responses) for it in items))


def _chunks(items: Sequence[int], size: int, weight: Callable[[int], int]) -> Iterator[list[int]]:
    part: list[int] = []
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
        sink: Sink = None, done: Mapping[str, ItemResult] | None = None,
        seed_ids: Mapping[str, str] | None = None) -> tuple[list[ItemResult], Cost]:
    """Judge every item under the order policy; returns results in item order and the cost of this run.

    Results are filed by position and identity (:func:`brrm.bench.core.item_keys`), never by the benchmark's
    ids: items whose ids repeat are judged apart and each gets its own result.

    Args:
        judge: any :class:`~brrm.RewardJudge` (from :func:`brrm.load`).
        items: the benchmark items.
        orders: ``both``, ``given`` or ``random`` (see :func:`brrm.bench.core.presentations`).
        seed: the order seed of ``random``.
        progress: called with finished judgments (or scored responses).
        sink: called with each finished chunk of results (e.g. to append them to the output file).
        done: results of an interrupted earlier run, by item key: those items are not judged again.
        seed_ids: item key -> the id its sampler streams are keyed by, where not the item's own id (a resumed
            sampled retry: :func:`brrm.seeds.retry_id`).

    Raises:
        ConfigError: on inputs the judge refuses (before any model call for that chunk).
    """
    pairwise = is_pairwise(judge)

    def chunk(part: list[BenchItem], ids: list[str], cost: list[int]) -> list[ItemResult]:
        if pairwise:
            return _pairwise_chunk(judge, part, ids, orders, seed, progress, cost)
        return _scalar_chunk(judge, part, ids, orders, seed, progress, cost)

    weight: Callable[[BenchItem], int] = ((lambda it: len(presentations(orders, it, seed=seed))) if pairwise
                                          else (lambda it: len(it.responses)))
    return run_keyed(judge, items, chunk, weight, sink=sink, done=done, seed_ids=seed_ids)


Chunk = Callable[[list[BenchItem], list[str], list[int]], list[ItemResult]]
"""Judges one chunk: (items, the id each item's streams are keyed by, the cost counters) -> results in order."""


def run_keyed(judge: RewardJudge, items: Sequence[BenchItem], chunk: Chunk, weight: Callable[[BenchItem], int], *,
              sink: Sink, done: Mapping[str, ItemResult] | None,
              seed_ids: Mapping[str, str] | None) -> tuple[list[ItemResult], Cost]:
    """The loop every benchmark runner shares: the items without a result in ``done`` (by key) judged chunk by
    chunk of about the judge's ``chunk_size``, each result tagged with its key and filed by position."""
    keys = item_keys(items)
    done, seed_ids = done or {}, seed_ids or {}
    todo = [k for k, key in enumerate(keys) if key not in done]
    size = max(1, int(judge.info.chunk_size))
    cost = [0, 0, 0]
    fresh: dict[int, ItemResult] = {}
    started = time.perf_counter()
    for part in _chunks(todo, size, lambda k: weight(items[k])):
        got = chunk([items[k] for k in part], [seed_ids.get(keys[k], items[k].id) for k in part], cost)
        judged = [replace(r, key=keys[k]) for k, r in zip(part, got, strict=True)]
        fresh.update(zip(part, judged, strict=True))
        if sink is not None:
            sink(judged)
    seconds = time.perf_counter() - started
    results = [fresh[k] if k in fresh else done[keys[k]] for k in range(len(items))]
    pairwise = is_pairwise(judge)
    counted: list[PairwiseJudgment | ScalarReward] = [s.judgment for r in fresh.values() for s in r.shown] \
        if pairwise else [x for r in fresh.values() for x in r.rewards]
    return results, Cost(cost[0], cost[1], cost[2], seconds, "judgments" if pairwise else "rewards",
                         tokens=token_report(counted, seconds))


def _pairwise_chunk(judge: RewardJudge, part: list[BenchItem], ids: list[str], orders: str, seed: int,
                    progress: Progress, cost: list[int]) -> list[ItemResult]:
    plan = [(n, it, k, swapped) for n, it in enumerate(part) for k, swapped in presentations(orders, it, seed=seed)]
    from brrm.service.items import PairItem, PairsCall
    from brrm.service.run import run

    jobs = []
    for n, it, k, swapped in plan:
        p = it.pairs[k]
        a, b = (p.j, p.i) if swapped else (p.i, p.j)
        order = "BA" if swapped else "AB"
        jobs.append(PairItem(it.conversation, it.responses[a], it.responses[b], f"{ids[n]}#{k}{order}"))
    judged = run(judge, jobs, call=PairsCall(swap=False), progress=progress)
    shown: list[list[Shown]] = [[] for _ in part]  # by position in the chunk: ids may repeat
    for (n, it, k, swapped), j in zip(plan, judged, strict=True):
        shown[n].append(Shown(k, swapped, replace(j, id=f"{it.id}#{k}{'BA' if swapped else 'AB'}")))
        cost[0] += max(1, j.samples)  # self-consistency voting: each sample is one model run
        cost[1] += j.generated_tokens
        cost[2] += j.prompt_tokens
    return [ItemResult(it, tuple(mine)) for it, mine in zip(part, shown, strict=True)]


def _scalar_chunk(judge: RewardJudge, part: list[BenchItem], seed_ids: list[str], orders: str, seed: int,
                  progress: Progress, cost: list[int]) -> list[ItemResult]:
    convs = [it.conversation for it in part for _ in it.responses]
    texts = [r for it in part for r in it.responses]
    ids = [f"{sid}#r{m}" for it, sid in zip(part, seed_ids, strict=True) for m in range(len(it.responses))]
    from brrm.service.items import ScoreItem
    from brrm.service.run import run

    rewards = run(judge, [ScoreItem(c, t, id=i) for c, t, i in zip(convs, texts, ids, strict=True)],
                  progress=progress)
    margin = judge.info.composition.margin or 0.0
    from brrm.compose.calibrated import CalibratedScalarJudge

    # a calibrated scalar judge: the pairs shown get σ(s·Δ), the raw rewards kept beside them
    calibration = judge.calibration if isinstance(judge, CalibratedScalarJudge) else None
    out, pos = [], 0
    for it in part:
        mine = tuple(replace(r, id=f"{it.id}#r{m}") for m, r in enumerate(rewards[pos:pos + len(it.responses)]))
        pos += len(it.responses)
        shown = shown_from_rewards(it, mine, presentations(orders, it, seed=seed), margin=margin)
        if calibration is not None:
            shown = tuple(replace(s, judgment=calibration.apply(s.judgment)) for s in shown)
        out.append(ItemResult(it, shown, mine))
        cost[0] += len(mine)
        cost[2] += sum(r.input_tokens for r in mine)
    return out
