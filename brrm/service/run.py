"""One way to run jobs on a judge: :func:`run` dispatches a list of typed jobs (:mod:`brrm.service.items`) to the
:class:`~brrm.RewardJudge` batch method they name — ``judge_pairs``, ``score`` or ``rank_groups`` — optionally in
chunks of the judge's batch size, with progress and each result streamed as soon as it is final. The CLI, the
server's scheduler (:func:`make_runner`), audits, benchmarks and the RLHF adapters all call it. A group job is
judged in its canonical order and answered in the caller's (:mod:`brrm.service.order`), so no surface sorts a
group on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar, overload

from brrm.errors import ConfigError
from brrm.service.items import (
    Call,
    GroupItem,
    PairItem,
    PairsCall,
    RankCall,
    ScoreCall,
    ScoreItem,
    Variants,
)
from brrm.service.order import CanonicalGroup
from brrm.types import GroupResult, PairwiseJudgment, RewardJudge, ScalarReward
from brrm.types.protocols import OnResult, OnStep, Progress

Result = PairwiseJudgment | ScalarReward | GroupResult
"""What one job gives: a judgment (pair), a reward (scalar item) or a group result (group)."""
R = TypeVar("R", PairwiseJudgment, ScalarReward, GroupResult)
Runner = Callable[[Hashable, list[object], Callable[[float], None]], Sequence[Result]]
"""The scheduler's runner: ``runner(key, items, progress) -> results`` (see :mod:`brrm.service.isolation`)."""


@overload
def run(judge: RewardJudge, jobs: Sequence[PairItem], *, call: PairsCall | None = None,
        chunk_size: int | None = None, progress: Progress = None,
        on_result: Callable[[int, PairwiseJudgment], None] | None = None,
        on_step: OnStep = None, returned: bool = True) -> list[PairwiseJudgment]: ...


@overload
def run(judge: RewardJudge, jobs: Sequence[ScoreItem], *, call: ScoreCall | None = None,
        chunk_size: int | None = None, progress: Progress = None,
        on_result: Callable[[int, ScalarReward], None] | None = None,
        on_step: OnStep = None, returned: bool = True) -> list[ScalarReward]: ...


@overload
def run(judge: RewardJudge, jobs: Sequence[GroupItem], *, call: RankCall | None = None,
        chunk_size: int | None = None, progress: Progress = None,
        on_result: Callable[[int, GroupResult], None] | None = None,
        on_step: OnStep = None, returned: bool = True) -> list[GroupResult]: ...


def run(judge: RewardJudge, jobs: Sequence[PairItem] | Sequence[ScoreItem] | Sequence[GroupItem], *,
        call: Call | None = None, chunk_size: int | None = None, progress: Progress = None,
        on_result: OnResult = None,
        on_step: OnStep = None,
        returned: bool = True) -> list[PairwiseJudgment] | list[ScalarReward] | list[GroupResult]:
    """Judge ``jobs`` (all of one kind) with ``judge``; one result per job, in order.

    Args:
        judge: any :class:`~brrm.RewardJudge`.
        jobs: :class:`PairItem` s (``judge_pairs``), :class:`ScoreItem` s (``score``) or :class:`GroupItem` s
            (``rank_groups``), all of one kind.
        call: the call's shared options; None: the kind's defaults, with the items' principles / references
            passed when any item has one.
        chunk_size: None: one call for all jobs (the caller batches, e.g. the server's scheduler). Otherwise
            calls of at most this many pairs or scalar items, or of groups worth about this many model calls
            (:meth:`~brrm.RewardJudge.cost`; at least one group per call), >= 1; each call's progress then adds
            up to its items exactly (a chunk's overshoot is dropped, what it did not report is added at its end).
        progress: called with the number of items (pairs, responses, or the judge's group units) just finished.
        on_result: ``on_result(index, result)`` exactly once per job, as soon as its result is final (a judge
            that reports it early) or when its call returns.
        on_step: the decoding-step hook of ``judge_pairs`` (pairs only).
        returned: also pass ``on_result`` the results a judge did not report early, when their call returns
            (False: only early reports; the caller takes the rest from the returned list, e.g. to store one
            chunk's results in one transaction).

    Raises:
        ConfigError: on jobs of mixed kinds or a call of another kind, ``chunk_size`` < 1, principles or
            references given for some items of a call that passes them but not for others, or what the judge
            raises for the items (before its model calls).
    """
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise ConfigError(f"chunk_size must be an int >= 1 or None, got {chunk_size!r}")
    pairs = [j for j in jobs if isinstance(j, PairItem)]
    scores = [j for j in jobs if isinstance(j, ScoreItem)]
    groups = [j for j in jobs if isinstance(j, GroupItem)]
    if len(pairs) == len(jobs) and isinstance(call, PairsCall | None):
        pc = call or PairsCall(principles=any(p.principle is not None for p in pairs))

        def pair_part(a: int, b: int, prog: Progress, report: OnResult) -> list[PairwiseJudgment]:
            return _pairs(judge, pairs[a:b], pc, prog, report, on_step)

        return _chunked(_count_chunks(len(pairs), chunk_size), pair_part, progress, on_result, returned=returned)
    if len(scores) == len(jobs) and isinstance(call, ScoreCall | None):
        sc = call or ScoreCall(references=any(s.reference is not None for s in scores),
                               principles=any(s.principle is not None for s in scores))

        def score_part(a: int, b: int, prog: Progress, report: OnResult) -> list[ScalarReward]:
            return _scores(judge, scores[a:b], sc, prog, report)

        return _chunked(_count_chunks(len(scores), chunk_size), score_part, progress, on_result, returned=returned)
    if len(groups) == len(jobs) and isinstance(call, RankCall | None):
        rc = call or RankCall(reference=any(g.reference is not None for g in groups))

        def group_part(a: int, b: int, prog: Progress, report: OnResult) -> list[GroupResult]:
            return _groups(judge, groups[a:b], rc, prog)

        return _chunked(_group_chunks(judge, groups, rc, chunk_size), group_part, progress, on_result, exact=False,
                        returned=returned)
    raise ConfigError(f"jobs must all be PairItem, ScoreItem or GroupItem values matching call {call!r}; got "
                      f"{sorted({type(j).__name__ for j in jobs})}")


def _count_chunks(n: int, chunk_size: int | None) -> list[tuple[int, int]]:
    size = chunk_size or max(n, 1)
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def _group_chunks(judge: RewardJudge, groups: list[GroupItem], call: RankCall,
                  chunk_size: int | None) -> list[tuple[int, int]]:
    """Runs of groups worth about ``chunk_size`` model calls each (at least one group each)."""
    if chunk_size is None:
        return _count_chunks(len(groups), None)
    bounds: list[tuple[int, int]] = []
    cost = 0
    for k, group in enumerate(groups):
        n = judge.cost("group", len(group.responses), strategy=call.strategy, swap=call.swap)
        if not bounds or cost + n > chunk_size:  # a group that costs nothing (one response) still needs a chunk
            bounds.append((k, k))
            cost = 0
        bounds[-1] = (bounds[-1][0], k + 1)
        cost += n
    return bounds


def _chunked(bounds: list[tuple[int, int]], call_part: Callable[[int, int, Progress, OnResult], list[R]],
             progress: Progress, on_result: OnResult, exact: bool = True, returned: bool = True) -> list[R]:
    """Each chunk's call in turn; every result reported once (early, or when its call returns)."""
    out: list[R] = []
    for first, end in bounds:
        report = _Reported(first, on_result)
        meter = _Meter(progress, end - first) if exact and len(bounds) > 1 and progress is not None else None
        got = call_part(first, end, meter or progress, report if on_result is not None else None)
        if meter is not None:
            meter.finish()
        for i, result in enumerate(got):
            if returned and i not in report.seen:
                report(i, result)
        out.extend(got)
    return out


class _Reported:
    """A chunk's ``on_result``: the caller's, at the chunk's ``offset``, remembering which items it reported."""

    def __init__(self, offset: int, on_result: OnResult) -> None:
        self.offset, self.on_result, self.seen = offset, on_result, set[int]()

    def __call__(self, i: int, result: object) -> None:
        self.seen.add(i)
        if self.on_result is not None:
            self.on_result(self.offset + i, result)


class _Meter:
    """A chunk's progress, adding up to its ``total`` items exactly (overshoot dropped, the rest added at the end)."""

    def __init__(self, progress: Callable[[float], None], total: int) -> None:
        self.progress, self.left = progress, float(total)

    def __call__(self, n: float) -> None:
        step = min(n, self.left)
        if step > 0:
            self.left -= step
            self.progress(step)

    def finish(self) -> None:
        if self.left > 0:
            self.progress(self.left)
            self.left = 0.0


def _every(values: Sequence[str | None], name: str) -> list[str]:
    """``values`` when every one is given (a call that passes them needs one per item)."""
    given = [v for v in values if v is not None]
    if len(given) != len(values):
        raise ConfigError(f"{name} must be given for every item of the call or for none "
                          f"({len(given)} of {len(values)} given)")
    return given


def _pairs(judge: RewardJudge, pairs: Sequence[PairItem], call: PairsCall, progress: Progress, on_result: OnResult,
           on_step: OnStep) -> list[PairwiseJudgment]:
    """One ``judge_pairs`` call (the hooks passed only when set, so a judge without them still runs)."""
    data = ([p.conversation for p in pairs], [p.response_a for p in pairs], [p.response_b for p in pairs])
    principles = _every([p.principle for p in pairs], "principle") if call.principles else None
    hooks = {k: v for k, v in (("on_result", on_result), ("on_step", on_step)) if v is not None}
    return judge.judge_pairs(*data, swap=call.swap, ids=[p.id for p in pairs], labels=[p.label for p in pairs],
                             principles=principles, progress=progress, **hooks)


def _scores(judge: RewardJudge, scores: Sequence[ScoreItem], call: ScoreCall, progress: Progress,
            on_result: OnResult) -> list[ScalarReward]:
    """One ``score`` call (``on_result`` passed only when set)."""
    data = ([s.conversation for s in scores], [s.response for s in scores])
    references = _every([s.reference for s in scores], "reference") if call.references else None
    principles = _every([s.principle for s in scores], "principle") if call.principles else None
    hooks = {"on_result": on_result} if on_result is not None else {}
    return judge.score(*data, references=references, principles=principles, ids=[s.id for s in scores],
                       progress=progress, **hooks)


def _groups(judge: RewardJudge, groups: Sequence[GroupItem], call: RankCall, progress: Progress) -> list[GroupResult]:
    """One ``rank_groups`` call over the groups in their canonical order (:mod:`brrm.service.order`), each result
    handed back in the caller's positions: a group's rewards never depend on the order of its responses.

    Raises:
        RuntimeError: when the judge returns another number of results than groups, or of rewards than responses
            (a judge bug; never aligned to the wrong responses).
    """
    orders = [CanonicalGroup.of(g.responses) for g in groups]
    results = judge.rank_groups([g.conversation for g in groups],
                                [o.arrange(g.responses) for o, g in zip(orders, groups, strict=True)],
                                strategy=call.strategy, swap=call.swap,
                                references=_every([g.reference for g in groups], "reference") if call.reference
                                else None, progress=progress)
    if len(results) != len(groups):
        raise RuntimeError(f"the judge returned {len(results)} group results for {len(groups)} groups; refusing to "
                           "align them")
    try:
        return [o.restore(r) for o, r in zip(orders, results, strict=True)]
    except ValueError as exc:
        raise RuntimeError(f"the judge returned a group result of the wrong size ({exc})") from None


def make_runner(judge: RewardJudge | Variants) -> Runner:
    """The scheduler's runner over ``judge``: ``runner(key, items, progress)`` runs the items with :func:`run`
    under the call the key names (on the variant the key's options select).

    Raises (from the runner):
        ConfigError: on a key that is not a :data:`~brrm.service.items.Call`, or what the judge raises for the items.
    """
    variants = judge if isinstance(judge, Variants) else Variants(judge)

    def runner(key: Hashable, items: list[object], progress: Callable[[float], None]) -> Sequence[Result]:
        if isinstance(key, PairsCall):
            return run(variants.get(key.options), [i for i in items if isinstance(i, PairItem)], call=key,
                       progress=progress)
        if isinstance(key, ScoreCall):
            return run(variants.judge, [i for i in items if isinstance(i, ScoreItem)], call=key, progress=progress)
        if isinstance(key, RankCall):
            return run(variants.get(key.options), [i for i in items if isinstance(i, GroupItem)], call=key,
                       progress=progress)
        raise ConfigError(f"unknown judge call {key!r}")

    return runner
