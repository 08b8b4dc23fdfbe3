"""The scheduler for callers outside an asyncio server: one :class:`~brrm.service.scheduler.Scheduler` on an
event loop of its own thread, reached from any thread or any other event loop.

An RLHF adapter (verl's per-sample ``compute_score``) sends one sample at a time from its own event loop; the
hosted scheduler gathers them into shared judge calls exactly as the server does (coalescing, deadlines that free
their slot, bisection of a raising item, stall detection). With a judge that takes concurrent calls
(``info.concurrent``: continuous batching, vLLM, a ``brrm serve`` behind :class:`~brrm.service.RemoteJudge`) each
request is its own call under its own cancellation token (``split``), so a stalled or timed-out sample costs only
itself; healthy samples gathered with it are answered as their calls return, in this round and the next. A
surface whose unit of work is not one of :func:`~brrm.service.run.make_runner`'s calls (verl's group manager ranks
a GRPO group with its repair pass) passes its own ``runner`` and ``failed`` factory and keeps every other rule.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable, Sequence

from brrm.errors import ConfigError
from brrm.service.breaker import BreakerOptions
from brrm.service.isolation import Runner
from brrm.service.items import failed_result
from brrm.service.run import make_runner
from brrm.service.scheduler import Failed, Scheduler
from brrm.types import RewardJudge

__all__ = ["HostedScheduler"]


class HostedScheduler:
    """A scheduler over ``judge`` on a daemon thread's event loop.

    Args:
        judge: the judge (local, or a :class:`~brrm.service.RemoteJudge`).
        concurrency: judge calls at once, >= 1 (None: 4 when ``judge.info.concurrent``, else 1).
        max_batch: most items per call, >= 1.
        max_wait_s: how long the oldest request waits for company, seconds >= 0.
        stall_timeout_s: grace for a call nobody waits for before its thread is abandoned, seconds > 0.
        max_abandoned: abandoned (stalled) calls still running at which new work is refused, >= 1.
        runner: the scheduler's judge call (None: :func:`~brrm.service.run.make_runner` over ``judge``).
        failed: one item's failed result after bisection (None: :func:`~brrm.service.items.failed_result`).
        breaker: when the judge's circuit breaker opens (None: :class:`~brrm.service.breaker.BreakerOptions`'
            defaults: 10 failed calls in a row, 10 s open).

    Attributes:
        judge: the judge it runs (callers ask it what work costs).

    Raises:
        ConfigError: on an out-of-range setting.
    """

    def __init__(self, judge: RewardJudge, *, concurrency: int | None = None, max_batch: int = 64,
                 max_wait_s: float = 0.01, stall_timeout_s: float = 1.0, max_abandoned: int = 4,
                 runner: Runner | None = None, failed: Failed | None = None,
                 breaker: BreakerOptions | None = None) -> None:
        concurrent = bool(judge.info.concurrent)
        self.judge = judge
        self.scheduler = Scheduler(runner or make_runner(judge), max_batch=max_batch, max_wait_s=max_wait_s,
                                   max_queue=1 << 30, concurrency=concurrency or (4 if concurrent else 1),
                                   stall_timeout_s=stall_timeout_s, max_abandoned=max_abandoned,
                                   failed=failed or failed_result, split=concurrent, breaker=breaker)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="brrm-service", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.scheduler.start(), self.loop).result()
        self._closed = False

    async def submit(self, key: Hashable, items: Sequence[object], *, timeout_s: float) -> list:
        """Await ``items``' results from any event loop (see :meth:`Scheduler.submit
        <brrm.service.scheduler.Scheduler.submit>`); cancelling the await cancels the job (its rows leave).

        Raises:
            ConfigError: after :meth:`close`. What :meth:`Scheduler.submit
            <brrm.service.scheduler.Scheduler.submit>` raises (DeadlineExceeded, Unavailable, BatchFailed, …).
        """
        if self._closed:
            raise ConfigError("this hosted scheduler is closed")
        job = asyncio.run_coroutine_threadsafe(self.scheduler.submit(key, items, timeout_s=timeout_s), self.loop)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            job.cancel()
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        """Let running calls finish (up to ``timeout_s``), then stop the loop (abandoned calls' threads are
        daemons and end with the process)."""
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self.scheduler.drain(timeout_s), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
