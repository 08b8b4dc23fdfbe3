"""The plan of an audit: every input row as an :class:`AuditItem`, in input order, with its key and slices.

A valid record becomes one item (a single-response record under several ``--principle`` flags becomes one
item per principle); a bad row becomes an ``invalid_input`` item with its line number and reason, so it is
counted and shown in the report while everything else is judged. Each valid item carries its
*normalized record*: the JSON-ready values a judge reads (shape, id, conversation, responses, label, principle,
reference) and nothing else, so its :func:`~brrm.audit.keys.item_hash` changes exactly when the judge's input
changes.

Duplicate ids are kept apart, not refused: each row is an item at its own ``position``, and results are stored by
content hash, so two rows with one id and different texts are two items with their own results, and two
identical rows (same id, same content) share one stored result — the same input to the same judge — each row
shown in the report and exports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from brrm.audit.keys import canonical_json, item_hash, sha256_text
from brrm.errors import ConfigError
from brrm.records import GroupRecord, PairRecord, Record, RecordError, ScalarRecord, missing_reference
from brrm.types.jsonvalue import JSONDict, JSONValue

SLICE_MISSING = "(missing)"
"""Slice value of a row without the ``--slice-by`` column."""

SLICE_INVALID = "(invalid row)"
"""Slice value of a row that could not be read as a record."""

SLICE_VALUE_CHARS = 80
"""Longer slice values are cut to this many characters (with an ellipsis)."""


@dataclass(frozen=True)
class AuditItem:
    """One row of the audit.

    Attributes:
        position: 0-based position in the plan (input order).
        line: 1-based line (JSONL) or row number (other formats) of the input row.
        record_id: the record's id (the line number when the row has none).
        item_hash: sha256 of the normalized record (of the line and reason for an invalid row).
        record: the normalized record (see :func:`normalize`); None for an invalid row.
        invalid_reason: why the row is not a record ("" for a valid item).
        slices: ``--slice-by`` column -> the row's value as text.
    """

    position: int
    line: int
    record_id: str
    item_hash: str
    record: Mapping[str, JSONValue] | None
    invalid_reason: str = ""
    slices: Mapping[str, str] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.record is not None


def normalize(rec: PairRecord | ScalarRecord | GroupRecord, *, principle: str = "",
              with_reference: bool = False) -> JSONDict:
    """The judge's input of a record as JSON-ready values (what :func:`~brrm.audit.keys.item_hash` hashes).

    Args:
        rec: a valid record.
        principle: the principle this single-response item is judged under ("" for none).
        with_reference: keep a group's reference (only the ``reference`` strategy reads it).
    """
    base: JSONDict = {"id": rec.id, "conversation": [m for m in rec.conversation.to_list()]}
    if isinstance(rec, PairRecord):
        return {"shape": "pairs", **base, "response_a": rec.response_a, "response_b": rec.response_b,
                "label": rec.label.value}
    if isinstance(rec, ScalarRecord):
        return {"shape": "single", **base, "response": rec.response, "principle": principle}
    return {"shape": "groups", **base, "responses": list(rec.responses),
            "reference": rec.reference if with_reference else ""}


def plan_items(records: Sequence[Record | RecordError], shape: str, *, slice_by: Sequence[str] = (),
               principles: Sequence[str] = (), principle_kind: bool = False,
               strategy: str | None = None) -> list[AuditItem]:
    """Every item of an audit, in input order.

    Args:
        records: what :func:`brrm.records.read_records` returned for ``shape`` (records and RecordErrors).
        shape: ``pairs``, ``single`` or ``groups``.
        slice_by: row columns to slice the report by.
        principles: ``--principle`` flags; single-response items are judged under each (else under the row's
            own ``principle``).
        principle_kind: the judge is a principle model (a single-response item without any principle is
            then invalid input; other judges ignore principles).
        strategy: the resolved group strategy; ``reference`` makes a group without a reference invalid.

    Raises:
        ConfigError: when a ``--slice-by`` column is in no row (naming the columns the rows have).
    """
    check_slice_columns(records, slice_by)
    items: list[AuditItem] = []

    def add(line: int, rid: str, record: JSONDict | None, reason: str, row: object) -> None:
        digest = item_hash(record) if record is not None else sha256_text(canonical_json(
            {"invalid": True, "shape": shape, "line": line, "id": rid, "reason": reason}))
        items.append(AuditItem(len(items), line, rid, digest, record, reason, slice_values(row, slice_by)))

    for rec in records:
        if isinstance(rec, RecordError):
            add(rec.line, rec.id, None, rec.reason, None)
        elif isinstance(rec, ScalarRecord):
            for p in (list(principles) or [rec.principle]) if principle_kind else [""]:
                if principle_kind and not p:
                    add(rec.line, rec.id, None, f"line {rec.line}: no principle for a principle model: add a "
                        "'principle' field or pass --principle", rec.row)
                else:
                    add(rec.line, rec.id, normalize(rec, principle=p), "", rec.row)
        elif isinstance(rec, GroupRecord) and strategy == "reference" and missing_reference(rec):
            add(rec.line, rec.id, None, missing_reference(rec), rec.row)
        else:
            add(rec.line, rec.id, normalize(rec, with_reference=strategy == "reference"), "", rec.row)
    return items


def slice_values(row: object, columns: Sequence[str]) -> dict[str, str]:
    """The row's value of each slice column as text (:data:`SLICE_MISSING` / :data:`SLICE_INVALID`)."""
    out: dict[str, str] = {}
    for col in columns:
        if not isinstance(row, Mapping):
            out[col] = SLICE_INVALID
            continue
        value = row.get(col)
        if value is None or value == "" or (isinstance(value, float) and value != value):
            text = SLICE_MISSING
        elif isinstance(value, str):
            text = value
        elif isinstance(value, bool | int | float):
            text = str(value)
        else:
            text = canonical_json(_plain(value))
        out[col] = text if len(text) <= SLICE_VALUE_CHARS else text[:SLICE_VALUE_CHARS - 1] + "…"
    return out


def _plain(value: object) -> object:
    """Lists and mappings (also numpy / Arrow values from Parquet) as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or hasattr(value, "tolist"):
        seq = value.tolist() if hasattr(value, "tolist") else value
        return [_plain(v) for v in seq] if isinstance(seq, list | tuple) else seq
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def check_slice_columns(records: Sequence[Record | RecordError], columns: Sequence[str]) -> None:
    """Refuse a ``--slice-by`` column that no row has.

    Raises:
        ConfigError: naming the column and the columns the rows do have.
    """
    if not columns:
        return
    seen: set[str] = set()
    for rec in records:
        row = None if isinstance(rec, RecordError) else rec.row
        if isinstance(row, Mapping):
            seen.update(str(k) for k in row)
    for col in columns:
        if col not in seen:
            raise ConfigError(f"--slice-by {col!r}: no record has that column; columns: "
                              f"{', '.join(sorted(seen)) or '(none)'}")
