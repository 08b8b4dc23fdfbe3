"""The request scheduler: concurrent jobs coalesced into batched judge calls that run off the event loop.

Each request becomes a *job*: a key (which judge call and options it needs, e.g. ``("pairs", swap)``), its
items, its **cost** in judgments (known before it is queued: the judge's :meth:`~brrm.RewardJudge.cost`) and a
deadline. A scheduler task takes the oldest job, waits up to ``max_wait_s`` for others with the same key (only
while the arrival rate promises company, :mod:`brrm.service.arrivals`), and runs up to
``max_batch`` items (by *weight*: 1 per item unless the caller says otherwise, e.g. a group's pair count) as
**one** judge call in a worker thread, so the event loop never blocks on model work. A job larger than
``max_batch`` is split across calls (it keeps its place: its remaining items go first in the next call) and
counts against the queue until its last item starts. Results are written back per item after checking that the
judge returned exactly one result per item (a mismatch fails the whole batch: no request ever receives
another's result).

Fault isolation (:mod:`brrm.service.isolation`): a call that raises is retried by bisection, so a failure lands
on the item that causes it; that item gets its own failed result (``invalid_input`` for text the backend cannot
encode, else ``backend_error``) from the ``failed`` factory, every other item its own result. When every item
fails alone, the backend is failing: the batch's requests get :class:`BatchFailed` (503).

Admission control: the queue holds at most ``max_queue`` cost units; a job that does not fit is refused at once
(:class:`QueueFull`, 429 with ``Retry-After``). Queued work whose deadline has passed is answered
:class:`DeadlineExceeded` (504) at once and never started; a job whose client goes away is cancelled the same
way. When every job of a running call has gone, the call is asked to stop at its next progress report (the
judge's ``progress`` hook raises :class:`Aborted`); one that still has not returned after ``stall_timeout_s``
(on a reentrant backend sooner, when queued work would otherwise wait past half of its own remaining deadline) is
abandoned — its thread runs on, its results are dropped — so a stuck backend cannot hold the queue. At
``max_abandoned`` such threads the scheduler refuses new work (:class:`Unavailable`, 503). A backend that is not
reentrant never has two calls inside it: it runs one call at a time, and while an abandoned call is still inside,
queued work waits and new work is refused (:mod:`brrm.service.stalls`).

A failing backend is not bisected again and again (:mod:`brrm.service.breaker`): a circuit breaker opens after
consecutive failed calls and answers new work at once (:class:`BreakerOpen`, 503 with ``Retry-After``) until a
probe call succeeds, and items that already failed alone on a failing backend are not bisected again.

Every request's fate is its own. Each job carries a :class:`~brrm.cancellation.CancelToken`, set when it leaves;
with ``split`` (a judge that takes concurrent calls and shares one running batch across them: transformers'
continuous batching, vLLM, a server) each job's slice of a coalesced batch is a call of its own under that token,
so a disconnect or an expired deadline retires that request's rows alone at the next decoding step, a slice
that stalls is abandoned alone (its batch-mates are answered as they finish), and no other request's result
changes (a row computes the same bits in any batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from brrm.errors import ConfigError
from brrm.service.arrivals import Arrivals
from brrm.service.breaker import BreakerOptions, CircuitBreaker
from brrm.service.calls import CallOutcome, call_batch
from brrm.service.isolation import Aborted, NotCalled, Runner, classify, describe
from brrm.service.jobs import Batch, Job, Slice, cuts, spread
from brrm.service.metrics import Metrics
from brrm.service.refusals import BatchFailed, BreakerOpen, DeadlineExceeded, QueueFull, SchedulerError, Unavailable
from brrm.service.stalls import Stalls
from brrm.service.workers import Workers
from brrm.types import Status

__all__ = ["Aborted", "BatchFailed", "BreakerOpen", "DeadlineExceeded", "Failed", "QueueFull", "Runner", "Scheduler",
           "SchedulerError", "Unavailable"]

Failed = Callable[[Hashable, object, Status, str], object]
"""``failed(key, item, status, reason) -> result``: the typed failed result of one item (e.g. a
``PairwiseJudgment`` with ``status`` and ``reason``), served in place of the item's result."""


class Scheduler:
    """Coalesces jobs into judge calls; see the module docstring.

    Args:
        runner: the judge call (see :data:`~brrm.service.isolation.Runner`).
        max_batch: most item weight per call, >= 1.
        max_wait_s: the longest the oldest queued job waits for company, seconds >= 0; without ``split`` it waits
            only while arrivals make company likely within that window (:mod:`brrm.service.arrivals`).
        max_queue: most cost units waiting, >= 1; an empty queue always admits one job.
        concurrency: judge calls in flight at once, >= 1.
        stall_timeout_s: grace for a call nobody waits for before its thread is abandoned, seconds > 0.
        max_abandoned: abandoned threads at which new work is refused, >= 1.
        metrics: where queue depth, batch sizes, cancellations and refusals are recorded.
        failed: builds one item's failed result after bisection (None: the item's request gets
            :class:`BatchFailed`).
        split: run each job's slice of a coalesced batch as its own call, all at once (for a judge whose
            ``info.concurrent`` is True: its backend joins the calls into one running batch), so each request
            is cancelled, timed out or abandoned alone.
        reentrant: the backend takes concurrent calls (None: ``split``). One that does not runs one call at a time
            whatever ``concurrency`` says, and never starts one while an abandoned call is inside it.
        breaker: when the backend's circuit breaker opens (None: :class:`~brrm.service.breaker.BreakerOptions`'
            defaults).

    Raises:
        ConfigError: on an out-of-range setting.
    """

    def __init__(self, runner: Runner, *, max_batch: int, max_wait_s: float, max_queue: int, concurrency: int = 1,
                 stall_timeout_s: float = 30.0, max_abandoned: int = 1, metrics: Metrics | None = None,
                 failed: Failed | None = None, split: bool = False, reentrant: bool | None = None,
                 breaker: BreakerOptions | None = None) -> None:
        if max_batch < 1 or max_queue < 1 or concurrency < 1 or max_abandoned < 1:
            raise ConfigError("max_batch, max_queue, concurrency and max_abandoned must be >= 1")
        if max_wait_s < 0 or stall_timeout_s <= 0:
            raise ConfigError("max_wait_s must be >= 0 and stall_timeout_s > 0")
        self.runner, self.metrics, self.failed, self.split = runner, metrics, failed, split
        self.max_batch, self.max_wait_s, self.max_queue = max_batch, max_wait_s, max_queue
        self.concurrency, self.stall_timeout_s, self.max_abandoned = concurrency, stall_timeout_s, max_abandoned
        self.reentrant = split if reentrant is None else reentrant
        self.breaker = CircuitBreaker(breaker)
        self._call = self.breaker.guard(runner)
        self._stalls = Stalls(reentrant=self.reentrant, stall_timeout_s=stall_timeout_s, max_abandoned=max_abandoned)
        self._queue: list[Job] = []
        self._queued_cost = 0
        self._running = 0
        self._closing = False
        self._batch_seconds = 1.0  # running mean, for Retry-After
        self._arrivals = Arrivals(max_wait_s, adaptive=not split)  # split: the backend's running batch joins calls
        self._changed: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()
        self._workers = Workers("brrm-judge")

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the scheduling task on the running event loop."""
        self._changed = asyncio.Event()
        self._slots = asyncio.Semaphore(self.concurrency if self.reentrant else 1)
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
        self._workers.close()

    @property
    def queue_depth(self) -> int:
        """Cost units waiting (not yet running)."""
        return self._queued_cost

    @property
    def running(self) -> int:
        """Judge calls in flight (abandoned ones not counted)."""
        return self._running

    @property
    def abandoned(self) -> int:
        """Abandoned calls whose threads are still running."""
        return self._stalls.abandoned

    def unready(self) -> str:
        """Why the server should not be ready because of its backend ("" when it should): a stuck reentrant
        backend, or a stalled call inside a non-reentrant one past its bound (:mod:`brrm.service.stalls`)."""
        return self._stalls.unready()

    def full(self) -> bool:
        """Whether the queue is at or over ``max_queue`` (a new job of any cost would be refused)."""
        return bool(self._queue) and self._queued_cost >= self.max_queue

    # ------------------------------------------------------------------------------------------ submit
    def check_admission(self, cost: int) -> None:
        """Refuse a job of ``cost`` units now if it would be refused when submitted (no side effect but metrics).

        Raises:
            Unavailable: shutting down, stuck or stalled (503). BreakerOpen: the backend is failing (503).
            QueueFull: no room now (429).
        """
        if self._closing:
            raise Unavailable("the server is shutting down; retry on another replica")
        stalled = self._stalls.refusal()
        if stalled is not None:
            raise stalled
        failing = self.breaker.refusal()
        if failing is not None:
            raise BreakerOpen(failing, self.breaker.retry_after())
        if self._queue and self._queued_cost + cost > self.max_queue:
            if self.metrics:
                self.metrics.rejected.inc()
            raise QueueFull(f"the queue is full ({self._queued_cost} of {self.max_queue} judgments waiting); retry "
                            "later", self.retry_after())

    async def submit(self, key: Hashable, items: Sequence[object], *, timeout_s: float, cost: int | None = None,
                     weights: Sequence[int] | None = None, units: Sequence[int] | None = None,
                     on_job: Callable[[Job], None] | None = None) -> list:
        """Queue ``items`` for judge calls shared with other jobs of the same ``key``; their results in order.

        Args:
            key: the judge call (jobs of equal keys share calls).
            items: the job's items, >= 1.
            timeout_s: the job's deadline from now, seconds > 0.
            cost: the job's cost in judgments (admission; default ``len(items)``), spread over its items.
            weights: per-item weight for filling a call up to ``max_batch`` (default 1 each).
            units: sizes of consecutive runs of items that are never split across calls (summing to
                ``len(items)``; default: 1 each), e.g. the two presentation orders of one pair.
            on_job: called with the queued job; its ``deadline`` may be moved later while it waits (a job shared by
                :class:`~brrm.service.singleflight.SingleFlight` waits for its latest waiter).

        Raises:
            QueueFull: no room now (429). Unavailable: shutting down or stuck (503).
            DeadlineExceeded: ``timeout_s`` passed first (504). BatchFailed: the call failed (503).
            ConfigError: the judge refused this request's input (422).
            asyncio.CancelledError: the caller was cancelled (its queued work is dropped first).
        """
        assert self._changed is not None, "Scheduler.start() was not called"
        items = list(items)
        cost = len(items) if cost is None else max(1, cost)
        self.check_admission(cost)
        loop = asyncio.get_running_loop()
        now = loop.time()
        job = Job(key, items, [max(1, int(w)) for w in weights] if weights is not None else [1] * len(items),
                   spread(cost, len(items)), now + timeout_s, now, loop.create_future(), [None] * len(items),
                   cuts(units, len(items)))
        self._arrivals.arrived(now, company=bool(self._queue or self._running))
        self._queue.append(job)
        self._queued_cost += cost
        self._changed.set()
        self._gauges()
        if on_job is not None:
            on_job(job)
        try:
            done, _ = await asyncio.wait({job.future}, timeout=timeout_s)
            while not done and job.deadline > loop.time():  # moved later (on_job)
                done, _ = await asyncio.wait({job.future}, timeout=job.deadline - loop.time())
        except asyncio.CancelledError:
            self._drop(job, "disconnect")
            raise
        if not done:
            self._drop(job, "deadline")
            raise DeadlineExceeded(f"the request did not finish within its deadline of {job.deadline - now:g} s")
        return list(job.future.result())

    def retry_after(self) -> int:
        """Seconds until the queue is likely to have room, >= 1."""
        batches = self._queued_cost / self.max_batch / self.concurrency + 1
        return max(1, math.ceil(batches * self._batch_seconds))

    def _unqueue(self, job: Job) -> bool:
        if job not in self._queue:
            return False
        self._queue.remove(job)
        self._queued_cost -= job.queued_cost
        job.next = len(job.items)
        assert self._changed is not None
        self._changed.set()
        self._gauges()
        return True

    def _drop(self, job: Job, reason: str) -> None:
        started = job.next > 0
        job.token.cancel(reason)  # its rows in a running batch are retired at the next step
        queued = self._unqueue(job)
        if not job.future.done():
            job.future.cancel()
            if self.metrics:
                stage = "running" if started or not queued else "queued"
                self.metrics.cancelled.labels(reason=reason, stage=stage).inc()

    def _gauges(self) -> None:
        if self.metrics:
            self.metrics.queue_depth.set(self._queued_cost)
            self.metrics.running_batches.set(self._running)
            self.metrics.abandoned_batches.set(self._stalls.abandoned)

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

    async def _next_batch(self) -> Batch:
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        while True:
            self._expire(loop.time())
            while not self._queue or self._stalls.blocking:  # a non-reentrant backend: wait for a stalled call
                self._changed.clear()
                await self._changed.wait()
                self._expire(loop.time())
            first = self._queue[0]
            while self._queue and self._queue[0] is first and self._weight_of(first.key) < self.max_batch:
                delay = self._arrivals.hold_until(first.enqueued) - loop.time()  # later arrivals move it
                if delay <= 0:
                    break
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), delay)
            if self._queue and self._queue[0] is first:
                return self._take(first.key)

    def _expire(self, now: float) -> None:
        """Answer queued jobs whose deadline has passed (never started)."""
        for job in [j for j in self._queue if j.deadline <= now and j.next == 0]:
            self._unqueue(job)
            job.token.cancel("deadline")
            if not job.future.done():
                job.future.set_exception(DeadlineExceeded("the request's deadline passed while it was queued"))
                if self.metrics:
                    self.metrics.cancelled.labels(reason="deadline", stage="queued").inc()

    def _weight_of(self, key: Hashable) -> int:
        return sum(sum(job.weights[job.next:]) for job in self._queue if job.key == key)

    def _take(self, key: Hashable) -> Batch:
        slices: list[Slice] = []
        weight = 0
        for job in list(self._queue):
            if job.key != key:
                continue
            start = end = job.next
            while end < len(job.items):
                stop = job.step(end)
                extra = sum(job.weights[end:stop])
                if (slices or end > start) and weight + extra > self.max_batch:
                    break
                weight, end = weight + extra, stop
            if end == start:
                break
            self._queued_cost -= sum(job.costs[start:end])
            job.next, job.pending = end, job.pending + 1
            slices.append(Slice(job, start, end))
            if end < len(job.items):
                break  # the job goes on in the next call, keeping its place
            self._queue.remove(job)
        self._running += 1
        self._gauges()
        if self.metrics:
            self.metrics.batch_items.observe(sum(s.end - s.start for s in slices))
            self.metrics.batch_requests.observe(len(slices))
        return Batch.of(key, slices[0]) if len(slices) == 1 else Batch(key, slices)

    async def _run(self, batch: Batch) -> None:
        assert self._slots is not None
        parts = [Batch.of(batch.key, s) for s in batch.slices] if self.split and len(batch.slices) > 1 else [batch]
        loop = asyncio.get_running_loop()
        dones: dict[Batch, asyncio.Future[CallOutcome]] = {}
        for part in parts:
            dones[part] = loop.create_future()
            self._workers.submit(self._work(part, dones[part], loop))
        started = time.perf_counter()
        try:
            stalled = await self._watch(parts, dones)
        finally:
            self._running -= 1
            self._slots.release()
        if stalled:
            self._stalls.abandon(len(stalled))
            for part in stalled:
                dones[part].add_done_callback(lambda _f: self._unabandon())
            if self.metrics:
                self.metrics.abandoned_total.inc(len(stalled))
            self._gauges()
            return
        seconds = time.perf_counter() - started
        self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * seconds
        if self.metrics:
            self.metrics.batch_seconds.observe(seconds)
        self._gauges()

    def _work(self, part: Batch, done: asyncio.Future[CallOutcome],
              loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """The worker thread's task for ``part``: its call, its outcome handed back to the loop."""

        def deliver(outcome: CallOutcome) -> None:
            if not done.done():
                done.set_result(outcome)

        def work() -> None:
            outcome = call_batch(self._call, part, self.breaker.settled(part.key))
            with contextlib.suppress(RuntimeError):  # the loop closed while an abandoned call ran on
                loop.call_soon_threadsafe(deliver, outcome)

        return work

    async def _watch(self, parts: list[Batch], dones: dict[Batch, asyncio.Future[CallOutcome]]) -> list[Batch]:
        """Answer each part's requests as its call returns; returns the parts abandoned as stalled (their
        requests had all left and the call did not return within the grace of :meth:`Stalls.grace`)."""
        pending, held, served = list(parts), list[tuple[Batch, CallOutcome]](), 0
        orphaned: float | None = None  # when the calls still running were first all orphaned
        while pending:
            for part in [p for p in pending if dones[p].done()]:
                pending.remove(part)
                outcome = dones[part].result()
                if outcome.kind == "bisected":
                    held.append((part, outcome))  # classified over the whole batch (below, or once one is served)
                else:
                    served += self._serve(part, outcome)
                if served and held:  # a batch-mate got results: the backend works, the failures are the items'
                    self._serve_bisected(held, served)
                    held = []
            if not pending:
                break
            live = [f for p in pending for f in p.futures if not f.done()]
            for part in pending:
                if all(f.done() for f in part.futures):
                    part.abort.cancel("left")  # nobody waits for this call any more: stop it at its next step
            if not live:
                orphaned = asyncio.get_running_loop().time() if orphaned is None else orphaned
                if not await self._stalls.grace([dones[p] for p in pending], orphaned, self._queue):
                    break
                continue
            waits: set[asyncio.Future[Any]] = {*(dones[p] for p in pending), *live}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        self._serve_bisected(held, served)
        return pending

    def _serve(self, part: Batch, outcome: CallOutcome) -> int:
        """Deliver a returned (not bisected) call's outcome to its slices; returns how many results it served."""
        if outcome.kind == "cancelled":
            return self._each(part, DeadlineExceeded("the request left before its batch finished"))
        if outcome.kind == "mismatch":
            return self._each(part, BatchFailed(outcome.reason))
        pos = 0
        for piece in part.slices:
            values = list(outcome.values[pos:pos + piece.end - piece.start])
            pos += piece.end - piece.start
            error = next((v for v in values if isinstance(v, BaseException)), None)
            self._deliver(piece, error if error is not None else values)
        return len(outcome.values)

    def _serve_bisected(self, held: list[tuple[Batch, CallOutcome]], served: int) -> None:
        """Deliver bisected calls: the failures are their items' own, unless no item of the whole batch got a
        result and none was to blame (the backend is failing: :class:`BatchFailed`)."""
        flat = [v for _, outcome in held for v in outcome.values]
        backend = served == 0 and bool(flat) and classify(flat) == "backend"
        for part, outcome in held:
            if backend:  # no item to blame: its retry is not bisected again (settled), and is told to wait
                self.breaker.settle(part.key, [i for s in part.slices for i in s.job.items[s.start:s.end]])
                why = str(outcome.error) if isinstance(outcome.error, NotCalled) else \
                    f"the backend is failing: the judge call failed for every item alone: {outcome.reason}"
                self._each(part, BatchFailed(why, self.breaker.retry_after()))
                continue
            items = [item for s in part.slices for item in s.job.items[s.start:s.end]]
            values = tuple(self._failed_item(part.key, item, v) for item, v in zip(items, outcome.values,
                                                                                    strict=True))
            self._serve(part, CallOutcome("results", values))

    def _each(self, part: Batch, error: BaseException) -> int:
        for piece in part.slices:
            self._deliver(piece, error)
        return 0

    def _deliver(self, piece: Slice, outcome: object) -> None:
        job = piece.job
        job.pending -= 1
        if job.future.done():
            return
        if isinstance(outcome, BaseException):
            self._unqueue(job)
            job.token.cancel("failed")  # its other slices stop
            job.future.set_exception(outcome)
            return
        if not isinstance(outcome, list):  # a slice's outcome is its results or the exception its request gets
            raise TypeError(f"a slice's outcome must be a list of results, got {type(outcome).__name__}")
        job.results[piece.start:piece.end] = outcome
        if job.next == len(job.items) and job.pending == 0:
            job.future.set_result(job.results)

    def _unabandon(self) -> None:
        self._stalls.left()
        assert self._changed is not None
        self._changed.set()  # a non-reentrant backend's queued work may run now
        self._gauges()

    # ------------------------------------------------------------------------------------------ outcomes
    def _failed_item(self, key: Hashable, item: object, outcome: object) -> object:
        """An item's outcome after bisection: its result, its failed result, or the exception for its request."""
        if not isinstance(outcome, BaseException) or isinstance(outcome, ConfigError):
            return outcome
        status = Status.INVALID_INPUT if isinstance(outcome, UnicodeError) else Status.BACKEND_ERROR
        if self.failed is None:
            return BatchFailed(f"the judge call failed for this request's input: {describe(outcome)}")
        return self.failed(key, item, status, f"this item failed on its own: {describe(outcome)}")
