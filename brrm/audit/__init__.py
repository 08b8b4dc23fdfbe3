"""Resumable offline audits of response datasets (``brrm audit``).

* :mod:`~brrm.audit.plan` — input rows → items (normalized records, content hashes, slices, invalid rows);
* :mod:`~brrm.audit.keys` — item, configuration and request hashes;
* :mod:`~brrm.audit.store` — the SQLite store (WAL, idempotent upserts, single writer);
* :mod:`~brrm.audit.judging` — judging a batch with any :class:`~brrm.RewardJudge` (local and Ray alike);
* :mod:`~brrm.audit.runner` — a run: pending items, batches, progress, Ctrl-C, outputs;
* :mod:`~brrm.audit.ray_runner` — the same on a Ray Data actor pool (the ``ray`` extra);
* :mod:`~brrm.audit.summary`, :mod:`~brrm.audit.plots`, :mod:`~brrm.audit.report`, :mod:`~brrm.audit.exports`
  — the JSON summary, matplotlib plots (the ``audit`` extra), the HTML report, JSONL and Parquet exports;
* :mod:`~brrm.audit.status` — ``brrm audit --status``.

Importing this package is cheap (no torch, matplotlib or ray).
"""

from brrm.audit.plan import AuditItem, plan_items
from brrm.audit.runner import AuditOptions, AuditOutcome, run_audit
from brrm.audit.store import AuditStore
from brrm.types import JudgeSpec

__all__ = ["AuditItem", "AuditOptions", "AuditOutcome", "AuditStore", "JudgeSpec", "plan_items", "run_audit"]
