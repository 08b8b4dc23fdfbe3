"""The serve scheduler in-process (no HTTP): coalescing, strict result alignment (N19), isolation of a bad
request, deadlines, cancellation before and during a call, queue bounds."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from brrm.errors import ConfigError
from brrm.serve.scheduler import Aborted, BatchFailed, DeadlineExceeded, QueueFull, Scheduler

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """A runner that records each call's items; results are ``item * 10`` unless told otherwise."""

    def __init__(self, delay_s: float = 0.0, results=None, slow=None) -> None:
        self.calls: list[list] = []
        self.delay_s, self.results, self.slow = delay_s, results, slow
        self.progress_raised = threading.Event()

    def __call__(self, key, items, progress):
        self.calls.append(list(items))
        end = time.monotonic() + (self.delay_s if self.slow is None or self.slow in items else 0)
        while time.monotonic() < end:
            time.sleep(0.01)
            try:
                progress(0.0)
            except Aborted:
                self.progress_raised.set()
                raise
        if any(i == "bad" for i in items):
            raise ConfigError("item 'bad' is invalid")
        return self.results(items) if self.results else [i * 10 for i in items]


def run(coro):
    return asyncio.run(coro)


async def _running(runner: Recorder) -> None:
    """Until ``runner`` has been called: the event a test waits for, instead of a sleep that guesses how long a
    busy machine takes to start the call."""
    while not runner.calls:
        await asyncio.sleep(0.005)


def test_concurrent_requests_share_one_call_and_get_their_own_results():
    runner = Recorder()

    async def main():
        s = Scheduler(runner, max_batch=8, max_wait_s=0.05, max_queue=100)
        await s.start()
        got = await asyncio.gather(s.submit("k", [1, 2], timeout_s=5), s.submit("k", [3], timeout_s=5),
                                   s.submit("k", [4, 5, 6], timeout_s=5))
        await s.drain(1)
        return got

    assert run(main()) == [[10, 20], [30], [40, 50, 60]]
    assert runner.calls == [[1, 2, 3, 4, 5, 6]]


def test_keys_are_never_mixed_and_max_batch_splits():
    runner = Recorder()

    async def main():
        s = Scheduler(runner, max_batch=2, max_wait_s=0.05, max_queue=100)
        await s.start()
        got = await asyncio.gather(*(s.submit(k, [n], timeout_s=5) for k, n in
                                     (("a", 1), ("b", 2), ("a", 3), ("a", 4))))
        await s.drain(1)
        return got

    assert run(main()) == [[10], [20], [30], [40]]
    assert sorted(map(sorted, runner.calls)) == [[1, 3], [2], [4]]


@pytest.mark.parametrize("results", [lambda items: [i + 0.5 for i in items][:-1],
                                     lambda items: [*(i + 0.5 for i in items), 99.5]], ids=["drop_last", "extra"])
def test_n19_a_wrong_number_of_results_fails_every_request_of_the_call(results):
    runner = Recorder(results=results)

    async def main():
        s = Scheduler(runner, max_batch=8, max_wait_s=0.05, max_queue=100)
        await s.start()
        got = await asyncio.gather(s.submit("k", [0, 1], timeout_s=5), s.submit("k", [2], timeout_s=5),
                                   return_exceptions=True)
        await s.drain(1)
        return got

    got = run(main())
    assert all(isinstance(g, BatchFailed) and "length mismatch" in str(g) for g in got), got


def test_a_bad_request_is_isolated_from_its_batch_neighbours():
    runner = Recorder()

    async def main():
        s = Scheduler(runner, max_batch=8, max_wait_s=0.05, max_queue=100)
        await s.start()
        got = await asyncio.gather(s.submit("k", [1], timeout_s=5), s.submit("k", ["bad"], timeout_s=5),
                                   s.submit("k", [2], timeout_s=5), return_exceptions=True)
        await s.drain(1)
        return got

    ok1, bad, ok2 = run(main())
    assert ok1 == [10] and ok2 == [20] and isinstance(bad, ConfigError)


def test_deadline_drops_queued_work_and_others_are_unaffected():
    runner = Recorder(delay_s=2)

    async def main():
        s = Scheduler(runner, max_batch=1, max_wait_s=0, max_queue=100)
        await s.start()
        first = asyncio.ensure_future(s.submit("k", [1], timeout_s=30))
        await _running(runner)  # [2] queues behind a call that runs 2 s, 20 times its own deadline
        late = await asyncio.gather(s.submit("k", [2], timeout_s=0.1), return_exceptions=True)
        depth = s.queue_depth
        done = await first
        await s.drain(1)
        return late[0], depth, done

    late, depth, done = run(main())
    assert isinstance(late, DeadlineExceeded) and depth == 0 and done == [10]
    assert runner.calls == [[1]]  # the expired request never reached the runner


def test_cancelled_running_call_is_aborted_at_its_next_progress_report():
    """The cancelled call leaves at its next progress report, not after its 20 s of work nor at the 60 s stall
    timeout: when the follow-up is served, the call has already left by raising at a report (an order of events:
    a call that ran its work out would never raise there)."""
    runner = Recorder(delay_s=20, slow=1)

    async def main():
        s = Scheduler(runner, max_batch=1, max_wait_s=0, max_queue=100, stall_timeout_s=60)
        await s.start()
        task = asyncio.ensure_future(s.submit("k", [1], timeout_s=60))
        await _running(runner)
        task.cancel()
        follow = await s.submit("k", [2], timeout_s=60)
        return follow, runner.progress_raised.is_set(), s.abandoned

    follow, left_at_a_report, abandoned = run(main())
    assert follow == [20] and left_at_a_report and abandoned == 0


def test_full_queue_refuses_at_once_with_retry_after():
    runner = Recorder(delay_s=2, slow=0)

    async def main():
        s = Scheduler(runner, max_batch=1, max_wait_s=0, max_queue=2)
        await s.start()
        first = asyncio.ensure_future(s.submit("k", [0], timeout_s=30))
        await _running(runner)  # the first call is running (not queued) whatever the machine's speed
        started = time.monotonic()
        rest = await asyncio.gather(*(s.submit("k", [n], timeout_s=30) for n in range(1, 6)), return_exceptions=True)
        return [await first, *rest], time.monotonic() - started

    got, _ = run(main())
    refused = [g for g in got if isinstance(g, QueueFull)]
    assert len(refused) == 3 and all(g.retry_after >= 1 for g in refused)  # 1 running + 2 queued are served
    assert [g for g in got if not isinstance(g, QueueFull)] == [[0], [10], [20]]
