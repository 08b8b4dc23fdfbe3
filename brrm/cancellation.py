"""Per-request cancellation: a token a request's caller sets, read by whatever runs that request's rows.

A :class:`CancelToken` belongs to one request (one scheduler job). The service sets it when the request leaves
(its client disconnected, its deadline passed, its call was abandoned as stalled); a backend that shares one
running batch across calls (the transformers backend's continuous batching) checks it between decoding steps and
retires that request's rows alone, freeing their slots, while every other row decodes on.

The token travels with the thread that runs the request's judge call: the scheduler's worker enters
:func:`scope` and a backend reads :func:`current` when the call arrives. This module sits in the values layer so
that both the service (above) and the backends (below) can use it without importing each other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["CancelToken", "Cancelled", "current", "scope"]


class Cancelled(Exception):
    """The request this call ran for was cancelled (raised in the call's own thread); ``reason`` says why."""

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    """One request's cancellation flag (thread-safe; set once, never cleared).

    Attributes:
        reason: why it was cancelled (``disconnect``, ``deadline``, ``stalled``, …); ``""`` while it is not.
    """

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str) -> None:
        """Set the token (the first reason is kept)."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` (with the reason) when the token is set."""
        if self._event.is_set():
            raise Cancelled(self.reason)


_local = threading.local()


def current() -> CancelToken | None:
    """The token of the request this thread is running a call for, or None (no request scope)."""
    return getattr(_local, "token", None)


@contextlib.contextmanager
def scope(token: CancelToken | None) -> Iterator[CancelToken | None]:
    """Run the block as ``token``'s request (nested scopes restore the outer token on exit)."""
    outer = current()
    _local.token = token
    try:
        yield token
    finally:
        _local.token = outer
