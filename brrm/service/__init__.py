"""The service layer every batching surface shares: the request scheduler (coalescing, bounded cost-based
queue, deadlines that free their slot, drain, stall detection) and bisection fault isolation.

* :mod:`brrm.service.scheduler` — :class:`~brrm.service.scheduler.Scheduler` and its errors (pure asyncio);
* :mod:`brrm.service.isolation` — bisection of a failed call down to the item that causes it.

Importing this package is cheap (no torch, no FastAPI).
"""

from __future__ import annotations

from brrm.service.scheduler import (
    Aborted,
    BatchFailed,
    DeadlineExceeded,
    QueueFull,
    Scheduler,
    SchedulerError,
    Unavailable,
)

__all__ = ["Aborted", "BatchFailed", "DeadlineExceeded", "QueueFull", "Scheduler", "SchedulerError", "Unavailable"]
