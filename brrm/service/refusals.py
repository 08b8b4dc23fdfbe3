"""What the scheduler answers when it cannot serve a request: one exception per HTTP status it maps to (429 queue
full, 504 deadline passed, 503 unavailable or failed). :mod:`brrm.service.scheduler` raises them and re-exports
them; the server maps each ``status`` to its reply, with a ``Retry-After`` header when ``retry_after`` is set.

Two 503s are told apart by their ``retry_after``: a :class:`BatchFailed` with one means *the backend is failing*
(every item of a call failed alone, or the circuit breaker is open: :class:`BreakerOpen`), and the server answers
it as ``backend_failing``, which a client retries only after ``Retry-After``; an overloaded queue is a 429."""

from __future__ import annotations

__all__ = ["BatchFailed", "BreakerOpen", "DeadlineExceeded", "QueueFull", "SchedulerError", "Unavailable"]


class SchedulerError(Exception):
    """A request the scheduler could not serve; ``status`` is the HTTP status it maps to, ``retry_after`` the
    whole seconds (>= 1) a client should wait before it retries (None: no advice)."""

    status = 503

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


class QueueFull(SchedulerError):
    """The queue has no room for the request's cost (HTTP 429); ``retry_after`` is in whole seconds, >= 1."""

    status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, retry_after)


class DeadlineExceeded(SchedulerError):
    """The request's deadline passed before its results were ready (HTTP 504)."""

    status = 504


class Unavailable(SchedulerError):
    """The scheduler takes no work: shutting down, its backend is stuck, or a stalled call is still inside a
    backend that takes one call at a time (HTTP 503; ``retry_after`` set for the last)."""


class BatchFailed(SchedulerError):
    """The judge call failed for every item (``retry_after`` set: the backend is failing), or returned the wrong
    number of results (HTTP 503 with the reason)."""

    @property
    def failing(self) -> bool:
        """Whether this says the backend is failing (answered ``backend_failing`` with ``Retry-After``)."""
        return self.retry_after is not None


class BreakerOpen(BatchFailed):
    """The backend's circuit breaker is open: the request is refused before anything runs (HTTP 503
    ``backend_failing``, ``Retry-After`` what is left of the cooldown)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, retry_after)
