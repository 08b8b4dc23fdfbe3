"""``brrm serve``: the pairwise judging and reward HTTP API (FastAPI + uvicorn) over any judge ``brrm.load`` returns.

* :func:`create_app` (:mod:`brrm.serve.app`) — the app over a :class:`~brrm.RewardJudge`;
* :class:`ServerLimits` (:mod:`brrm.serve.limits`) — body, item, field, queue, batch and deadline limits;
* :mod:`brrm.service.scheduler` — coalescing, cost-bounded queue, deadlines, bisection fault isolation (pure
  asyncio; re-exported as ``brrm.serve.scheduler``);
* :mod:`brrm.serve.openrlhf`, :mod:`brrm.serve.nemo_gym` — the OpenRLHF and NeMo Gym contracts;
* :mod:`brrm.serve.reward_func` — OpenRLHF's ``reward_func`` (``--remote_rm_url path.py``), local or remote.

Needs the ``serve`` extra (``pip install -e '.[serve]'`` in the brrm clone); names are imported lazily so that
``brrm.serve.openrlhf`` and ``brrm.serve.reward_func`` work without FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from brrm.serve.app import create_app
    from brrm.serve.limits import ServerLimits

__all__ = ["ServerLimits", "create_app"]


_LAZY = {"create_app": "brrm.serve.app", "ServerLimits": "brrm.serve.limits"}
"""Each public name and the module it is imported from on first use."""


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'brrm.serve' has no attribute {name!r}")
