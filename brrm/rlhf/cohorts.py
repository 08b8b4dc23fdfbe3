"""Collect per-sample reward calls into GRPO groups (cohorts) and judge each complete group through the service.

verl's reward loop scores one sample per call (``run_single``), all samples of a batch concurrently. A pairwise
judge needs a sample's siblings, so :class:`CohortBuffer` holds each call until its group (same ``uid``) has
``group_size`` members. Groups that complete within ``batch_window_s`` of each other are sent together, each
group one job of a :class:`~brrm.service.hosted.HostedScheduler` (:func:`~brrm.rlhf.groups.rank_in_groups` with its
repair pass as the scheduler's call, :func:`group_runner`): the scheduler coalesces them, holds each group's
deadline (``timeout_s`` from when the group was sent) and, with a judge that takes concurrent calls
(``info.concurrent``: continuous batching, vLLM, a ``brrm serve``), runs each group as its own call under its own
cancellation token — so a group whose call stalls costs only its own samples, and the groups beside it and in the
next round are judged within their deadlines. A group that could not be judged makes each of its samples' calls
raise the scheduler's error (:class:`~brrm.service.scheduler.DeadlineExceeded` for its deadline, another
:class:`~brrm.service.scheduler.SchedulerError` when the backend is stuck or failing); its caller turns that into a
failed reward with the reason (the verl manager: ``ok: False``, status ``timeout`` / ``backend_error``). A judge
that does not declare concurrent calls runs one coalesced call at a time and cannot split a running call: a
stalled group fails every group of the call it holds, each sample with that reason, and the next calls run once
the stalled one is abandoned.

A group that is still incomplete ``cohort_timeout_s`` after its first member arrived is never passed off as
whole: its members get a failed reward (status ``incomplete_group``, the reason saying how many arrived) — one
missing rollout never hangs its siblings (the failure of NeMo Gym PR #2385). With ``judge_partial=True`` a partial
group of at least two is judged with the members it has, and each of their rewards says so in its reason.

Rewards never depend on arrival order: the group job of :func:`brrm.service.run.run` judges a group's members in
the one canonical order of :mod:`brrm.service.order` (every integration's), so circular and knockout pairings are
the same whichever sample's call came first; each reward comes back at its arrival position, to the call that
sent that response.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from brrm.errors import ConfigError
from brrm.rlhf.groups import judgments_per_step, rank_in_groups
from brrm.service.hosted import HostedScheduler
from brrm.service.isolation import Runner
from brrm.service.items import GroupItem
from brrm.service.scheduler import DeadlineExceeded
from brrm.types import ConversationLike, RewardJudge, ScalarReward, Status

GroupRewards = tuple[ScalarReward, ...]
"""One group's rewards, in its members' arrival order (the scheduler's result for one :class:`GroupItem`)."""


@dataclass(frozen=True)
class GroupRewardsCall:
    """The scheduler key of a cohort's judging: groups of ``size`` ranked by :func:`~brrm.rlhf.groups.rank_in_groups`
    (``strategy``, ``swap``, ``soft``), each with a repair budget of ``max_judgments`` judgments (None:
    unlimited). Jobs with equal keys may share a call."""

    strategy: str
    swap: bool
    soft: bool
    size: int
    max_judgments: int | None = None


def group_runner(judge: RewardJudge) -> Runner:
    """The scheduler's call over ``judge``: ``runner(key, groups, progress)`` ranks the :class:`GroupItem` s of one
    :class:`GroupRewardsCall` with :func:`~brrm.rlhf.groups.rank_in_groups` (one batched ``rank_groups``, then the
    repair passes) and returns one :data:`GroupRewards` per group (ids: positions in the group).

    Raises (from the runner):
        ConfigError: on another key, or a group not of the key's size.
    """

    def runner(key: Hashable, items: list[object], progress: Callable[[float], None]) -> list[GroupRewards]:
        groups = [g for g in items if isinstance(g, GroupItem)]
        if not isinstance(key, GroupRewardsCall) or len(groups) != len(items) \
                or any(len(g.responses) != key.size for g in groups):
            raise ConfigError(f"group_runner runs GroupRewardsCall jobs of GroupItems of its size, got {key!r}")
        progress(0.0)  # a call nobody waits for any more stops here
        size = key.size
        outcome = rank_in_groups(judge, [g.conversation for g in groups for _ in range(size)],
                                 [r for g in groups for r in g.responses], num_generations=size,
                                 strategy=key.strategy, swap=key.swap, soft=key.soft, references=None,
                                 max_judgments=None if key.max_judgments is None else key.max_judgments * len(groups))
        return [tuple(dataclasses.replace(r, id=str(i)) for i, r in enumerate(outcome.rewards[k * size:(k + 1) * size]))
                for k in range(len(groups))]

    return runner


def failed_group(key: object, item: object, status: Status, reason: str) -> GroupRewards:
    """Every member's failed reward for a group whose call failed on its own (the scheduler's ``failed``).

    Raises:
        ConfigError: when ``item`` is not a :class:`GroupItem` (a programming error).
    """
    if not isinstance(item, GroupItem):
        raise ConfigError(f"failed_group takes a GroupItem, got {type(item).__name__}")
    return tuple(ScalarReward.failed(status, reason, id=str(i)) for i in range(len(item.responses)))


@dataclass
class _Cohort:
    conversation: ConversationLike
    responses: list[str] = field(default_factory=list)
    futures: list[asyncio.Future[ScalarReward]] = field(default_factory=list)
    deadline: asyncio.TimerHandle | None = None
    partial: str = ""


class CohortBuffer:
    """Per-sample calls in, group rewards out (one buffer per event loop), judged through the service.

    Args:
        judge: a callable returning the judge (e.g. ``JudgeSource.get``), called once, off the event loop, when the
            first group is sent.
        group_size: samples per group (verl's ``actor_rollout_ref.rollout.n``), >= 2.
        strategy, swap, soft, max_judgments: as :func:`~brrm.rlhf.groups.rank_in_groups`; ``max_judgments`` is the
            budget of the groups sent together (checked before any model call; each group's repair passes get its
            share).
        cohort_timeout_s: how long a group may wait for its members, > 0.
        judge_partial: judge a group that is incomplete at its deadline with the >= 2 members it has (their
            reasons record it) instead of failing its members with ``incomplete_group``.
        batch_window_s: how long to wait for other groups to complete before sending, >= 0.
        timeout_s: each group's judging deadline from when it is sent (the judge's loading included), > 0.
        concurrency: judge calls at once for a judge that takes concurrent calls, and the stalled calls tolerated
            before new groups are refused (:class:`~brrm.service.scheduler.Unavailable`), >= 1.
    """

    def __init__(self, judge: Callable[[], RewardJudge], *, group_size: int, strategy: str, swap: bool = False,
                 soft: bool = False, max_judgments: int | None = None, cohort_timeout_s: float = 600.0,
                 judge_partial: bool = False, batch_window_s: float = 0.05, timeout_s: float = 300.0,
                 concurrency: int = 4) -> None:
        self.judge, self.group_size, self.judge_partial = judge, group_size, judge_partial
        self.strategy, self.swap, self.soft, self.max_judgments = strategy, swap, soft, max_judgments
        self.cohort_timeout_s, self.batch_window_s = cohort_timeout_s, batch_window_s
        self.timeout_s, self.concurrency = timeout_s, concurrency
        self._open: dict[str, _Cohort] = {}
        self._ready: list[_Cohort] = []
        self._flush: asyncio.TimerHandle | None = None
        self._service: HostedScheduler | None = None
        self._service_lock = threading.Lock()
        self.calls = 0  # groups sent to the scheduler

    async def submit(self, key: str, conversation: ConversationLike, response: str) -> ScalarReward:
        """Add one sample of group ``key`` and wait for its reward (see :meth:`submit_group` for what it raises)."""
        return (await self.submit_group(key, conversation, response))[0]

    async def submit_group(self, key: str, conversation: ConversationLike,
                           response: str) -> tuple[ScalarReward, list[ScalarReward]]:
        """Add one sample of group ``key``; wait for (its reward, the rewards of every member that arrived).

        The group's rewards let a caller give a failed member a group-neutral value
        (:func:`brrm.rlhf.fallback.fill_failed`).

        Raises:
            DeadlineExceeded: the group was not judged within ``timeout_s`` (its call stalled or ran long).
            SchedulerError: the scheduler refused or failed the group (the backend is stuck or failing).
            ConfigError: the groups sent together need more than ``max_judgments``, or the judge refused the input.
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

    def service(self) -> HostedScheduler:
        """The buffer's scheduler over its judge (the judge is built on first use; blocking)."""
        with self._service_lock:
            if self._service is None:
                judge = self.judge()
                self._service = HostedScheduler(
                    judge, concurrency=self.concurrency if judge.info.concurrent else 1,
                    stall_timeout_s=max(0.1, min(5.0, self.timeout_s / 2)), max_abandoned=self.concurrency,
                    runner=group_runner(judge), failed=failed_group)
            return self._service

    def close(self) -> None:
        """Stop the scheduler (letting running calls finish, up to 5 s); a later group starts a new one."""
        with self._service_lock:
            service, self._service = self._service, None
        if service is not None:
            service.close()

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
        """Send each group of ``cohorts`` as its own job, after the budget check over all of them."""
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            ready = self._service
            service = ready if ready is not None else await loop.run_in_executor(None, self.service)
            self._check_budget(service.judge, cohorts)
        except Exception as exc:  # noqa: BLE001 - the waiting samples get the error, the loop goes on
            for c in cohorts:
                _fail(c.futures, exc)
            return
        share = None if self.max_judgments is None else self.max_judgments // len(cohorts)
        await asyncio.gather(*(self._judge_one(service, c, share, sent) for c in cohorts))

    async def _judge_one(self, service: HostedScheduler, cohort: _Cohort, share: int | None, sent: float) -> None:
        self.calls += 1
        key = GroupRewardsCall(self.strategy, self.swap, self.soft, len(cohort.responses), share)
        left = self.timeout_s - (asyncio.get_running_loop().time() - sent)
        try:
            if left <= 0:
                raise DeadlineExceeded(f"the judge loaded after the group's deadline of timeout_s={self.timeout_s:g}")
            results = await service.submit(key, [GroupItem(cohort.conversation, tuple(cohort.responses))],
                                           timeout_s=left)
        except Exception as exc:  # noqa: BLE001 - this group's samples get its error; other groups go on
            _fail(cohort.futures, exc)
            return
        rewards = results[0]
        for i, future in enumerate(cohort.futures):
            if not future.done():
                future.set_result(_partial(rewards[i], cohort.partial))

    def _check_budget(self, judge: RewardJudge, cohorts: Sequence[_Cohort]) -> None:
        """Raise before any model call when the groups sent together need more than ``max_judgments`` (as the judge
        counts them)."""
        if self.max_judgments is None:
            return
        planned = sum(judgments_per_step(judge, self.strategy, len(c.responses), 1, swap=self.swap) for c in cohorts)
        if planned > self.max_judgments:
            per = judgments_per_step(judge, self.strategy, self.group_size, 1, swap=self.swap)
            raise ConfigError(f"these {len(cohorts)} groups need {planned} judgments ({per} per group of "
                              f"{self.group_size} for strategy {self.strategy!r}), over "
                              f"max_judgments_per_step={self.max_judgments}; raise the budget or use a cheaper "
                              "strategy (circular: G per group)")


def _fail(futures: Sequence[asyncio.Future[ScalarReward]], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)


def _partial(reward: ScalarReward, note: str) -> ScalarReward:
    """``reward`` with the partial-group note added to its reason (unchanged for a whole group)."""
    if not note:
        return reward
    return dataclasses.replace(reward, reason=f"{reward.reason}; {note}" if reward.reason else f"judged as a "
                               f"partial group ({note})")
