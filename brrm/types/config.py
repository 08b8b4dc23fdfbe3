"""Validated option values: the checks every config dataclass uses, and the sampling settings.

Like vLLM's parameter classes, a config object refuses a value that would silently mean something else:
a bool where an int is expected (``True`` is an ``int`` in Python), a NaN or infinite float, a string where a
bool is expected (``swap="no"`` is truthy), or a name outside a fixed set. Every error names the field,
the value and the valid options.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TypeVar

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict
from brrm.types.options import PerRequest, build, keyword, option, option_fields, split_keywords, updated

E = TypeVar("E", bound=enum.Enum)
C = TypeVar("C")

def check_bool(name: str, value: object) -> bool:
    """``value`` when it is a real bool.

    Raises:
        ConfigError: for anything else (``"no"``, ``0``, ``None``), naming ``name``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}", field=name)
    return value


def check_bool_or_auto(name: str, value: object) -> bool | str:
    """``value`` when it is a real bool or the string ``"auto"``.

    Raises:
        ConfigError: for anything else, naming ``name``.
    """
    if value == "auto" and isinstance(value, str):
        return "auto"
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true, false or 'auto', got {value!r}", field=name)
    return value


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` when it is an int (not a bool) in ``[low, high]``.

    Raises:
        ConfigError: naming ``name``, the value and the valid range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer{_range(low, high)}, got {value!r}", field=name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"{name} must be an integer{_range(low, high)}, got {value!r}", field=name)
    return value


def check_float(name: str, value: object, *, low: float | None = None, high: float | None = None,
                low_open: bool = False) -> float:
    """``value`` as a finite float (ints accepted, bools refused) in ``[low, high]`` (``(low, high]`` when
    ``low_open``).

    Raises:
        ConfigError: naming ``name``, the value and the valid range.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number{_range(low, high, low_open)}, got {value!r}", field=name)
    bad_low = low is not None and (value <= low if low_open else value < low)
    if bad_low or (high is not None and value > high):
        raise ConfigError(f"{name} must be a finite number{_range(low, high, low_open)}, got {value!r}", field=name)
    return float(value)


def check_principle(name: str, value: object) -> str:
    """``value`` when it is a principle a principle model can judge against: a string that is not empty or blank
    (Python's ``str.strip`` leaves something), and valid text (:func:`check_text`).

    Raises:
        ConfigError: naming ``name`` and the value.
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}", field=name)
    return check_text(name, value)


def check_text(name: str, value: str) -> str:
    """``value`` when it is valid Unicode text, i.e. UTF-8 can encode it (every tokenizer brrm loads needs that);
    O(len). NUL and other control characters are valid text and are tokenized as text.

    Raises:
        ConfigError: naming ``name`` and the first lone surrogate (``U+D800``-``U+DFFF`` without its pair, e.g.
            from a JSON ``\\ud800`` escape or a ``surrogateescape``-decoded file).
    """
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = value[exc.start]
        raise ConfigError(f"{name} is not valid Unicode text: character {exc.start} is the lone surrogate "
                          f"U+{ord(char):04X}, which no tokenizer can encode; pass the character's full surrogate "
                          "pair, or remove it", field=name) from None
    return value


def check_choice(name: str, value: object, options: Iterable[str]) -> str:
    """``value`` when it is one of ``options`` (a str enum member counts as its value).

    Raises:
        ConfigError: naming ``name`` and the valid options.
    """
    valid = tuple(options)
    if not isinstance(value, str) or value not in valid:
        raise ConfigError(f"{name} {value!r} is not valid; expected one of {', '.join(valid)}", field=name)
    return str(value)


def check_enum(name: str, value: object, enum_type: type[E]) -> E:
    """``value`` as a member of ``enum_type`` (its value string is accepted too).

    Raises:
        ConfigError: naming ``name`` and the valid values.
    """
    if isinstance(value, enum_type):
        return value
    for member in enum_type:
        if isinstance(value, str) and value == member.value:
            return member
    valid = ", ".join(str(m.value) for m in enum_type)
    raise ConfigError(f"{name} {value!r} is not valid; expected one of {valid}", field=name)


def check_options(config: object) -> None:
    """Check each set :func:`~brrm.types.options.option` field of ``config`` whose field says what it takes: a word
    among its ``choices``, true or false where it is a bool (``bool`` or ``bool | None``, None: unset).

    Raises:
        ConfigError: naming the first invalid field and its valid values.
    """
    for f in option_fields(type(config)):
        value = getattr(config, f.name)
        if value is None and f.default is None:  # unset: the decoding mode's (or backend's) default applies
            continue
        if f.metadata["choices"]:
            check_choice(f.name, value, f.metadata["choices"])
        elif f.type in ("bool", "bool | None"):
            check_bool(f.name, value)


def _range(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" <= {high}"
    return ""


SEED_MAX = 2**53 - 1
"""The largest per-request seed: the I-JSON safe integer (RFC 7493 §2.2), so every JSON reader agrees on it.
Above 2^53 a client that reads numbers as 64-bit floats and one that reads them as integers disagree about which
values lie under a bound (schemathesis found a value on each side of a bound near 2^63 in turn)."""

RECORD_KEYS = {"max_new_tokens": "max_new_tokens_per_turn"}
""":class:`SamplingConfig` fields whose record key (:meth:`SamplingConfig.to_dict`: results' provenance, judge
records, audit stores' keys) is another word: the per-turn budget kept its older, longer record key so that stored
records keep their meaning and their hashes."""


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings for a generative judge (each field's help gives its unit, range, default and source).

    Defaults are the published BR-RM settings (BR-RM paper / model card, and
    ``../shared/reference/README.md``): temperature 1.0, top_p 1.0, at most 8192 new tokens per turn and
    16384 tokens in total. Each item samples from its own streams, derived from ``seed`` and a stable key of
    the item (its id and content hash, the presentation order, the turn, the attempt; see
    :func:`brrm.seeds.item_seed`), so a result never depends on batch size, order or neighbours.

    Raises:
        ConfigError: naming the field and its valid range.
    """

    temperature: float = option(1.0, help="softmax temperature, finite, >= 0 (0 = greedy); default 1.0 "
                                          "(published; principle models: 0)")
    top_p: float = option(1.0, help="nucleus mass in (0, 1]; default 1.0 (published)")
    top_k: int = option(0, help="sample among the k most likely tokens, int >= 0, applied after temperature and "
                                "before top_p as transformers does; default 0 = off (principle models: the "
                                "checkpoint's)")
    max_new_tokens: int = option(8192, help="new-token budget of each turn, int >= 1; default 8192 (published)",
                                 per_request=PerRequest(bounded=True, low=1))
    max_total_tokens: int = option(16384, help="limit on the whole sequence (prompt + every turn) in tokens, "
                                               "int >= 2; default 16384", per_request=PerRequest(bounded=True, low=2))
    seed: int = option(0, help=f"base seed, int (default 0; a server's request: 0 to {SEED_MAX}); each item's "
                               "streams derive from it and the item's own key",
                       per_request=PerRequest(low=0, high=SEED_MAX))

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperature", check_float("temperature", self.temperature, low=0))
        object.__setattr__(self, "top_p", check_float("top_p", self.top_p, low=0, high=1, low_open=True))
        check_int("top_k", self.top_k, low=0)
        check_int("max_new_tokens", self.max_new_tokens, low=1)
        check_int("max_total_tokens", self.max_total_tokens, low=2)
        check_int("seed", self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def override(self, options: Mapping[str, object]) -> SamplingConfig:
        """These settings with the ones ``options`` names (:func:`brrm.load`'s keywords: ``temperature``,
        ``top_p``, ``top_k``, ``max_new_tokens`` (per turn), ``max_total_tokens``, ``seed``); other keys are ignored.

        Raises:
            ConfigError: naming the field and its valid range.
        """
        return updated(self, split_keywords(SamplingConfig, options))

    @classmethod
    def from_record(cls, record: object) -> SamplingConfig:
        """The settings a :meth:`to_dict` record holds (a server's ``options.sampling``).

        Raises:
            ConfigError: when ``record`` is no object, or a value is out of range (naming the field).
        """
        if not isinstance(record, Mapping):
            raise ConfigError(f"a sampling record must be an object, got {type(record).__name__}")
        names = {RECORD_KEYS.get(f.name, f.name): f.name for f in option_fields(cls)}
        return build(cls, {names[k]: v for k, v in record.items() if k in names})

    def to_dict(self) -> JSONDict:
        """The record of these settings (results' provenance, ``options.sampling`` of a judge's record)."""
        out: JSONDict = {RECORD_KEYS.get(f.name, f.name): getattr(self, f.name) for f in option_fields(SamplingConfig)
                         if f.name != "top_k"}
        return {**out, **({"top_k": self.top_k} if self.top_k else {})}  # off by default: older records unchanged


SAMPLING_KEYS = tuple(keyword(f) for f in option_fields(SamplingConfig))
"""The :func:`brrm.load` keywords that set a :class:`SamplingConfig` (``max_new_tokens`` is per turn)."""


def override_config(config: C, options: Mapping[str, object]) -> C:
    """``config`` (a judge's frozen config dataclass with a ``sampling`` field) with ``options`` applied: a
    ``sampling`` value replaces its :class:`SamplingConfig`, :data:`SAMPLING_KEYS` then override single settings,
    the other keys go to fields of the same name; validated as new.

    Raises:
        ConfigError: on a key that is neither, naming the valid ones, or an invalid value.
    """
    names = {f.name for f in fields(config)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - names - set(SAMPLING_KEYS))
    if unknown:
        raise ConfigError("option '{field}' cannot be varied on this judge; valid: {valid}", field=unknown[0],
                          valid=sorted(names | set(SAMPLING_KEYS)))
    base = options.get("sampling", config.sampling)  # type: ignore[attr-defined]
    if not isinstance(base, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(base).__name__}")
    sampling = base.override(options)
    names.discard("sampling")
    return replace(config, sampling=sampling, **{k: v for k, v in options.items() if k in names})  # type: ignore[type-var]
