"""The exception hierarchy.

Exceptions are for programming and configuration errors that must stop a call. Per-item failures
inside a batch (a parse failure, a truncated turn, a backend error on one request) are never raised:
they are values of :class:`brrm.types.Status` on the item's result, so one bad item loses nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class BrrmError(Exception):
    """Base class of every exception brrm raises on purpose."""


class ConfigError(BrrmError, ValueError):
    """A configuration or input value is invalid; the message names the field and the valid options.

    Args:
        message: what is wrong. When it refuses one field it opens with the field's name (``temperature must be
            …``), or says where the name goes with ``{field}``, where a setting of it goes with ``{setting}``
            (``recipe='x'`` for Python callers, ``--recipe x`` on the command line) and where a list of option
            names goes with ``{valid}``.
        field: the field or option refused or named (a :func:`brrm.load` keyword, a config field, a server limit).
        valid: option names the message lists where ``{valid}`` stands.
        value: the value ``{setting}`` sets ``field`` to.

    Attributes:
        field: as given: the CLI looks up the flag that sets it (:meth:`naming`), never parses the message.
        valid: as given.
        value: as given.
    """

    def __init__(self, message: str, *, field: str | None = None, valid: Sequence[str] = (),
                 value: str | None = None) -> None:
        self.field = field
        self.valid = tuple(valid)
        self.value = value
        self.template = message
        super().__init__(self.naming())

    def naming(self, flag: Callable[[str], str] | None = None) -> str:
        """The message with its field (and ``valid``) called ``flag(option)``: the CLI passes the flag of each. None
        (the exception's own text, ``str(error)``): their Python names, and a setting as a keyword (``name='x'``)."""
        if self.field is None:
            return self.template
        name = flag or str
        if "{field}" in self.template or "{valid}" in self.template or "{setting}" in self.template:
            setting = f"{self.field}={self.value!r}" if flag is None else f"{name(self.field)} {self.value}"
            listed = ", ".join(name(v) for v in self.valid)
            return (self.template.replace("{field}", name(self.field)).replace("{valid}", listed)
                    .replace("{setting}", setting))
        if self.template.startswith(f"{self.field} "):
            return name(self.field) + self.template[len(self.field):]
        return self.template

    def __reduce__(self) -> tuple[object, ...]:  # pickled with its field (Ray workers, process pools)
        return (_config_error, (self.template, self.field, self.valid, self.value))


def _config_error(message: str, field: str | None, valid: Sequence[str], value: str | None) -> ConfigError:
    return ConfigError(message, field=field, valid=valid, value=value)


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
