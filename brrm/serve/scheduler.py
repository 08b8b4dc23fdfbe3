"""Moved to :mod:`brrm.service.scheduler` (the service layer every batching surface shares); re-exported here."""

from __future__ import annotations

from brrm.service.scheduler import (
    Aborted,
    BatchFailed,
    DeadlineExceeded,
    Failed,
    QueueFull,
    Runner,
    Scheduler,
    SchedulerError,
    Unavailable,
)

__all__ = ["Aborted", "BatchFailed", "DeadlineExceeded", "Failed", "QueueFull", "Runner", "Scheduler",
           "SchedulerError", "Unavailable"]
