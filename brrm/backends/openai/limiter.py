"""Adaptive concurrency per upstream: how many requests the OpenAI-compatible backend keeps in flight to one server.

Each base URL has one :class:`AdaptiveLimit`, shared by every call of the backend to that server (the threads of
one ``generate``, concurrent ``generate`` calls of a server's requests, ``classify``). It is additive increase,
multiplicative decrease (AIMD, the rule of TCP's congestion avoidance, RFC 5681 §3.1):

* **start** at :attr:`ConcurrencyPolicy.initial` requests in flight;
* **increase** by 1 after each window of successes (a window is as many 200 answers as the limit is: one more
  request per round of full use), up to :attr:`ConcurrencyPolicy.maximum`;
* **decrease** by half (rounded down, never below 1) on a 429 or 503 answer, once per overload: the other
  answers to requests sent before that halving tell of the same overload and do not halve it again;
* **pause** every call to the server for as long as a 429 or 503 asked in its ``Retry-After`` (when the request
  waits for it, i.e. it is no longer than the request's timeout).

Other failures (another 5xx, a timeout, a refused connection) neither raise nor lower the limit. A call waits for
a free slot; no request is sent while the limit's slots are taken, so a server never sees more requests of this
backend at once than the limit of the moment each was sent at. Two backends in one process adapt to the same
server independently, as two TCP flows do.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from brrm.errors import ConfigError

OVERLOAD_STATUSES = frozenset({429, 503})
"""The answers that halve an upstream's limit (RFC 9110 §15.6.4 and RFC 6585 §4: overloaded, too many)."""


class Signal(enum.Enum):
    """What one answer says about its upstream's load."""

    SUCCESS = "success"
    """A 200 answer: counts towards the window of successes that raises the limit."""
    OVERLOAD = "overload"
    """A 429 or 503 answer: halves the limit (once per overload)."""
    NEUTRAL = "neutral"
    """Any other failure: the limit stays."""

    @classmethod
    def of_status(cls, status: int) -> Signal:
        """The signal of an HTTP status: 200 success, 429 / 503 overload, any other neutral."""
        return cls.SUCCESS if status == 200 else cls.OVERLOAD if status in OVERLOAD_STATUSES else cls.NEUTRAL


@dataclass(frozen=True)
class ConcurrencyPolicy:
    """The AIMD settings of every upstream of one backend.

    Attributes:
        initial: requests in flight per upstream at start, >= 1 and <= ``maximum`` (default 16).
        maximum: the most requests in flight per upstream the limit grows to, >= 1 (default 64).

    Raises:
        ConfigError: when either is not an int >= 1 or ``initial`` exceeds ``maximum``, naming the field.
    """

    initial: int = 16
    maximum: int = 64

    def __post_init__(self) -> None:
        for name in ("initial", "maximum"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}_concurrency must be an int >= 1, got {value!r}")
        if self.initial > self.maximum:
            raise ConfigError(f"initial_concurrency ({self.initial}) must be <= max_concurrency ({self.maximum})")


@dataclass(frozen=True)
class LimitState:
    """One upstream's limit at one moment (a snapshot; the limit keeps moving).

    Attributes:
        url: the upstream's base URL.
        limit: requests allowed in flight now, in [1, maximum].
        in_flight: requests sent and not yet answered, >= 0 (above ``limit`` just after a halving).
        waiting: calls waiting for a slot or for the upstream's pause to end, >= 0.
        peak_in_flight: the most requests ever in flight at once, >= 0.
        increases, decreases: how often the limit rose by one and was halved.
        overloads: 429 and 503 answers received (each halving is one or more of them).
        paused_s: seconds the upstream still asked to be left alone (``Retry-After``), >= 0.
    """

    url: str
    limit: int
    in_flight: int
    waiting: int
    peak_in_flight: int
    increases: int
    decreases: int
    overloads: int
    paused_s: float


class AdaptiveLimit:
    """The AIMD concurrency limit of one upstream (see the module docstring); thread-safe.

    Args:
        url: the upstream's base URL (for :meth:`state`).
        policy: start and ceiling.
        clock: monotonic seconds (injectable for tests).
        sleep: waits the given seconds (injectable for tests).
    """

    def __init__(self, url: str, policy: ConcurrencyPolicy, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url, self.policy = url, policy
        self._clock, self._sleep = clock, sleep
        self._cond = threading.Condition(threading.Lock())
        self._limit = policy.initial
        self._in_flight = self._waiting = self._peak = 0
        self._successes = self._increases = self._decreases = self._overloads = 0
        self._paused_until = float("-inf")

    def acquire(self) -> int:
        """Wait for the upstream's pause to end and a slot to be free, then take the slot.

        Returns:
            The ticket to give back to :meth:`release` (which halving the request was sent after).
        """
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    pause = self._paused_until - self._clock()
                    if pause > 0:
                        self._cond.release()
                        try:
                            self._sleep(pause)
                        finally:
                            self._cond.acquire()
                    elif self._in_flight < self._limit:
                        self._in_flight += 1
                        self._peak = max(self._peak, self._in_flight)
                        return self._decreases
                    else:
                        self._cond.wait()
            finally:
                self._waiting -= 1

    def release(self, ticket: int, signal: Signal) -> None:
        """Give a slot back with what its answer said: a success counts towards the next increase, an overload
        halves the limit unless a halving already followed the request's sending (``ticket``).

        Raises:
            RuntimeError: when no slot is taken (a release without its acquire: a bug).
        """
        with self._cond:
            if self._in_flight <= 0:
                raise RuntimeError(f"{self.url}: a concurrency slot released that was never taken")
            self._in_flight -= 1
            if signal is Signal.SUCCESS:
                self._successes += 1
                if self._successes >= self._limit:
                    self._successes = 0
                    if self._limit < self.policy.maximum:
                        self._limit += 1
                        self._increases += 1
            elif signal is Signal.OVERLOAD:
                self._overloads += 1
                if ticket == self._decreases:
                    self._limit = max(1, self._limit // 2)
                    self._decreases += 1
                    self._successes = 0
            self._cond.notify_all()

    def pause(self, seconds: float) -> None:
        """Send nothing to the upstream for ``seconds`` (>= 0) from now, or longer when already paused longer."""
        with self._cond:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    def state(self) -> LimitState:
        """A snapshot of the limit and its counters."""
        with self._cond:
            return LimitState(self.url, self._limit, self._in_flight, self._waiting, self._peak, self._increases,
                              self._decreases, self._overloads, max(0.0, self._paused_until - self._clock()))
