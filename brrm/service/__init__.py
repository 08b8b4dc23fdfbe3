"""The service layer every surface shares: the request scheduler (coalescing, bounded cost-based queue, deadlines
that free their slot, drain, stall detection), bisection fault isolation, and :class:`RemoteJudge`, the one
HTTP client of a running ``brrm serve``.

* :mod:`brrm.service.items` — the typed jobs (:class:`~brrm.service.items.PairItem`,
  :class:`~brrm.service.items.ScoreItem`, :class:`~brrm.service.items.GroupItem`) and the calls that run them;
* :mod:`brrm.service.run` — :func:`~brrm.service.run.run`, the one way every surface hands jobs to a judge (and
  the scheduler's runner over it);
* :mod:`brrm.service.order` — the one canonical order of a group's responses (by content hash), which the group
  job applies so no reward depends on the order a group arrives in;
* :mod:`brrm.service.scheduler` — :class:`~brrm.service.scheduler.Scheduler` and its errors (pure asyncio), with
  the metrics it records declared in :mod:`brrm.service.metrics`;
* :mod:`brrm.service.isolation` — bisection of a failed call down to the item that causes it;
* :mod:`brrm.service.singleflight` — identical jobs in flight run once, every waiter getting the result;
* :mod:`brrm.service.remote` — :class:`RemoteJudge`, a :class:`~brrm.types.RewardJudge` over ``brrm serve``;
  :mod:`brrm.service.connect` builds it for ``brrm.load(url, backend="serve")`` and ``JudgeSpec``.

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
