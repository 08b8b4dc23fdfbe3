"""Narrowing decoded JSON where it is read: each helper returns the value as the type the reader expects, or
raises ``TypeError`` naming what it got (callers that read a file turn that into a one-line ``ConfigError``).

A reader of a :data:`~brrm.types.jsonvalue.JSONValue` (or of an ``object`` from ``json.loads``) calls these
instead of indexing blindly, so a malformed field is found where it is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

from brrm.types.jsonvalue import JSONValue


@overload
def as_object(value: JSONValue, what: str = "value") -> dict[str, JSONValue]: ...
@overload
def as_object(value: object, what: str = "value") -> Mapping[str, object]: ...
def as_object(value: object, what: str = "value") -> Mapping[str, object]:
    """``value``, a JSON object (a mapping).

    Raises:
        TypeError: for another value, naming ``what``.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be an object, got {type(value).__name__}")
    return value


@overload
def as_list(value: JSONValue, what: str = "value") -> list[JSONValue]: ...
@overload
def as_list(value: object, what: str = "value") -> list[object]: ...
def as_list(value: object, what: str = "value") -> list[JSONValue] | list[object]:
    """``value``, a JSON array (a list).

    Raises:
        TypeError: for another value, naming ``what``.
    """
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list, got {type(value).__name__}")
    return value


def as_text(value: object, what: str = "value") -> str:
    """``value``, a JSON string.

    Raises:
        TypeError: for another value, naming ``what``.
    """
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return value


def as_number(value: object, what: str = "value") -> int | float | str:
    """``value`` for ``int()`` / ``float()``: a JSON number (``true``/``false`` count, as ``int()`` takes them) or a
    numeric string (as older files stored some numbers).

    Raises:
        TypeError: for another value (null, a list, an object), naming ``what``.
    """
    if not isinstance(value, int | float | str):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    return value


__all__ = ["as_list", "as_number", "as_object", "as_text"]
