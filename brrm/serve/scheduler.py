"""The request scheduler: concurrent requests coalesced into batched judge calls that run off the event loop.

Each HTTP request becomes a *job*: a key (which judge call and options it needs, e.g. ``("pairs", swap)``), its
items and a deadline. A scheduler task takes the oldest job, waits up to ``max_wait_s`` for others with the same
key (up to ``max_batch`` items), and runs them as **one** judge call in a worker thread, so the event loop never
blocks on model work. Results are split back by each job's item count after checking that the judge returned
exactly one result per item (a mismatch fails the whole batch: no request ever receives another's result).

Admission control: the queue holds at most ``max_queue`` items; a job that does not fit is refused at once
(:class:`QueueFull`, answered 429 with ``Retry-After``). A job whose deadline passes is dropped from the queue
(:class:`DeadlineExceeded`, 504) without touching its neighbours; a job whose client goes away is cancelled the
same way. When every job of a running batch has gone, the call is asked to stop at its next progress report
(the judge's ``progress`` hook raises :class:`Aborted`); one that still has not returned ``stall_timeout_s``
later is abandoned — its thread runs on, its results are dropped — so a stuck backend cannot hold the queue.
At ``max_abandoned`` such threads the scheduler refuses new work (:class:`Unavailable`, 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brrm.errors import ConfigError

if TYPE_CHECKING:
    from brrm.serve.metrics import Metrics

Runner = Callable[[Hashable, list[Any], Callable[[float], None]], Sequence[Any]]
"""``runner(key, items, progress) -> results``: one judge call over ``items`` (called in a worker thread), one
result per item in order; ``progress`` is passed on to the judge as its progress callback."""


class SchedulerError(Exception):
    """A request the scheduler could not serve; ``status`` is the HTTP status it maps to."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueueFull(SchedulerError):
    """The queue has no room for the request's items (HTTP 429); ``retry_after`` is in whole seconds, >= 1."""

    status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(SchedulerError):
    """The request's deadline passed before its results were ready (HTTP 504)."""

    status = 504


class Unavailable(SchedulerError):
    """The scheduler takes no work: shutting down, or its backend is stuck (HTTP 503)."""


class BatchFailed(SchedulerError):
    """The judge call raised, or returned the wrong number of results (HTTP 503 with the reason)."""


class Aborted(Exception):
    """Raised inside the worker thread (from the progress hook) to stop a call nobody waits for any more."""


@dataclass(eq=False)
class _Job:
    key: Hashable
    items: list[Any]
    cost: int
    deadline: float
    enqueued: float
    future: asyncio.Future[Any]


@dataclass(eq=False)
class _Batch:
    key: Hashable
    jobs: list[_Job]
    abort: threading.Event = field(default_factory=threading.Event)


class Scheduler:
    """Coalesces jobs into judge calls; see the module docstring.

    Args:
        runner: the judge call (see :data:`Runner`).
        max_batch: most items (by cost) per call, >= 1.
        max_wait_s: how long the oldest queued job waits for company, seconds >= 0.
        max_queue: most items (by cost) waiting, >= 1; an empty queue always admits one job.
        concurrency: judge calls in flight at once, >= 1.
        stall_timeout_s: grace for a call nobody waits for before its thread is abandoned, seconds > 0.
        max_abandoned: abandoned threads at which new work is refused, >= 1.
        metrics: where queue depth, batch sizes, cancellations and refusals are recorded.

    Raises:
        ConfigError: on an out-of-range setting.
    """

    def __init__(self, runner: Runner, *, max_batch: int, max_wait_s: float, max_queue: int, concurrency: int = 1,
                 stall_timeout_s: float = 30.0, max_abandoned: int = 1, metrics: Metrics | None = None) -> None:
        if max_batch < 1 or max_queue < 1 or concurrency < 1 or max_abandoned < 1:
            raise ConfigError("max_batch, max_queue, concurrency and max_abandoned must be >= 1")
        if max_wait_s < 0 or stall_timeout_s <= 0:
            raise ConfigError("max_wait_s must be >= 0 and stall_timeout_s > 0")
        self.runner, self.metrics = runner, metrics
        self.max_batch, self.max_wait_s, self.max_queue = max_batch, max_wait_s, max_queue
        self.concurrency, self.stall_timeout_s, self.max_abandoned = concurrency, stall_timeout_s, max_abandoned
        self._queue: list[_Job] = []
        self._queued_cost = 0
        self._running = 0
        self._abandoned = 0
        self._closing = False
        self._batch_seconds = 1.0  # running mean, for Retry-After
        self._changed: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the scheduling task on the running event loop."""
        self._changed = asyncio.Event()
        self._slots = asyncio.Semaphore(self.concurrency)
        self._task = asyncio.create_task(self._loop(), name="brrm-scheduler")

    async def drain(self, timeout_s: float) -> None:
        """Refuse new work, let queued and running calls finish (up to ``timeout_s``), then stop."""
        self._closing = True
        end = time.monotonic() + timeout_s
        while (self._queue or self._running) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def queue_depth(self) -> int:
        """Items waiting (not yet running)."""
        return self._queued_cost

    @property
    def running(self) -> int:
        """Judge calls in flight (abandoned ones not counted)."""
        return self._running

    @property
    def abandoned(self) -> int:
        """Abandoned calls whose threads are still running."""
        return self._abandoned

    @property
    def accepting(self) -> bool:
        """Whether new work is taken (not shutting down, backend not stuck)."""
        return not self._closing and self._abandoned < self.max_abandoned

    # ------------------------------------------------------------------------------------------ submit
    async def submit(self, key: Hashable, items: Sequence[Any], *, timeout_s: float, cost: int | None = None) -> list:
        """Queue ``items`` for one judge call shared with other jobs of the same ``key``; their results in order.

        Raises:
            QueueFull: no room now (429). Unavailable: shutting down or stuck (503).
            DeadlineExceeded: ``timeout_s`` passed first (504). BatchFailed: the call failed (503).
            ConfigError: the judge refused this request's input (422).
            asyncio.CancelledError: the caller was cancelled (its queued work is dropped first).
        """
        assert self._changed is not None, "Scheduler.start() was not called"
        cost = len(items) if cost is None else max(1, cost)
        if self._closing:
            raise Unavailable("the server is shutting down; retry on another replica")
        if self._abandoned >= self.max_abandoned:
            raise Unavailable(f"the backend is stuck: {self._abandoned} judge call(s) did not return after their "
                              "requests left; restart the server")
        if self._queue and self._queued_cost + cost > self.max_queue:
            if self.metrics:
                self.metrics.rejected.inc()
            raise QueueFull(f"the queue is full ({self._queued_cost} of {self.max_queue} items waiting); retry "
                            "later", self.retry_after())
        loop = asyncio.get_running_loop()
        now = loop.time()
        job = _Job(key, list(items), cost, now + timeout_s, now, loop.create_future())
        self._queue.append(job)
        self._queued_cost += cost
        self._changed.set()
        self._gauges()
        try:
            done, _ = await asyncio.wait({job.future}, timeout=timeout_s)
        except asyncio.CancelledError:
            self._drop(job, "disconnect")
            raise
        if not done:
            self._drop(job, "deadline")
            raise DeadlineExceeded(f"the request did not finish within its deadline of {timeout_s:g} s")
        return list(job.future.result())

    def retry_after(self) -> int:
        """Seconds until the queue is likely to have room, >= 1."""
        batches = self._queued_cost / self.max_batch / self.concurrency + 1
        return max(1, math.ceil(batches * self._batch_seconds))

    def _drop(self, job: _Job, reason: str) -> None:
        queued = job in self._queue
        if queued:
            self._queue.remove(job)
            self._queued_cost -= job.cost
            assert self._changed is not None
            self._changed.set()
            self._gauges()
        if not job.future.done():
            job.future.cancel()
            if self.metrics:
                self.metrics.cancelled.labels(reason=reason, stage="queued" if queued else "running").inc()

    def _gauges(self) -> None:
        if self.metrics:
            self.metrics.queue_depth.set(self._queued_cost)
            self.metrics.running_batches.set(self._running)
            self.metrics.abandoned_batches.set(self._abandoned)

    # ------------------------------------------------------------------------------------------ loop
    async def _loop(self) -> None:
        assert self._slots is not None
        while True:
            await self._slots.acquire()
            try:
                batch = await self._next_batch()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._run(batch), name="brrm-batch")
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)

    async def _next_batch(self) -> _Batch:
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._changed.clear()
                await self._changed.wait()
            first = self._queue[0]
            until = first.enqueued + self.max_wait_s
            while self._queue and self._queue[0] is first and self._cost_of(first.key) < self.max_batch:
                delay = until - loop.time()
                if delay <= 0:
                    break
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), delay)
            if self._queue and self._queue[0] is first:
                return self._take(first.key)

    def _cost_of(self, key: Hashable) -> int:
        return sum(job.cost for job in self._queue if job.key == key)

    def _take(self, key: Hashable) -> _Batch:
        jobs: list[_Job] = []
        cost = 0
        for job in list(self._queue):
            if job.key != key:
                continue
            if jobs and cost + job.cost > self.max_batch:
                break
            jobs.append(job)
            cost += job.cost
            self._queue.remove(job)
        self._queued_cost -= cost
        self._running += 1
        self._gauges()
        if self.metrics:
            self.metrics.batch_items.observe(cost)
            self.metrics.batch_requests.observe(len(jobs))
        return _Batch(key, jobs)

    async def _run(self, batch: _Batch) -> None:
        assert self._slots is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Any]] = loop.create_future()

        def deliver(outcome: list[Any]) -> None:
            if not done.done():
                done.set_result(outcome)

        def work() -> None:
            outcome = self._call(batch)
            with contextlib.suppress(RuntimeError):  # the loop closed while an abandoned call ran on
                loop.call_soon_threadsafe(deliver, outcome)

        started = time.perf_counter()
        threading.Thread(target=work, name="brrm-judge", daemon=True).start()
        try:
            finished = await self._watch(batch, done)
        finally:
            self._running -= 1
            self._slots.release()
        if not finished:
            self._abandoned += 1
            done.add_done_callback(lambda _f: self._unabandon())
            if self.metrics:
                self.metrics.abandoned_total.inc()
            self._gauges()
            return
        seconds = time.perf_counter() - started
        self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * seconds
        if self.metrics:
            self.metrics.batch_seconds.observe(seconds)
        self._gauges()
        for job, result in zip(batch.jobs, done.result(), strict=True):
            if job.future.done():
                continue
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)

    async def _watch(self, batch: _Batch, done: asyncio.Future[list[Any]]) -> bool:
        """Wait for the call; True when it returned, False when it was abandoned."""
        while not done.done():
            live = [job.future for job in batch.jobs if not job.future.done()]
            if not live:
                batch.abort.set()
                finished, _ = await asyncio.wait({done}, timeout=self.stall_timeout_s)
                return bool(finished)
            await asyncio.wait({done, *live}, return_when=asyncio.FIRST_COMPLETED)
        return True

    def _unabandon(self) -> None:
        self._abandoned -= 1
        self._gauges()

    # ------------------------------------------------------------------------------------------ worker thread
    def _call(self, batch: _Batch) -> list[Any]:
        """Run the batch (in the worker thread): per job, its results or the exception it gets."""

        def progress(_done: float) -> None:
            if batch.abort.is_set():
                raise Aborted()

        flat = [item for job in batch.jobs for item in job.items]
        try:
            return self._split(batch.jobs, list(self.runner(batch.key, flat, progress)))
        except Aborted:
            return [DeadlineExceeded("the request left before its batch finished")] * len(batch.jobs)
        except ConfigError as exc:
            if len(batch.jobs) == 1:
                return [exc]
            return [self._call_alone(job, progress) for job in batch.jobs]  # keep a bad request from its neighbours
        except Exception as exc:  # noqa: BLE001 - a failed judge call fails this batch's requests, not the server
            return [BatchFailed(f"the judge call failed: {type(exc).__name__}: {exc}")] * len(batch.jobs)

    def _call_alone(self, job: _Job, progress: Callable[[float], None]) -> Any:
        try:
            return self._split([job], list(self.runner(job.key, job.items, progress)))[0]
        except Aborted:
            return DeadlineExceeded("the request left before its batch finished")
        except ConfigError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001
            return BatchFailed(f"the judge call failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _split(jobs: list[_Job], results: list[Any]) -> list[Any]:
        expected = sum(len(job.items) for job in jobs)
        if len(results) != expected:
            error = BatchFailed(f"the judge returned {len(results)} results for {expected} items (length "
                                "mismatch); no result of this batch is served")
            return [error] * len(jobs)
        out, pos = [], 0
        for job in jobs:
            out.append(results[pos:pos + len(job.items)])
            pos += len(job.items)
        return out
