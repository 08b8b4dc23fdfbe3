"""Abandoned judge calls still running, and what they mean for new work.

The scheduler abandons a call whose requests have all left and that does not return within its grace
(``stall_timeout_s``): its results are dropped, but its thread is still inside the backend. What may happen next
depends on whether the backend is *reentrant* (its traits say it takes concurrent calls: ``info.concurrent``,
e.g. ``openai``, ``vllm``, transformers' continuous batching):

* **reentrant** — new calls start beside the abandoned one; at ``max_abandoned`` abandoned calls still running,
  new work is refused (503) and ``/ready`` says the backend is stuck.
* **not reentrant** (a transformers model with static batches is not thread-safe) — no call ever starts while an
  abandoned one is inside: queued work waits until it leaves, new work is refused at once (503 with
  ``Retry-After`` and a reason naming the stall), and once it has stayed inside for ``stall_timeout_s`` after it
  was abandoned, ``/ready`` answers 503 with the reason instead of serving on a model it cannot trust. When it
  leaves, work resumes and ``/ready`` is 200 again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from brrm.service.jobs import Job
from brrm.service.refusals import Unavailable

__all__ = ["Stalls"]


class Stalls:
    """The abandoned calls of one scheduler (event-loop side only).

    Args:
        reentrant: the backend takes concurrent calls (see the module docstring).
        stall_timeout_s: the bound, after abandonment, past which a call still inside a non-reentrant backend makes
            the server not ready, seconds > 0.
        max_abandoned: abandoned calls still running at which a reentrant backend's new work is refused, >= 1.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(self, *, reentrant: bool, stall_timeout_s: float, max_abandoned: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reentrant, self.stall_timeout_s, self.max_abandoned = reentrant, stall_timeout_s, max_abandoned
        self._clock = clock
        self.abandoned = 0
        self._since: float | None = None  # when the calls now inside were first abandoned

    async def grace(self, dones: Sequence[asyncio.Future[Any]], orphaned: float, queue: Sequence[Job]) -> bool:
        """Wait for calls orphaned at ``orphaned`` (loop clock) up to ``stall_timeout_s`` after it; on a reentrant
        backend less when a queued job would otherwise wait past the middle of what was left of its deadline then
        (or when it arrived: abandoning frees a slot for it; on a backend that is not reentrant it frees nothing).
        True when one of them returned in time (the caller looks again), False when the rest are to be abandoned."""
        loop = asyncio.get_running_loop()
        end = orphaned + self.stall_timeout_s
        while not any(d.done() for d in dones):
            now = loop.time()
            waiting = queue if self.reentrant else ()
            limit = min([end, *((max(orphaned, j.enqueued) + j.deadline) / 2 for j in waiting)])
            if now >= limit:
                return False
            await asyncio.wait(set(dones), timeout=min(0.05, limit - now))
        return True

    def abandon(self, n: int) -> None:
        """``n`` calls were abandoned (their threads run on)."""
        self.abandoned += n
        if self._since is None:
            self._since = self._clock()

    def left(self) -> None:
        """One abandoned call returned (its thread left the backend)."""
        self.abandoned -= 1
        if self.abandoned == 0:
            self._since = None

    @property
    def blocking(self) -> bool:
        """Whether no call may start now: a non-reentrant backend with an abandoned call still inside."""
        return not self.reentrant and self.abandoned > 0

    def _inside_s(self) -> float:
        return 0.0 if self._since is None else self._clock() - self._since

    def refusal(self) -> Unavailable | None:
        """What new work is answered now (None: it is taken)."""
        if self.blocking:
            inside = self._inside_s()
            wait = max(1, math.ceil(self.stall_timeout_s - inside)) if inside < self.stall_timeout_s else \
                max(1, math.ceil(self.stall_timeout_s))
            return Unavailable(f"{self._stalled(inside)}; no other call may run in it until that one returns: retry "
                               "later", wait)
        if self.abandoned >= self.max_abandoned:
            return Unavailable(f"the backend is stuck: {self.abandoned} judge call(s) did not return after their "
                               "requests left; restart the server")
        return None

    def unready(self) -> str:
        """Why ``/ready`` is 503 because of abandoned calls ("" when they do not make it so)."""
        if self.blocking:
            inside = self._inside_s()
            return self._stalled(inside) + "; restart the server if it never returns" \
                if inside >= self.stall_timeout_s else ""
        return "the backend is stuck on abandoned judge calls" if self.abandoned >= self.max_abandoned else ""

    def _stalled(self, inside: float) -> str:
        return (f"a stalled judge call is still inside the backend, which takes one call at a time ({inside:.1f} s "
                "after it was abandoned: its requests left and it did not return within --stall-timeout)")
