"""The three record shapes — pairs, single responses, groups — read from any record file, row by row.

Every row gives a record or a :class:`~brrm.records.RecordError` naming its line, the field and the valid
options; one bad row never stops the others. Pair record::

    {"id": "q1", "conversation": [{"role": "user", "content": "..."}], "response_a": "...", "response_b": "...",
     "label": "A"}                                  # or "prompt": "..." instead of "conversation"

Single-response record: ``response`` (and an optional ``principle``); a pair record read as single
responses gives two records, ``<id>:A`` and ``<id>:B``. Group record: ``responses`` (a list of strings) and an
optional ``reference``. LLMBar's schema (``input``, ``output_1``, ``output_2``, ``label`` 1|2) and EvalBiasBench's
(``instruction``, ``response1``, ``response2``, ``label`` 1|2; its file is an object of lists keyed by bias) are
recognised automatically when no field was remapped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, overload

from brrm.errors import ConfigError
from brrm.records._io import RecordError, absent, open_rows, read_id, read_string_field
from brrm.records.fields import (
    EVALBIASBENCH_FIELDS,
    LLMBAR_FIELDS,
    FieldMap,
    read_conversation,
    read_label,
    read_optional_string,
)
from brrm.types import Conversation, Verdict
from brrm.types.config import check_text

SHAPES = ("pairs", "single", "groups")
"""Record shapes: ``pairs`` (response_a/response_b), ``single`` (response), ``groups`` (responses list)."""


@dataclass(frozen=True)
class PairRecord:
    """One valid pairwise record (``line``: 1-based line / row number)."""

    id: str
    line: int
    conversation: Conversation
    response_a: str
    response_b: str
    label: Verdict = Verdict.NONE
    row: Mapping[str, object] | None = field(default=None, compare=False, repr=False)
    id_given: bool = field(default=True, compare=False)


@dataclass(frozen=True)
class ScalarRecord:
    """One valid single-response record (``principle`` "" when the row has none)."""

    id: str
    line: int
    conversation: Conversation
    response: str
    principle: str = ""
    row: Mapping[str, object] | None = field(default=None, compare=False, repr=False)
    id_given: bool = field(default=True, compare=False)


@dataclass(frozen=True)
class GroupRecord:
    """One valid group record: N >= 1 responses to one conversation, and an optional reference ("" when none)."""

    id: str
    line: int
    conversation: Conversation
    responses: tuple[str, ...]
    reference: str = ""
    row: Mapping[str, object] | None = field(default=None, compare=False, repr=False)
    id_given: bool = field(default=True, compare=False)


Record = PairRecord | ScalarRecord | GroupRecord


def missing_reference(record: GroupRecord) -> str:
    """Why ``record`` cannot be ranked by the ``reference`` strategy (which judges each response against the
    record's reference): ``line N: …`` when it has none, else "". One rule for ``brrm rank`` and ``brrm audit``,
    which make such a record an ``invalid_input`` row and rank the rest."""
    if record.reference:
        return ""
    return (f"line {record.line}: strategy 'reference' needs a 'reference' field (the response the others are judged "
            "against)")

_Built = TypeVar("_Built")


def seed_ids(records: Sequence[Record]) -> list[str]:
    """The ids that key each record's sampler streams: its own id when the row named one, else "" — a line number
    must not, or removing an earlier line or reordering the file would change the record's result."""
    return [r.id if r.id_given else "" for r in records]


def parse_pair_record(row: object, *, line: int, fields: FieldMap | None = None) -> PairRecord | RecordError:
    """Validate one row (a decoded JSON value or a table row) into a PairRecord, or say why it is not one."""
    f = fields or FieldMap()
    return _guard(row, line, f, lambda row, rid, given: PairRecord(
        rid, line, read_conversation(row, f), read_string_field(row, f.response_a),
        read_string_field(row, f.response_b), read_label(row, f), row, given))


def parse_scalar_records(row: object, *, line: int,
                         fields: FieldMap | None = None) -> list[ScalarRecord | RecordError]:
    """Validate one row into one ScalarRecord (or two, ``<id>:A`` / ``<id>:B``, for a pair row)."""
    f = fields or FieldMap()

    def build(row: Mapping[str, object], rid: str, given: bool) -> list[ScalarRecord]:
        conv = read_conversation(row, f)
        principle = read_optional_string(row, f.principle)
        if f.response not in row and {f.response_a, f.response_b} <= row.keys():
            return [ScalarRecord(f"{rid}:{side}", line, conv, read_string_field(row, column), principle, row, given)
                    for side, column in (("A", f.response_a), ("B", f.response_b))]
        return [ScalarRecord(rid, line, conv, read_string_field(row, f.response), principle, row, given)]

    out = _guard(row, line, f, build)
    records: list[ScalarRecord | RecordError] = [*out] if isinstance(out, list) else [out]
    return records


def parse_group_record(row: object, *, line: int, fields: FieldMap | None = None) -> GroupRecord | RecordError:
    """Validate one row into a GroupRecord, or say why it is not one."""
    fields = fields or FieldMap()

    def build(row: Mapping[str, object], rid: str, given: bool) -> GroupRecord:
        responses = row.get(fields.responses)
        if isinstance(responses, str) and responses.lstrip().startswith("["):
            try:  # CSV cells hold the list as JSON text
                responses = json.loads(responses)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"field {fields.responses!r} is not valid JSON: {exc}") from None
        if responses is None:
            raise ConfigError(f"missing field {fields.responses!r} (a list of response strings)")
        if isinstance(responses, str) or not isinstance(responses, Sequence) or hasattr(responses, "keys"):
            raise ConfigError(f"field {fields.responses!r} must be a list of strings, got {type(responses).__name__}")
        bad = next((k for k, r in enumerate(responses) if not isinstance(r, str)), None)
        if bad is not None:
            raise ConfigError(f"field {fields.responses!r}[{bad}] must be a string, got "
                              f"{type(responses[bad]).__name__}")
        for k, r in enumerate(responses):
            check_text(f"field {fields.responses!r}[{k}]", r)
        if not responses:
            raise ConfigError(f"field {fields.responses!r} is empty; a group needs at least one response")
        return GroupRecord(rid, line, read_conversation(row, fields), tuple(responses),
                           read_optional_string(row, fields.reference), row, given)

    return _guard(row, line, fields, build)


def _guard(row: object, line: int, fields: FieldMap,
           build: Callable[[Mapping[str, object], str, bool], _Built]) -> _Built | RecordError:
    """``build(row, id, id_given)`` of an object row, or the RecordError of a row that is not one or whose build
    raised ConfigError. ``id_given`` is False when the id is the line number (a line number must not key the
    record's sampler streams)."""
    if not isinstance(row, Mapping):
        return RecordError(line, str(line), f"line {line}: expected an object with fields, got {type(row).__name__}")
    rid = str(line)
    try:
        rid = read_id(row, line, fields.id)
        return build(row, rid, not absent(row.get(fields.id)))
    except ConfigError as exc:
        return RecordError(line, rid, f"line {line}: {exc}")


def detect_fields(rows: Sequence[tuple[int, object]], fields: FieldMap | None) -> FieldMap:
    """LLMBar's (or EvalBiasBench's) columns when no field was remapped and the first object row has them and none
    of ours."""
    if fields is not None and fields != FieldMap():
        return fields
    default = FieldMap()
    first = next((row for _, row in rows if isinstance(row, Mapping)), None)
    ours = {default.prompt, default.conversation, default.response_a, default.response_b, default.response,
            default.responses}
    if first is not None and not ours & first.keys():
        for known in (LLMBAR_FIELDS, EVALBIASBENCH_FIELDS):
            if {known.prompt, known.response_a, known.response_b} <= first.keys():
                return known
    return default


def detect_shape(rows: Sequence[tuple[int, object]], fields: FieldMap) -> str:
    """The record shape of a file from its first object row (see :data:`SHAPES`).

    Raises:
        ConfigError: when no row has the fields of any shape (naming the fields looked for).
    """
    for _, row in rows:
        if not isinstance(row, Mapping):
            continue
        if fields.responses in row:
            return "groups"
        if fields.response_a in row and fields.response_b in row:
            return "pairs"
        if fields.response in row:
            return "single"
    raise ConfigError(f"no record has {fields.response_a!r}/{fields.response_b!r} (pairs), {fields.response!r} "
                      f"(single responses) or {fields.responses!r} (groups); remap columns with --field")


@overload
def read_records(path: str | os.PathLike[str], shape: Literal["pairs"], *, fields: FieldMap | None = None,
                 limit: int | None = None, format: str | None = None,
                 split: str | None = None) -> list[PairRecord | RecordError]: ...
@overload
def read_records(path: str | os.PathLike[str], shape: Literal["single"], *, fields: FieldMap | None = None,
                 limit: int | None = None, format: str | None = None,
                 split: str | None = None) -> list[ScalarRecord | RecordError]: ...
@overload
def read_records(path: str | os.PathLike[str], shape: Literal["groups"], *, fields: FieldMap | None = None,
                 limit: int | None = None, format: str | None = None,
                 split: str | None = None) -> list[GroupRecord | RecordError]: ...
@overload
def read_records(path: str | os.PathLike[str], shape: str, *, fields: FieldMap | None = None,
                 limit: int | None = None, format: str | None = None,
                 split: str | None = None) -> list[Record | RecordError]: ...
def read_records(path: str | os.PathLike[str], shape: str, *, fields: FieldMap | None = None,
                 limit: int | None = None, format: str | None = None,
                 split: str | None = None) -> list[PairRecord | RecordError] | list[ScalarRecord | RecordError] \
        | list[GroupRecord | RecordError] | list[Record | RecordError]:
    """Every record of ``shape`` in a file, in input order, with a RecordError for each bad row.

    Args:
        path: a JSONL, JSON, Parquet, CSV or TSV file, or a Hugging Face dataset folder or hub id.
        shape: one of :data:`SHAPES`, or ``auto`` (:func:`detect_shape`).
        fields: column names; default :class:`FieldMap()` (LLMBar's schema auto-detected).
        limit: read at most this many rows (>= 1); None reads all.
        format: one of :data:`~brrm.records.FORMATS`; default from the file suffix (``hf`` for folders and hub
            ids).
        split: the split of a Hugging Face dataset (default: its only split).

    Raises:
        ConfigError: when the file is missing or unreadable as a whole, or the shape is unknown.
    """
    rows = open_rows(os.fspath(path), format=format, limit=limit, split=split)
    fields = detect_fields(rows, fields)
    if shape == "auto":
        shape = detect_shape(rows, fields)
    if shape not in SHAPES:
        raise ConfigError(f"record shape {shape!r} is not valid; expected auto or one of {', '.join(SHAPES)}")
    out: list[Record | RecordError] = []
    for line, row in rows:
        if isinstance(row, RecordError):
            out.append(row)
        elif shape == "pairs":
            out.append(parse_pair_record(row, line=line, fields=fields))
        elif shape == "groups":
            out.append(parse_group_record(row, line=line, fields=fields))
        else:
            out.extend(parse_scalar_records(row, line=line, fields=fields))
    return out


def read_pair_records(path: str | os.PathLike[str], *, fields: FieldMap | None = None, limit: int | None = None,
                      format: str | None = None) -> list[PairRecord | RecordError]:
    """Pairwise records of a file (see :func:`read_records`)."""
    return read_records(path, "pairs", fields=fields, limit=limit, format=format)
