"""Run a judge on best-of-N items (RewardBench 2): every completion scored, or ranked by a group strategy.

Scalar reward models score each completion once (N rewards per item). Pairwise judges rank the item's completions
with a :mod:`brrm.compose.strategies` strategy (``knockout``: N−1 judgments, ``round_robin``: N(N−1)) in an order
drawn per item from the order seed (:func:`brrm.bench.rewardbench2.shuffled`); the strategy's per-completion
rewards, mapped back to the item's order, are the scores the metric reads. Items are judged in chunks of about
the judge's ``chunk_size`` judgments; each finished chunk goes to ``sink``, so an interrupted run resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from brrm.bench.core import BenchItem, Cost, ItemResult
from brrm.bench.runner import Progress, Sink, is_pairwise, run_keyed
from brrm.types import RewardJudge
from brrm.types.jsonvalue import JSONValue


def planned(judge: RewardJudge, items: Sequence[BenchItem], strategy: str) -> int:
    """Model calls a run makes, as the judge counts them: judgments (pairwise: the strategy's count per item, in one
    order each) or scored completions."""
    return sum(_weight(judge, strategy, it) for it in items)


def _weight(judge: RewardJudge, strategy: str, item: BenchItem) -> int:
    """One item's model calls (:meth:`~brrm.RewardJudge.cost` of its group: the strategy's judgments, or its
    completions scored)."""
    return judge.cost("group", len(item.responses), strategy=strategy if is_pairwise(judge) else "scores",
                      swap=False)


def run(judge: RewardJudge, items: Sequence[BenchItem], *, strategy: str, seed: int = 0, progress: Progress = None,
        sink: Sink = None, done: Mapping[str, ItemResult] | None = None,
        seed_ids: Mapping[str, str] | None = None) -> tuple[list[ItemResult], Cost]:
    """Score or rank every item's completions; results in item order (``rewards``: one per completion, in the
    item's order) and the cost of this run. Results are filed by position and identity
    (:func:`brrm.bench.core.item_keys`), never by id: items whose ids repeat each keep their own result.

    Args:
        judge: any :class:`~brrm.RewardJudge`.
        items: best-of-N items (``responses``: chosen first, then rejected).
        strategy: ``knockout`` or ``round_robin`` (pairwise judges; ignored by scalar models).
        seed: the order seed of the shown completion order.
        progress: called with finished judgments (or scored completions).
        sink: called with each finished chunk of results.
        done: results of an interrupted earlier run, by item key (not judged again).
        seed_ids: item key -> the id a scalar model's streams are keyed by (a resumed sampled retry); a pairwise
            group's judgments are keyed by content alone, so its resumed retries repeat their seeds.
    """
    pairwise = is_pairwise(judge)
    weight: Callable[[BenchItem], int] = lambda it: _weight(judge, strategy, it)  # noqa: E731

    def chunk(part: list[BenchItem], ids: list[str], cost: list[int]) -> list[ItemResult]:
        if pairwise:
            return _rank_chunk(judge, part, strategy, seed, progress, cost)
        return _score_chunk(judge, part, ids, progress, cost)

    return run_keyed(judge, items, chunk, weight, sink=sink, done=done, seed_ids=seed_ids)


def _score_chunk(judge: RewardJudge, part: list[BenchItem], seed_ids: list[str], progress: Progress,
                 cost: list[int]) -> list[ItemResult]:
    convs = [it.conversation for it in part for _ in it.responses]
    texts = [r for it in part for r in it.responses]
    ids = [f"{sid}#r{m}" for it, sid in zip(part, seed_ids, strict=True) for m in range(len(it.responses))]
    rewards = judge.score(convs, texts, ids=ids, progress=progress)
    out, pos = [], 0
    for it in part:
        mine = tuple(replace(r, id=f"{it.id}#r{m}") for m, r in enumerate(rewards[pos:pos + len(it.responses)]))
        pos += len(it.responses)
        out.append(ItemResult(it, (), mine))
        cost[0] += len(mine)
        cost[2] += sum(r.input_tokens for r in mine)
    return out


def _rank_chunk(judge: RewardJudge, part: list[BenchItem], strategy: str, seed: int, progress: Progress,
                cost: list[int]) -> list[ItemResult]:
    from brrm.bench.rewardbench2 import shuffled

    orders = [shuffled(seed, it.id, len(it.responses)) for it in part]
    groups = [[it.responses[k] for k in order] for it, order in zip(part, orders, strict=True)]
    ranked = judge.rank_groups([it.conversation for it in part], groups, strategy=strategy, swap=False,
                               progress=progress)
    out = []
    for it, order, res in zip(part, orders, ranked, strict=True):
        back = [res.rewards[0]] * len(order)
        for shown, k in enumerate(order):
            back[k] = replace(res.rewards[shown], id=f"{it.id}#r{k}")
        meta: dict[str, JSONValue] = {**it.meta, "strategy": strategy, "shown_order": [k for k in order],
                                      "judgments": res.n_judgments}
        out.append(ItemResult(replace(it, meta=meta), (), tuple(back)))
        cost[0] += res.n_judgments
        cost[1] += sum(j.generated_tokens for j in res.judgments)
        cost[2] += sum(j.prompt_tokens for j in res.judgments)
    return out
