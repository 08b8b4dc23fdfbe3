"""A backend's one registry entry (:class:`BackendEntry`): its options class and the class that builds it from them,
named as ``"module:Class"`` so that nothing heavy (torch, vllm) is imported until that backend is asked for. The
built-in backends' entries sit beside their options classes (:mod:`brrm.backends.options`); a backend in another
package exports its own (:mod:`brrm.registry` says how it is found)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brrm.errors import BackendUnavailable
from brrm.registry import resolve

if TYPE_CHECKING:
    from brrm.backends.base import Backend


@dataclass(frozen=True)
class BackendEntry:
    """One named backend.

    Attributes:
        options: its options class, a frozen dataclass validated in ``__post_init__`` (fields = its
            :func:`brrm.load` keywords and CLI flags, each ``None`` by default with ``metadata["help"]``).
        factory: ``"module:Class"`` of the backend (or the class); the class has ``from_options(source, options, *,
            name, task)`` (``task``: ``generate`` or ``classify``, how the checkpoint loads).
        requires: a module that must be importable before anything loads (None: brrm's own dependencies).
        hint: what to install when ``requires`` is missing.
        concurrent: its calls may share one running batch (an engine or a server), so ``brrm serve
            --concurrency auto`` runs several calls at once.
        in_process: the model computes in this process (torch's CPU threads, :mod:`brrm.threads`, matter).
    """

    options: type[Any]
    factory: str | type[Any]
    requires: str | None = None
    hint: str = ""
    concurrent: bool = False
    in_process: bool = False

    def check_available(self) -> None:
        """Raise when the backend's package is missing (before a model path is even resolved).

        Raises:
            BackendUnavailable: naming the package and :attr:`hint`.
        """
        if self.requires is not None and importlib.util.find_spec(self.requires) is None:
            raise BackendUnavailable(f"this backend needs the {self.requires} package, which is not installed",
                                     hint=self.hint)

    def build(self, source: str, options: object, *, name: str, task: str) -> Backend:
        """The backend for the checkpoint at ``source`` (recorded under ``name``), built from ``options``.

        Raises:
            BackendUnavailable: when its package cannot be imported. ConfigError: as its ``from_options``.
        """
        cls_name = self.factory if isinstance(self.factory, str) else self.factory.__name__
        try:
            cls: Any = resolve(self.factory) if isinstance(self.factory, str) else self.factory
        except ImportError as exc:
            raise BackendUnavailable(f"the backend {cls_name} is not available: {exc}", hint=self.hint) from exc
        backend: Backend = cls.from_options(source, options, name=name, task=task)
        return backend
