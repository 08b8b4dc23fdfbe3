"""A circuit breaker per backend, and the memory that keeps a retried request from being bisected twice.

A backend that fails every call (an upstream answering 503, a dead engine) would otherwise cost each request a
whole bisection (``2n - 1`` calls for ``n`` items, :mod:`brrm.service.isolation`), and each client retry another.
Two rules bound that:

* **the breaker** counts consecutive failed judge calls (bisection sub-calls included; a call that raises for its
  input — :class:`~brrm.errors.ConfigError`, :class:`UnicodeError` — or is cancelled counts neither way). At
  :attr:`BreakerOptions.failures` it *opens*: no call is made for :attr:`BreakerOptions.cooldown_s` seconds, a
  bisection under way stops, and new requests are answered at once (503 ``backend_failing`` with
  ``Retry-After``). Then it is *half-open*: one call (the probe) runs; its success closes the breaker, its failure
  opens it again for another cooldown. Any successful call resets the count.
* **settled items**: when every item of a bisected batch failed alone (the backend, not an item, is to blame),
  each item's identity (the call's key and the item's canonical form) is kept for :data:`SETTLED_S` seconds (at
  most :data:`SETTLED_MAX`). A later call that fails with such items in it does not bisect them again: they get
  the call's error at once (a client's retry costs one call, not a bisection). Any successful call forgets them.

Thread-safe: the worker threads record calls, the event loop reads the state.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from brrm.cancellation import Cancelled
from brrm.errors import ConfigError
from brrm.service.canonical import canonical
from brrm.service.isolation import NotCalled, Runner

__all__ = ["SETTLED_MAX", "SETTLED_S", "BreakerOptions", "CircuitBreaker", "NotCalled"]

SETTLED_S = 600.0
"""How long a settled item (failed alone on a failing backend) is remembered, seconds."""
SETTLED_MAX = 4096
"""Most settled items remembered (the oldest are forgotten first)."""


@dataclass(frozen=True)
class BreakerOptions:
    """When the breaker opens and for how long.

    Attributes:
        failures: consecutive failed judge calls that open it, >= 1 (default 10: above the ``1 + log2(n)``
            failures in a row a single bad item makes while a batch of up to 256 items is bisected down to it).
        cooldown_s: seconds it stays open before one probe call, > 0 (default 10); the ``Retry-After`` of a
            refusal while open is what is left of it, rounded up.
    """

    failures: int = 10
    cooldown_s: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int) or self.failures < 1:
            raise ConfigError(f"breaker failures must be an int >= 1, got {self.failures!r}")
        if not isinstance(self.cooldown_s, int | float) or not math.isfinite(self.cooldown_s) or self.cooldown_s <= 0:
            raise ConfigError(f"breaker cooldown_s must be a finite number > 0, got {self.cooldown_s!r}")


class CircuitBreaker:
    """The breaker and the settled items of one backend (see the module docstring).

    Args:
        options: thresholds.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(self, options: BreakerOptions | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options or BreakerOptions()
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened: float | None = None  # when it last opened (clock seconds); None: closed
        self._probe: float | None = None  # when the half-open breaker's probe began (clock seconds); None: none
        self._last = ""
        self._settled: OrderedDict[str, float] = OrderedDict()

    # ------------------------------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """``closed``, ``open`` (no call is made) or ``half_open`` (the cooldown passed: one probe may run)."""
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened is None:
            return "closed"
        return "open" if self._clock() < self._opened + self.options.cooldown_s else "half_open"

    def retry_after(self) -> int:
        """Whole seconds, >= 1, until a call may run again: what is left of the cooldown while open (1 once it
        has passed), else the whole cooldown (the ``Retry-After`` of a failing backend's 503)."""
        with self._lock:
            return self._retry_after()

    def _retry_after(self) -> int:
        if self._opened is None:
            return max(1, math.ceil(self.options.cooldown_s))
        return max(1, math.ceil(self._opened + self.options.cooldown_s - self._clock()))

    def refusal(self) -> str | None:
        """Why new work is refused now (the breaker is open), or None (closed or half-open: work is taken)."""
        with self._lock:
            if self._state() != "open":
                return None
            return f"{self._why()}; no judge call is made for {self._retry_after()} s"

    def _why(self) -> str:
        return (f"the backend is failing: {self._failures} judge calls in a row failed (last: {self._last}) and "
                "the circuit breaker is open")

    # ------------------------------------------------------------------------------------------ calls
    def begin(self) -> str | None:
        """Whether a judge call may run now: ``"call"`` (closed), ``"probe"`` (the one probe of a half-open
        breaker, held until its :meth:`end`, or for one cooldown: a probe that never returns does not hold the
        breaker for ever), or None (open: no call)."""
        with self._lock:
            state, now = self._state(), self._clock()
            if state == "closed":
                return "call"
            if state == "half_open" and (self._probe is None or now >= self._probe + self.options.cooldown_s):
                self._probe = now
                return "probe"
            return None

    def end(self, error: BaseException | None, *, probe: bool = False) -> None:
        """Record a call that :meth:`begin` let run: None (it returned), or what it raised; ``probe``: it was
        the half-open breaker's probe."""
        with self._lock:
            if probe:
                self._probe = None
            if error is None:
                self._failures, self._opened = 0, None
                self._settled.clear()
            elif not isinstance(error, ConfigError | UnicodeError | Cancelled):
                self._failures += 1
                self._last = f"{type(error).__name__}: {error}"[:300]
                if self._failures >= self.options.failures or self._opened is not None:
                    self._opened = self._clock()

    def guard(self, runner: Runner) -> Runner:
        """``runner``, each call let through by :meth:`begin` (else :class:`NotCalled`) and recorded."""

        def guarded(key: Hashable, items: list[object], progress: Callable[[float], None]) -> Sequence[object]:
            kind = self.begin()
            if kind is None:
                with self._lock:
                    raise NotCalled(f"{self._why()}; this call was not made")
            try:
                results = runner(key, items, progress)
            except BaseException as exc:
                self.end(exc, probe=kind == "probe")
                raise
            self.end(None, probe=kind == "probe")
            return results

        return guarded

    # ------------------------------------------------------------------------------------------ settled items
    def settle(self, key: Hashable, items: Sequence[object]) -> None:
        """Remember ``items`` (of a call of ``key``) as failed alone on a failing backend."""
        now = self._clock()
        digests = [d for d in (_digest(key, item) for item in items) if d is not None]
        with self._lock:
            for digest in digests:
                self._settled[digest] = now
                self._settled.move_to_end(digest)
            while len(self._settled) > SETTLED_MAX:
                self._settled.popitem(last=False)

    def settled(self, key: Hashable) -> Callable[[object], bool]:
        """For a call of ``key``: whether an item was settled within :data:`SETTLED_S` (not to be bisected again)."""

        def check(item: object) -> bool:
            if not self._settled:  # the common case: nothing remembered, nothing hashed
                return False
            digest = _digest(key, item)
            with self._lock:
                when = self._settled.get(digest) if digest is not None else None
                return when is not None and self._clock() - when < SETTLED_S

        return check


def _digest(key: Hashable, item: object) -> str | None:
    """The sha256 of ``(key, item)`` in canonical form, or None for an item that has none (never settled)."""

    try:
        body = json.dumps([canonical(key), canonical(item)], sort_keys=True, separators=(",", ":"), allow_nan=True)
    except (ConfigError, TypeError, ValueError):
        return None
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
