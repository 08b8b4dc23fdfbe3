"""The backends :func:`brrm.load` builds by name (:data:`BACKEND_REGISTRY`): the built-in ones and those other
packages register through the ``brrm.backends`` entry points, each a :class:`~brrm.backends.entry.BackendEntry`.
Adding a backend is one module that exports its entry, and one line in :data:`brrm.registry.BACKEND_REGISTRY` (or
an entry point)."""

from __future__ import annotations

from brrm.backends.entry import BackendEntry
from brrm.registry import BACKEND_REGISTRY as _REGISTRY
from brrm.registry import Registry

BACKEND_REGISTRY: Registry[BackendEntry] = _REGISTRY
"""Backend name -> its :class:`BackendEntry` (:data:`brrm.types.BACKENDS` are its names)."""

__all__ = ["BACKEND_REGISTRY", "BackendEntry"]
