"""JSON values as types: what ``json.loads`` returns and what ``json.dumps`` (or orjson) takes.

Use these instead of ``Any`` for data that crosses a wire or a file: records read from JSONL, result dicts from
``to_dict()``, HTTP bodies. A reader narrows a :data:`JSONValue` with ``isinstance`` before using it, so a
malformed field is found where it is read.

Source: RFC 8259 (the JSON data model: object, array, string, number, true/false, null).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

if TYPE_CHECKING:
    from pydantic import TypeAdapter

JSONScalar: TypeAlias = str | int | float | bool | None
"""A JSON string, number, ``true``/``false`` or ``null``."""

JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
"""Any JSON value (recursive)."""

JSONDict: TypeAlias = dict[str, JSONValue]
"""A JSON object."""

_ADAPTERS: dict[type, TypeAdapter[Any]] = {}
"""pydantic's ``TypeAdapter`` of each dataclass :func:`record` has dumped (built once, on first use)."""


def record(value: object) -> JSONDict:
    """A dataclass ``value`` as the JSON object of its fields, in field order: pydantic's ``TypeAdapter`` dump
    (nested dataclasses as objects, values as they are: an int stays an int, a list in a tuple field a list), then
    :func:`json_ready`.

    Raises:
        pydantic_core.PydanticSerializationError: when ``value`` is not a dataclass its annotations describe.
    """
    cls = type(value)
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return cast(JSONDict, json_ready(_ADAPTERS[cls].dump_python(value, warnings=False)))


def json_field(value: object) -> Any:
    """A result's field as its ``to_dict()`` writes it: an enum as its value, a NaN float as None (the result's
    status says why), then as :func:`_json_item` (a float inside a tuple is kept as it is: raw logits stay raw).

    Example: ``json_field(Verdict.A) == "A"``, ``json_field(math.nan) is None``, ``json_field(((0, 1),)) == [[0, 1]]``.
    """
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    return _json_item(value)


def _json_item(value: object) -> Any:
    """A value with ``to_dict()`` as that dict, a mapping as a dict, a tuple (of tuples) as a list, else ``value``."""
    to_dict = getattr(value, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    if isinstance(value, Mapping):
        return dict(value)
    return [_json_item(v) for v in value] if isinstance(value, tuple) else value


def json_ready(value: object) -> object:
    """``value`` with every NaN float (nested in dicts and lists too) replaced by None (strict JSON has no NaN) and
    tuples as lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


__all__ = ["JSONDict", "JSONScalar", "JSONValue", "json_field", "json_ready", "record"]
