"""What the scheduler answers when it cannot serve a request: one exception per HTTP status it maps to (429 queue
full, 504 deadline passed, 503 unavailable or failed). :mod:`brrm.service.scheduler` raises them and re-exports
them; the server maps each ``status`` to its reply."""

from __future__ import annotations

__all__ = ["BatchFailed", "DeadlineExceeded", "QueueFull", "SchedulerError", "Unavailable"]


class SchedulerError(Exception):
    """A request the scheduler could not serve; ``status`` is the HTTP status it maps to."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueueFull(SchedulerError):
    """The queue has no room for the request's cost (HTTP 429); ``retry_after`` is in whole seconds, >= 1."""

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
    """The judge call failed for every item, or returned the wrong number of results (HTTP 503 with the reason)."""
