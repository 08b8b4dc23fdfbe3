"""Collect per-sample reward calls into GRPO groups (cohorts) and judge complete groups together, with a deadline.

verl's reward loop scores one sample per call (``run_single``), all samples of a batch concurrently. A pairwise
judge needs a sample's siblings, so :class:`CohortBuffer` holds each call until its group (same ``uid``) has
``group_size`` members, then ranks every group that completed within ``batch_window_s`` in one batched
:func:`~brrm.rlhf.groups.rank_in_groups` call. A group that is still incomplete ``cohort_timeout_s`` after its first
member arrived is never passed off as whole: its members get a failed reward (status ``incomplete_group``, the
reason saying how many arrived) — one missing rollout never hangs its siblings (the failure of NeMo Gym PR
#2385). With ``judge_partial=True`` a partial group of at least two is judged with the members it has, and each
of their rewards says so in its reason.

Rewards never depend on arrival order: the group job of :func:`brrm.service.run.run` judges a group's members in
the one canonical order of :mod:`brrm.service.order` (every integration's), so circular and knockout pairings are
the same whichever sample's call came first; each reward comes back at its arrival position, to the call that
sent that response.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from brrm.rlhf.groups import rank_in_groups
from brrm.types import ConversationLike, RewardJudge, ScalarReward, Status


@dataclass
class _Cohort:
    conversation: ConversationLike
    responses: list[str] = field(default_factory=list)
    futures: list[asyncio.Future[ScalarReward]] = field(default_factory=list)
    deadline: asyncio.TimerHandle | None = None
    partial: str = ""


class CohortBuffer:
    """Per-sample calls in, group rewards out (one buffer per event loop).

    Args:
        judge: a callable returning the judge (e.g. ``JudgeSource.get``), called in the worker thread.
        group_size: samples per group (verl's ``actor_rollout_ref.rollout.n``), >= 2.
        strategy, swap, soft, max_judgments: as :func:`~brrm.rlhf.groups.rank_in_groups`.
        cohort_timeout_s: how long a group may wait for its members, > 0.
        judge_partial: judge a group that is incomplete at its deadline with the >= 2 members it has (their
            reasons record it) instead of failing its members with ``incomplete_group``.
        batch_window_s: how long to wait for other groups to complete before judging, >= 0.
        run: runs a blocking function off the event loop (default: ``loop.run_in_executor(None, fn)``).
    """

    def __init__(self, judge: Callable[[], RewardJudge], *, group_size: int, strategy: str, swap: bool = False,
                 soft: bool = False, max_judgments: int | None = None, cohort_timeout_s: float = 600.0,
                 judge_partial: bool = False, batch_window_s: float = 0.05,
                 run: Callable[[Callable[[], list[ScalarReward]]], Awaitable[list[ScalarReward]]] | None = None
                 ) -> None:
        self.judge, self.group_size, self.judge_partial = judge, group_size, judge_partial
        self.strategy, self.swap, self.soft, self.max_judgments = strategy, swap, soft, max_judgments
        self.cohort_timeout_s, self.batch_window_s = cohort_timeout_s, batch_window_s
        self._run = run
        self._open: dict[str, _Cohort] = {}
        self._ready: list[_Cohort] = []
        self._flush: asyncio.TimerHandle | None = None
        self.calls = 0

    async def submit(self, key: str, conversation: ConversationLike, response: str) -> ScalarReward:
        """Add one sample of group ``key`` and wait for its reward."""
        return (await self.submit_group(key, conversation, response))[0]

    async def submit_group(self, key: str, conversation: ConversationLike,
                           response: str) -> tuple[ScalarReward, list[ScalarReward]]:
        """Add one sample of group ``key``; wait for (its reward, the rewards of every member that arrived).

        The group's rewards let a caller give a failed member a group-neutral value
        (:func:`brrm.rlhf.fallback.fill_failed`).
        """
        loop = asyncio.get_running_loop()
        cohort = self._open.get(key)
        if cohort is None:
            cohort = self._open[key] = _Cohort(conversation)
            cohort.deadline = loop.call_later(self.cohort_timeout_s, self._expire, key)
        future: asyncio.Future[ScalarReward] = loop.create_future()
        cohort.responses.append(response)
        cohort.futures.append(future)
        if len(cohort.responses) >= self.group_size:
            self._close(key)
        own = await future
        return own, [f.result() for f in cohort.futures if f.done() and not f.exception()]

    def _close(self, key: str) -> None:
        cohort = self._open.pop(key)
        if cohort.deadline is not None:
            cohort.deadline.cancel()
        self._ready.append(cohort)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self.batch_window_s, self._start_flush)

    def _expire(self, key: str) -> None:
        cohort = self._open.get(key)
        if cohort is None:
            return
        reason = (f"incomplete group: {len(cohort.responses)} of {self.group_size} samples arrived within "
                  f"cohort_timeout_s={self.cohort_timeout_s:g}")
        if self.judge_partial and len(cohort.responses) >= 2:
            cohort.partial = reason
            self._close(key)
            return
        del self._open[key]
        for future in cohort.futures:
            if not future.done():
                future.set_result(ScalarReward.failed(Status.INCOMPLETE_GROUP, reason))

    def _start_flush(self) -> None:
        self._flush = None
        ready, self._ready = self._ready, []
        asyncio.get_running_loop().create_task(self._judge(ready))

    async def _judge(self, cohorts: list[_Cohort]) -> None:
        by_size: dict[int, list[_Cohort]] = {}
        for c in cohorts:
            by_size.setdefault(len(c.responses), []).append(c)
        for size, group in by_size.items():
            try:
                rewards = await self._call(functools.partial(self._rank, group, size))
            except Exception as exc:  # noqa: BLE001 - the waiting samples get the error, the loop goes on
                for c in group:
                    for f in c.futures:
                        if not f.done():
                            f.set_exception(exc)
                continue
            for k, c in enumerate(group):
                for i, future in enumerate(c.futures):
                    if not future.done():
                        future.set_result(_partial(rewards[k * size + i], c.partial))

    def _rank(self, group: list[_Cohort], size: int) -> list[ScalarReward]:
        self.calls += 1
        convs = [c.conversation for c in group for _ in range(size)]
        responses = [r for c in group for r in c.responses]
        return rank_in_groups(self.judge(), convs, responses, num_generations=size, strategy=self.strategy,
                              swap=self.swap, soft=self.soft, references=None,
                              max_judgments=self.max_judgments).rewards

    async def _call(self, fn: Callable[[], list[ScalarReward]]) -> list[ScalarReward]:
        if self._run is not None:
            return await self._run(fn)
        return await asyncio.get_running_loop().run_in_executor(None, fn)


def _partial(reward: ScalarReward, note: str) -> ScalarReward:
    """``reward`` with the partial-group note added to its reason (unchanged for a whole group)."""
    if not note:
        return reward
    return dataclasses.replace(reward, reason=f"{reward.reason}; {note}" if reward.reason else f"judged as a "
                               f"partial group ({note})")
