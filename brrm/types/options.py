"""Options written once: a dataclass field carries an option's help, its keyword and its command-line form.

Each judge's settings are a frozen, validated dataclass (:class:`~brrm.judges.brrm.BRRMConfig`,
:class:`~brrm.reward_models.bradley_terry.BTConfig`, :class:`~brrm.judges.principle.PrincipleConfig`, their
:class:`~brrm.types.config.SamplingConfig` and the composition's :mod:`brrm.compose.options`). A field made with
:func:`option` is an option: :func:`brrm.load` takes it as a flat keyword (:func:`keyword`), and the CLI derives
its flag, help and choices from it (``brrm/cli/flags.py``), so adding an option is one field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, TypeVar, overload

from brrm.types.jsonvalue import JSONScalar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")


@dataclass(frozen=True)
class Flag:
    """The command-line form of an option that is not simply ``--keyword VALUE`` of the field's type.

    Attributes:
        name: the flag (``--history-reasoning``); empty: ``--`` and the keyword with dashes.
        words: the words the flag takes and the value each means (``{"strip": True, "keep": False}``).
        store: a flag without a value that sets this value (``--keep-thinking`` sets ``False``); None: none.
        repeat: repeatable; one use gives the value itself, several a list.
        metavar: the value's name in the help.
        help: the flag's help when it says more than the option's (a ``store`` flag says what it sets).
    """

    name: str = ""
    words: Mapping[str, JSONScalar] | None = None
    store: bool | None = None
    repeat: bool = False
    metavar: str | None = None
    help: str = ""


@dataclass(frozen=True)
class PerRequest:
    """Marks an option that one request to ``brrm serve`` may set for itself (the ``options`` object of
    ``/v1/judge``, ``/v1/rank`` and ``/compare``; :class:`~brrm.service.items.CallOptions`): the loaded judge runs
    a variant with it (``with_options``), so nothing reloads. The HTTP schema is generated from these marks.

    Attributes:
        bounded: a budget: at most the served judge's own value (a request may lower it, never raise it).
        low, high: the integers a request may send (its JSON schema's minimum and maximum); None: open.
    """

    bounded: bool = False
    low: int | None = None
    high: int | None = None


@overload
def option(default: T, *, help: str, choices: tuple[str, ...] = (), keyword: str | None = None,
           flag: Flag | None = None, cli: bool = True, per_request: PerRequest | None = None) -> T: ...
@overload
def option(*, factory: type[T], help: str, choices: tuple[str, ...] = (), keyword: str | None = None,
           flag: Flag | None = None, cli: bool = True, per_request: PerRequest | None = None) -> T: ...
def option(default: object = MISSING, *, factory: object = MISSING, help: str, choices: tuple[str, ...] = (),
           keyword: str | None = None, flag: Flag | None = None, cli: bool = True,
           per_request: PerRequest | None = None) -> object:
    """A dataclass field that is an option.

    Args:
        default: the value when unset (or ``factory``, a callable making it).
        help: what it means: unit, range, default and source (the CLI's help text too).
        choices: the words the CLI flag offers (argparse refuses others before anything runs); validation of
            every value is the dataclass's ``__post_init__``.
        keyword: its :func:`brrm.load` keyword and flag name when it differs from the field's name.
        flag: its command-line form when not ``--keyword VALUE``.
        cli: False: a Python-only option (no flag).
        per_request: set when a server's request may set it for itself (:class:`PerRequest`).
    """
    meta = {"help": help, "choices": choices, "keyword": keyword, "flag": flag, "cli": cli, "per_request": per_request}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)  # type: ignore[call-overload]
    return field(default=default, metadata=meta)


def is_option(f: Field[object]) -> bool:
    """Whether a dataclass field was made with :func:`option`."""
    return "help" in f.metadata


def keyword(f: Field[object]) -> str:
    """The :func:`brrm.load` keyword of an option field (its name unless it declares another)."""
    return str(f.metadata.get("keyword") or f.name)


def per_request(f: Field[object]) -> PerRequest | None:
    """The :class:`PerRequest` mark of an option field (None: the option is the server's alone)."""
    mark = f.metadata.get("per_request")
    return mark if isinstance(mark, PerRequest) else None


def option_fields(cls: type) -> Iterator[Field[object]]:
    """The option fields of an options dataclass, in definition order (nested option classes left out)."""
    for f in fields(cls):
        if is_option(f):
            yield f


def changed_keywords(config: object) -> dict[str, object]:
    """The options of ``config`` (an options dataclass) whose values differ from its class's defaults, by
    keyword; a nested options dataclass (``sampling``) contributes its own changed options.

    Raises:
        TypeError: when ``config`` is not a dataclass instance.
    """
    if not is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected an options dataclass, got {type(config).__name__}")
    base = type(config)()
    out: dict[str, object] = {}
    for f in fields(config):
        value, default = getattr(config, f.name), getattr(base, f.name)
        if is_dataclass(value) and not is_option(f):
            out.update(changed_against(value, default))
        elif is_option(f) and value != default:
            out[keyword(f)] = value
    return out


def changed_against(value: object, base: object) -> dict[str, object]:
    """The options of ``value`` that differ from those of ``base`` (two objects of one options class)."""
    return {keyword(f): getattr(value, f.name) for f in option_fields(type(value))
            if getattr(value, f.name) != getattr(base, f.name)}


def split_keywords(cls: type, values: Mapping[str, object]) -> dict[str, object]:
    """The entries of ``values`` (flat keywords) that are options of ``cls``, by field name."""
    return {f.name: values[keyword(f)] for f in option_fields(cls) if keyword(f) in values}



def build(cls: Callable[..., T], values: Mapping[str, object]) -> T:
    """``cls(**values)`` for an options dataclass, whose ``__post_init__`` checks every value's type and range
    (the one place untyped values — flat keywords, CLI flags, JSON — become typed options).

    Raises:
        ConfigError: from the dataclass, naming the field.
        TypeError: on a keyword that is no field of ``cls`` (a programming error: split by field first).
    """
    return cls(**values)


def updated(config: D, values: Mapping[str, object]) -> D:
    """``config`` (an options dataclass) with ``values`` (by field name) replaced, validated as new."""
    return replace(config, **values)
