"""One spelling of a job's items as plain JSON data, for content digests (single-flight's job digest, the circuit
breaker's settled items): its own module, so that both read it without importing each other."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from brrm.errors import ConfigError


def canonical(value: object) -> object:
    """``value`` as plain JSON data with a single spelling: dataclasses as ``{"__type__": name, field: value}``
    (every field, in declaration order), enums as ``{"__enum__": name, "value": value}``, mappings with sorted
    string keys, tuples and lists as lists, and str / int / float / bool / None as themselves.

    Raises:
        ConfigError: on a value of another type (it has no canonical form; a programming error).
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, enum.Enum):
        return {"__enum__": type(value).__name__, "value": canonical(value.value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {"__type__": type(value).__name__}
        for f in dataclasses.fields(value):
            out[f.name] = canonical(getattr(value, f.name))
        return out
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    raise ConfigError(f"single-flight: a job holds a {type(value).__name__}, which has no canonical form")
