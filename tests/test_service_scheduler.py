"""The service scheduler in-process: bisection fault isolation (any exception, not only ConfigError), jobs larger
than max_batch split across calls, units kept whole, cost-based admission, and the cost() helper."""

from __future__ import annotations

import asyncio

import pytest

from brrm.compose import pairwise_cost, scalar_cost
from brrm.errors import ConfigError
from brrm.service.scheduler import BatchFailed, DeadlineExceeded, QueueFull, Scheduler
from brrm.types import Status

pytestmark = pytest.mark.timeout(30)


class Runner:
    """Results ``item * 10``; raises ``error(items)`` for the whole call when it returns an exception."""

    def __init__(self, error=lambda items: None) -> None:
        self.calls: list[list] = []
        self.error = error

    def __call__(self, key, items, progress):
        self.calls.append(list(items))
        exc = self.error(items)
        if exc is not None:
            raise exc
        return [i * 10 for i in items]


def failed(key, item, status, reason):
    return (status, reason)


async def _gather(s: Scheduler, jobs, **kw):
    await s.start()
    got = await asyncio.gather(*(s.submit("k", items, timeout_s=5, **kw) for items in jobs), return_exceptions=True)
    await s.drain(1)
    return got


def test_any_exception_is_bisected_down_to_the_item_that_causes_it():
    runner = Runner(lambda items: RuntimeError("boom on 7") if 7 in items else None)
    s = Scheduler(runner, max_batch=16, max_wait_s=0.05, max_queue=100, failed=failed)
    got = asyncio.run(_gather(s, [[1], [2, 7, 3], [4], [5], [6]]))
    assert got[0] == [10] and got[2:] == [[40], [50], [60]]
    first, bad, last = got[1]
    assert first == 20 and last == 30
    assert bad[0] is Status.BACKEND_ERROR and "RuntimeError: boom on 7" in bad[1]
    assert runner.calls[0] == [1, 2, 7, 3, 4, 5, 6]  # one call first; bisection only after it failed
    assert len(runner.calls) <= 1 + 2 * 3  # O(log n) extra calls for one bad item


def test_an_unencodable_item_is_invalid_input_and_a_config_error_stays_its_requests_422():
    def error(items):
        if "\ud800" in items:
            return UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return ConfigError("bad item") if "bad" in items else None

    s = Scheduler(Runner(error), max_batch=16, max_wait_s=0.05, max_queue=100, failed=failed)
    ok, surrogate, bad = asyncio.run(_gather(s, [["a"], ["\ud800"], ["bad"]]))
    assert ok == ["a" * 10] and isinstance(bad, ConfigError)
    assert surrogate[0][0] is Status.INVALID_INPUT and "surrogates not allowed" in surrogate[0][1]


def test_when_every_item_fails_alone_the_backend_is_to_blame_503():
    s = Scheduler(Runner(lambda items: OSError("backend down")), max_batch=16, max_wait_s=0.05, max_queue=100,
                  failed=failed)
    got = asyncio.run(_gather(s, [[1], [2, 3]]))
    assert all(isinstance(g, BatchFailed) and "OSError: backend down" in g.message for g in got), got


def test_a_job_larger_than_max_batch_is_split_and_units_stay_whole():
    runner = Runner()
    s = Scheduler(runner, max_batch=4, max_wait_s=0, max_queue=100)
    (got,) = asyncio.run(_gather(s, [list(range(10))]))
    assert got == [i * 10 for i in range(10)]
    assert runner.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    runner = Runner()
    s = Scheduler(runner, max_batch=4, max_wait_s=0, max_queue=100)
    (got,) = asyncio.run(_gather(s, [list(range(6))], units=[3, 3]))
    assert got == [i * 10 for i in range(6)] and runner.calls == [[0, 1, 2], [3, 4, 5]]


def test_cost_counts_against_the_queue_until_the_last_item_starts():
    import time

    def runner(key, items, progress):
        time.sleep(0.2)
        return [i * 10 for i in items]

    async def main():
        s = Scheduler(runner, max_batch=2, max_wait_s=0, max_queue=10)
        await s.start()
        big = asyncio.ensure_future(s.submit("k", list(range(6)), timeout_s=5, cost=9))
        await asyncio.sleep(0.1)  # the first call (2 items, 4 of the 9 cost units) is running
        depth = s.queue_depth
        refused = await asyncio.gather(s.submit("k", [1], timeout_s=5, cost=6), return_exceptions=True)
        out = await big
        await s.drain(1)
        return depth, refused[0], out, s.queue_depth

    depth, refused, out, after = asyncio.run(main())
    assert depth == 5 and isinstance(refused, QueueFull) and out == [i * 10 for i in range(6)] and after == 0


def test_queued_work_past_its_deadline_is_answered_and_never_started():
    import time

    calls: list[list] = []

    def slow(key, items, progress):
        calls.append(list(items))
        time.sleep(0.3)
        return [i for i in items]

    async def main():
        s = Scheduler(slow, max_batch=1, max_wait_s=0, max_queue=100)
        await s.start()
        first = asyncio.ensure_future(s.submit("k", [1], timeout_s=5))
        await asyncio.sleep(0.02)
        late = await asyncio.gather(s.submit("k", [2], timeout_s=0.1), return_exceptions=True)
        await first
        await s.drain(1)
        return late[0]

    assert isinstance(asyncio.run(main()), DeadlineExceeded)
    assert calls == [[1]]


def test_the_cost_arithmetic_counts_what_the_judge_runs():
    """compose's cost arithmetic, which every judge's ``judgment_cost`` (and so admission and budgets) uses."""
    assert pairwise_cost("pairs", 4950).total == 4950
    assert pairwise_cost("pairs", 4950, swap=True).generations == 19800
    assert pairwise_cost("group", 512, strategy="round_robin").total == 512 * 511
    circular = pairwise_cost("group", 8, strategy="circular", swap=True, samples=2)
    assert (circular.units, circular.total, circular.generations, circular.pairs) == (16, 32, 64, 8)
    assert circular.describe() == "circular over 8 responses (16 judgments) x 2 samples = 32 judgments (64 generations)"
    assert pairwise_cost("group", 4, strategy="auto").strategy == "round_robin"
    assert scalar_cost("score", 8).total == 8 and scalar_cost("group", 8, strategy="scores").total == 8
    assert scalar_cost("pairs", 8, principles=2).describe() == "32 scored sequences"
    with pytest.raises(ConfigError, match="shape 'pair' is not valid; expected one of pairs, score, group"):
        pairwise_cost("pair", 2)
    with pytest.raises(ConfigError, match="a pairwise judge has no scalar score"):
        pairwise_cost("group", 3, strategy="scores")


def test_a_stalled_call_is_abandoned_so_a_queued_job_is_served_within_its_own_deadline():
    import threading

    release, stall_left = threading.Event(), threading.Event()

    def runner(key, items, progress):
        if "stall" in items:
            release.wait(120)  # never reports progress
            stall_left.set()
        return list(items)

    async def main():
        # without abandonment the healthy job would wait for the release (120 s) or the stall timeout (300 s); with
        # it, the stalled call is given up at the middle of the healthy job's 4 s deadline (2 s: the rest is room
        # for a busy machine), and the job is served beside it (a reentrant backend; one that is not never runs
        # two calls at once: tests/test_fault_kinds.py)
        s = Scheduler(runner, max_batch=1, max_wait_s=0, max_queue=100, stall_timeout_s=300, reentrant=True)
        await s.start()
        stalled = asyncio.ensure_future(s.submit("k", ["stall"], timeout_s=0.5))
        await asyncio.sleep(0.05)
        healthy = await s.submit("k", ["ok"], timeout_s=4)  # a DeadlineExceeded past its own 4 s
        beside = not stall_left.is_set()  # served while the stalled call was still inside the runner
        late = (await asyncio.gather(stalled, return_exceptions=True))[0]
        abandoned = s.abandoned
        release.set()
        return healthy, beside, late, abandoned

    healthy, beside, late, abandoned = asyncio.run(main())
    assert healthy == ["ok"] and beside and isinstance(late, DeadlineExceeded) and abandoned == 1
