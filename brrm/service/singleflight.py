"""Single-flight: identical jobs in flight at once run once, and every waiter gets the one result.

Two jobs are identical when their :func:`job_digest` is: the judge's identity (the weights' fingerprint and every
resolved option of the variant the call selects: :func:`variant_identity`), the call (method and per-request
options: the scheduler key) and the canonical form of the items (every field: conversation, responses, ids,
labels, principles, references), with the weights and units that shape how they are batched. A result depends
only on these (never on batch, order or neighbours), so sharing one run is exact.

:class:`SingleFlight` sits in front of a :class:`~brrm.service.scheduler.Scheduler`, with its ``submit``:

* the first job of a digest is queued as usual; a job arriving while it is queued or running *joins* it instead
  (no cost queued, no model call) and gets the same results (a new list of the same frozen values);
* each waiter keeps its own deadline: one that passes answers that waiter
  :class:`~brrm.service.scheduler.DeadlineExceeded` alone, and a waiter whose client goes away (its task is
  cancelled) simply leaves. The shared job is cancelled only when its last waiter has left (and, when a waiter asked
  for it, ``linger_s`` seconds have passed with no one joining: a client that gave up and retries finds its job
  still running, or its results when the job finished in the meantime; ``brrm serve`` asks it for requests with
  an ``Idempotency-Key``); its deadline in the scheduler
  is the latest of its waiters' (extended when a later one joins), so queued-deadline expiry and stall handling
  see the deadline someone still waits on;
* a failure (an exception: 429, 503, 504, 422) reaches every waiter, and nothing is cached: the digest is forgotten
  the moment the job ends, successfully or not, so the next identical job runs again (the one exception: a
  lingering job that succeeded after its last waiter left keeps its results for the rest of its grace).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from brrm.service.canonical import canonical
from brrm.service.items import Variants
from brrm.service.jobs import Job
from brrm.service.scheduler import DeadlineExceeded, Scheduler

__all__ = ["SingleFlight", "canonical", "job_digest", "variant_identity"]

Identity = Callable[[Hashable], str]
"""``identity(key) -> str``: the identity of the judge a scheduler key runs on (fingerprint and resolved options)."""

FORMAT = 1
"""Version of the digest recipe (in every digest, so a changed recipe never collides)."""


def job_digest(identity: str, key: Hashable, items: Sequence[object], weights: Sequence[int] | None = None,
               units: Sequence[int] | None = None) -> str:
    """The sha256 hex digest (64 characters) naming a job: judge ``identity``, call ``key``, ``items``, and the
    ``weights`` / ``units`` it is batched by (None: the defaults).

    Raises:
        ConfigError: when the key or an item has no canonical form (:func:`canonical`).
    """
    body = [f"brrm-job:{FORMAT}", identity, canonical(key), canonical(list(items)),
            None if weights is None else [int(w) for w in weights], None if units is None else [int(u) for u in units]]
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def variant_identity(variants: Variants) -> Identity:
    """The identity function of a served judge: for a key, the sorted-key JSON of the :class:`~brrm.JudgeInfo` of
    the variant its ``options`` select (the weights' fingerprint, the spec, every resolved option), built once per
    options value.

    Raises (from the returned function):
        ConfigError: when the variant cannot be built (:meth:`Variants.get`).
    """
    made: dict[object, str] = {}
    lock = threading.Lock()

    def identity(key: Hashable) -> str:
        options = getattr(key, "options", None)
        with lock:
            if options not in made:
                info = variants.get(options).info.to_dict()  # JSON-ready; anything else by its repr
                made[options] = json.dumps(info, sort_keys=True, separators=(",", ":"), default=repr)
            return made[options]

    return identity


@dataclass(eq=False)
class _Flight:
    """One shared job: its task, the latest deadline of its waiters (event-loop clock, seconds), how many wait,
    and the scheduler's job once queued."""

    digest: str
    deadline: float
    task: asyncio.Future[list[object]] | None = None
    waiters: int = 0
    job: Job | None = None
    linger_s: float = 0.0
    timer: asyncio.TimerHandle | None = None

    def attach(self, job: Job) -> None:
        self.job = job
        job.deadline = max(job.deadline, self.deadline)

    def extend(self, deadline: float) -> None:
        self.deadline = max(self.deadline, deadline)
        if self.job is not None:
            self.job.deadline = max(self.job.deadline, self.deadline)


class SingleFlight:
    """Identical in-flight jobs run once (see the module docstring).

    Args:
        scheduler: where the shared jobs are queued.
        identity: the judge identity of a scheduler key (:func:`variant_identity`).

    Attributes:
        joined: jobs that joined a flight instead of running (a count since start).
    """

    def __init__(self, scheduler: Scheduler, identity: Identity) -> None:
        self.scheduler, self.identity = scheduler, identity
        self._flights: dict[str, _Flight] = {}
        self.joined = 0

    @property
    def in_flight(self) -> int:
        """Distinct jobs queued or running."""
        return len(self._flights)

    async def submit(self, key: Hashable, items: Sequence[object], *, timeout_s: float, cost: int | None = None,
                     weights: Sequence[int] | None = None, units: Sequence[int] | None = None,
                     linger_s: float = 0.0) -> list[object]:
        """:meth:`Scheduler.submit <brrm.service.scheduler.Scheduler.submit>`, shared with identical jobs in flight.

        Args:
            key, items, cost, weights, units: as the scheduler takes them.
            timeout_s: this waiter's deadline from now, seconds > 0.
            linger_s: how long the shared job outlives this waiter's leaving early, waiting for one to join, in
                seconds (the longest any waiter asked for counts; 0: cancelled when the last waiter leaves).

        Raises:
            What the shared job raises (to every waiter); DeadlineExceeded: this waiter's deadline passed first;
            asyncio.CancelledError: this waiter was cancelled (the shared job runs on for the others);
            ConfigError: a key or item with no canonical form.
        """
        digest = job_digest(self.identity(key), key, items, weights, units)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        flight = self._flights.get(digest)
        if flight is None:
            flight = self._start(digest, key, list(items), deadline, timeout_s, cost, weights, units)
        else:
            self.joined += 1
            flight.extend(deadline)
        flight.waiters += 1
        flight.linger_s = max(flight.linger_s, linger_s)
        if flight.timer is not None:
            flight.timer.cancel()
            flight.timer = None
        try:
            return await self._wait(flight, deadline, timeout_s)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and flight.linger_s > 0:
                flight.timer = loop.call_later(flight.linger_s, self._abandon, flight)
            else:
                self._abandon(flight)

    def _start(self, digest: str, key: Hashable, items: list[object], deadline: float, timeout_s: float,
               cost: int | None, weights: Sequence[int] | None, units: Sequence[int] | None) -> _Flight:
        loop = asyncio.get_running_loop()
        flight = _Flight(digest, deadline)

        async def shared() -> list[object]:  # queued with the latest deadline known by then
            timeout = timeout_s if flight.deadline == deadline else max(flight.deadline - loop.time(), 1e-3)
            return await self.scheduler.submit(key, items, timeout_s=timeout, cost=cost, weights=weights,
                                               units=units, on_job=flight.attach)

        flight.task = asyncio.ensure_future(shared())
        flight.task.add_done_callback(lambda task: self._ended(flight, task))
        self._flights[digest] = flight
        return flight

    def _abandon(self, flight: _Flight) -> None:
        """Cancel ``flight``'s job when no one waits on it any more (a finished one kept for a retry is dropped)."""
        if flight.waiters == 0 and flight.task is not None:
            self._forget(flight)  # a job arriving now starts afresh rather than joining a cancelled one
            if not flight.task.done():
                flight.task.cancel()

    def _ended(self, flight: _Flight, task: asyncio.Future[list[object]]) -> None:
        """The shared job ended. Forgotten at once, unless it succeeded while lingering with no one waiting: then
        its results wait out the rest of the grace, so the client that gave up finds them when it retries."""
        failed = task.cancelled() or task.exception() is not None  # retrieved: never a leaked error
        if failed or flight.waiters or flight.timer is None:
            self._forget(flight)

    def _forget(self, flight: _Flight) -> None:
        if self._flights.get(flight.digest) is flight:
            del self._flights[flight.digest]

    async def _wait(self, flight: _Flight, deadline: float, timeout_s: float) -> list[object]:
        """The shared results for one waiter, or its own DeadlineExceeded when its deadline passes first. A waiter
        whose deadline is the flight's latest leaves the answer to the scheduler, which answers the job at that
        deadline (its own 504, exactly as for a job nobody shares)."""
        assert flight.task is not None
        loop = asyncio.get_running_loop()
        done, _ = await asyncio.wait({flight.task}, timeout=max(deadline - loop.time(), 0.0))
        if not done and flight.deadline <= deadline:
            done, _ = await asyncio.wait({flight.task}, timeout=1.0)
        if not done:
            raise DeadlineExceeded(f"the request did not finish within its deadline of {timeout_s:g} s")
        return list(flight.task.result())
