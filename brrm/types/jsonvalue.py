"""JSON values as types: what ``json.loads`` returns and what ``json.dumps`` (or orjson) takes.

Use these instead of ``Any`` for data that crosses a wire or a file: records read from JSONL, result dicts from
``to_dict()``, HTTP bodies. A reader narrows a :data:`JSONValue` with ``isinstance`` before using it, so a
malformed field is found where it is read.

Source: RFC 8259 (the JSON data model: object, array, string, number, true/false, null).
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
"""A JSON string, number, ``true``/``false`` or ``null``."""

JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
"""Any JSON value (recursive)."""

JSONDict: TypeAlias = dict[str, JSONValue]
"""A JSON object."""

__all__ = ["JSONDict", "JSONScalar", "JSONValue"]
