"""Model backends. Each is imported lazily by :func:`load_backend` (torch, vllm, httpx stay unimported)."""

from __future__ import annotations

from typing import Any

from brrm.errors import BackendUnavailable, ConfigError

BACKENDS = ("transformers", "vllm", "openai")


def load_backend(kind: str, model: str, **options: Any) -> Any:
    """Build a backend for ``model`` (hub id or local directory).

    Args:
        kind: ``transformers``, ``vllm`` or ``openai``.
        model: model id or path (for ``openai``: the served model name).
        **options: backend options (e.g. batch_size, dtype, device for transformers; base_url for openai).

    Raises:
        ConfigError: on an unknown kind.
        BackendUnavailable: when the backend's package is not installed.
    """
    if kind == "transformers":
        from brrm.backends.transformers import TransformersBackend

        return TransformersBackend.from_pretrained(model, **options)
    if kind == "vllm":
        try:
            from brrm.backends.vllm import VLLMBackend
        except ImportError as exc:
            raise BackendUnavailable(f"the vllm backend is not available: {exc}",
                                     hint="pip install 'brrm[vllm]' on a machine with a GPU") from exc
        return VLLMBackend.from_pretrained(model, **options)
    if kind == "openai":
        try:
            from brrm.backends.openai import OpenAIBackend
        except ImportError as exc:
            raise BackendUnavailable(f"the openai backend is not available: {exc}",
                                     hint="this brrm build has no OpenAI-compatible backend yet") from exc
        return OpenAIBackend.from_options(model, **options)
    raise ConfigError(f"backend {kind!r} is not valid; expected one of {', '.join(BACKENDS)}")
