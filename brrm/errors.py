"""The exception hierarchy.

Exceptions are for programming and configuration errors that must stop a call. Per-item failures
inside a batch (a parse failure, a truncated turn, a backend error on one request) are never raised:
they are values of :class:`brrm.types.Status` on the item's result, so one bad item loses nothing else.
"""

from __future__ import annotations


class BrrmError(Exception):
    """Base class of every exception brrm raises on purpose."""


class ConfigError(BrrmError, ValueError):
    """A configuration or input value is invalid; the message names the field and the valid options."""


class TemplateError(BrrmError):
    """A prompt template is missing, fails to render, or a chat template lacks something we need."""


class BackendUnavailable(BrrmError, ImportError):
    """An optional backend cannot be used here (package missing, no device).

    Attributes:
        hint: what to install or change, e.g. :func:`install_extra`'s ``pip install -e '.[vllm]'``.
    """

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message} ({hint})")
        self.hint = hint


def install_extra(extra: str) -> str:
    """The install line of an optional extra, as the README gives it: from the clone, since no ``brrm`` package is
    published (``pip install -e '.[audit]' in the brrm clone``).

    Args:
        extra: the extra's name in ``pyproject.toml`` (``audit``, ``serve``, ``ray``, ``inspect``, ...).
    """
    return f"pip install -e '.[{extra}]' in the brrm clone"
