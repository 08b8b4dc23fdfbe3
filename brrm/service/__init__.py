"""The service layer every surface shares: the request scheduler (coalescing, bounded cost-based queue, deadlines
that free their slot, drain, stall detection), bisection fault isolation, and :class:`RemoteJudge`, the one
HTTP client of a running ``brrm serve``.

* :mod:`brrm.service.scheduler` — :class:`~brrm.service.scheduler.Scheduler` and its errors (pure asyncio);
* :mod:`brrm.service.isolation` — bisection of a failed call down to the item that causes it;
* :mod:`brrm.service.remote` — :class:`RemoteJudge`, a :class:`~brrm.types.RewardJudge` over ``brrm serve``.

Importing this package is cheap (no torch, no FastAPI; httpx is imported when a RemoteJudge is built).
"""

from __future__ import annotations

from brrm.service.remote import RemoteJudge
from brrm.service.scheduler import (
    Aborted,
    BatchFailed,
    DeadlineExceeded,
    QueueFull,
    Scheduler,
    SchedulerError,
    Unavailable,
)

__all__ = ["Aborted", "BatchFailed", "DeadlineExceeded", "QueueFull", "RemoteJudge", "Scheduler", "SchedulerError",
           "Unavailable"]
