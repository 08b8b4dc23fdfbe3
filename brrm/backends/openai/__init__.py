"""OpenAI-compatible HTTP servers behind :class:`~brrm.backends.base.Backend`
(:mod:`~brrm.backends.openai.backend`, over the transport of :mod:`~brrm.backends.openai.transport`), a
black-box backend of :mod:`brrm.backends.blackbox`. Importing this package opens no connection."""

from brrm.backends.openai.backend import OpenAIBackend

__all__ = ["OpenAIBackend"]
