"""Reading pairwise judging input: one conversation and two candidate responses per record.

Input files are JSON Lines, JSON (a list of objects, as LLMBar ships them), Parquet or CSV/TSV. Every input
row yields exactly one item, in file order: a :class:`PairRecord`, or a :class:`RecordError` that names the
row, the field and the valid options. Nothing is dropped silently, and one bad row never aborts the file.

Record schema (column names remappable with :class:`FieldMap`)::

    {"id": "q1",                                   # optional; default: the 1-based line / row number
     "conversation": [{"role": "user", "content": "..."}, ...],   # or "prompt": "..."
     "response_a": "...", "response_b": "...",
     "label": "A"}                                 # optional: "A", "B", "tie" (or 1 / 2)

LLMBar's schema (``input``, ``output_1``, ``output_2``, ``label`` 1|2; see
``../shared/data/LLMBar/SOURCE.md``) is recognised automatically when no field was remapped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brrm.errors import ConfigError
from brrm.types import Conversation, Verdict, parse_label

FORMATS = ("jsonl", "json", "parquet", "csv", "tsv")
"""Input formats :func:`read_pair_records` reads."""

_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
}


@dataclass(frozen=True)
class FieldMap:
    """Which input column holds each part of a pairwise record.

    Attributes:
        id: the record id column (optional in the data; default id is the 1-based line / row number).
        conversation: a list of ``{role, content}`` messages ending with a user or tool turn.
        prompt: a single user prompt string (used when the row has no conversation).
        response_a: the first candidate response (a string).
        response_b: the second candidate response (a string).
        label: the gold verdict, ``A`` / ``B`` / ``tie`` or ``1`` / ``2`` (optional in the data).

    Raises:
        ConfigError: when a column name is empty or not a string, or two fields share one column.
    """

    id: str = "id"
    conversation: str = "conversation"
    prompt: str = "prompt"
    response_a: str = "response_a"
    response_b: str = "response_b"
    label: str = "label"

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for name, column in self.items():
            if not isinstance(column, str) or not column:
                raise ConfigError(f"field map {name!r} must be a non-empty column name, got {column!r}")
            if column in seen:
                raise ConfigError(f"field map: {seen[column]!r} and {name!r} both read column {column!r}")
            seen[column] = name

    def items(self) -> list[tuple[str, str]]:
        """(field, column) pairs in declaration order."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    @classmethod
    def from_overrides(cls, overrides: Iterable[str] | Mapping[str, str] | None = None) -> FieldMap:
        """Build a field map from CLI-style ``field=column`` overrides (e.g. ``["prompt=input"]``).

        Args:
            overrides: ``"field=column"`` strings, or a ``{field: column}`` mapping; None or empty means
                the defaults.

        Raises:
            ConfigError: on a string without ``=``, or an unknown field (the message lists the valid ones).
        """
        pairs: dict[str, str] = {}
        items = overrides.items() if isinstance(overrides, Mapping) else (overrides or ())
        for item in items:
            if isinstance(item, str):
                key, sep, column = item.partition("=")
                if not sep:
                    raise ConfigError(f"field override {item!r} is not field=column (e.g. prompt=input)")
            else:
                key, column = item
            key, column = key.strip(), column.strip()
            valid = [f.name for f in dataclasses.fields(cls)]
            if key not in valid:
                raise ConfigError(f"unknown field {key!r} in override; expected one of {', '.join(valid)}")
            pairs[key] = column
        return cls(**pairs)


LLMBAR_FIELDS = FieldMap(prompt="input", response_a="output_1", response_b="output_2")
"""LLMBar's columns (``input``, ``output_1``, ``output_2``, ``label``), per ``data/LLMBar/SOURCE.md``."""


@dataclass(frozen=True)
class PairRecord:
    """One valid pairwise record.

    Attributes:
        id: the record id (the input's id as a string, or the 1-based line / row number).
        line: 1-based line number (JSONL) or row number (JSON list, Parquet, CSV data rows).
        conversation: the turns before the responses; ends with a user or tool turn.
        response_a: candidate A's text.
        response_b: candidate B's text.
        label: the gold verdict, ``Verdict.NONE`` when the record has none.
    """

    id: str
    line: int
    conversation: Conversation
    response_a: str
    response_b: str
    label: Verdict = Verdict.NONE


@dataclass(frozen=True)
class RecordError:
    """One input row that could not be read as a :class:`PairRecord`.

    Attributes:
        line: 1-based line number (JSONL) or row number (other formats).
        id: the row's id when it could be read, else ``""``.
        reason: what is wrong, starting with ``line N:`` and naming the field and valid options.
    """

    line: int
    id: str
    reason: str


def read_pair_records(
    path: str | os.PathLike[str],
    *,
    fields: FieldMap | None = None,
    limit: int | None = None,
    format: str | None = None,
) -> list[PairRecord | RecordError]:
    """Read pairwise records from a JSONL, JSON, Parquet, CSV or TSV file.

    JSONL is read line by line, so a malformed line becomes a :class:`RecordError` and the rest is kept
    (blank lines are skipped; line numbers stay those of the file). JSON is one document (a list of
    objects); a ``.json`` file that holds JSON Lines is read as JSONL. Parquet and CSV/TSV go through
    ``datasets.load_dataset``; CSV cells are kept as written (``NA`` or an empty cell is text, not missing;
    an empty ``id``, ``label`` or ``conversation`` cell counts as absent). A CSV ``conversation`` cell holds
    the message list as JSON text.

    Args:
        path: the input file.
        fields: column names; default :class:`FieldMap()`, in which case LLMBar's schema is auto-detected.
        limit: read at most this many rows (>= 1); None reads all.
        format: one of :data:`FORMATS`; default from the file suffix.

    Returns:
        One item per input row, in order: a PairRecord, or a RecordError for a row that is not valid.

    Raises:
        ConfigError: when the file is missing, its format unknown, it is not a list of records at all,
            or ``limit`` is not an int >= 1.
    """
    path = Path(path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be an int >= 1 or None, got {limit!r}")
    if not path.is_file():
        raise ConfigError(f"input file {str(path)!r} does not exist or is not a file")
    fmt = detect_format(path, format)
    rows = list(iter_rows(path, fmt, limit))
    if fields is None or fields == FieldMap():
        fields = _detect_fields(rows)
    out: list[PairRecord | RecordError] = []
    for line, row in rows:
        out.append(row if isinstance(row, RecordError) else parse_pair_record(row, line=line, fields=fields))
    return out


def parse_pair_record(row: Any, *, line: int, fields: FieldMap | None = None) -> PairRecord | RecordError:
    """Validate one row (a mapping of column -> value) into a PairRecord, or say why it is not one.

    Args:
        row: the decoded row.
        line: its 1-based line / row number (also the default id).
        fields: column names; default :class:`FieldMap()`.

    Returns:
        A PairRecord, or a RecordError naming the field and the valid options.
    """
    fields = fields or FieldMap()
    if not isinstance(row, Mapping):
        return RecordError(line, str(line), f"line {line}: expected an object with fields, got {type(row).__name__}")
    rid = ""
    try:
        rid = _read_id(row, line, fields)
        conversation = _read_conversation(row, fields)
        response_a = read_string_field(row, fields.response_a)
        response_b = read_string_field(row, fields.response_b)
        label = _read_label(row, fields)
    except ConfigError as exc:
        return RecordError(line, rid, f"line {line}: {exc}")
    return PairRecord(rid, line, conversation, response_a, response_b, label)


def _absent(value: Any) -> bool:
    """None, NaN (a missing numeric cell) and "" count as absent for optional fields."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _read_id(row: Mapping[str, Any], line: int, fields: FieldMap) -> str:
    value = row.get(fields.id)
    if _absent(value):
        return str(line)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"field {fields.id!r} must be a string or an integer, got {type(value).__name__}")
    return str(value)


def _read_conversation(row: Mapping[str, Any], fields: FieldMap) -> Conversation:
    conv, prompt = row.get(fields.conversation), row.get(fields.prompt)
    has_conv = not _absent(conv)
    if has_conv and not (prompt is None or prompt == ""):
        raise ConfigError(f"has both {fields.conversation!r} and {fields.prompt!r}; give only one of them")
    if has_conv:
        if isinstance(conv, str) and conv.lstrip().startswith("["):
            try:  # CSV cells hold the message list as JSON text
                conv = json.loads(conv)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"field {fields.conversation!r} is not valid JSON: {exc}") from None
        if not isinstance(conv, list | tuple):
            raise ConfigError(
                f"field {fields.conversation!r} must be a list of {{role, content}} messages, got "
                f"{type(conv).__name__} (use {fields.prompt!r} for a single prompt string)"
            )
        return Conversation.coerce(list(conv), where=fields.conversation)
    if prompt is None:
        raise ConfigError(f"missing field {fields.prompt!r} (or {fields.conversation!r})")
    if not isinstance(prompt, str):
        raise ConfigError(f"field {fields.prompt!r} must be a string, got {type(prompt).__name__}")
    return Conversation.from_prompt(prompt)


def read_string_field(row: Mapping[str, Any], column: str) -> str:
    """``row[column]`` as a string.

    Raises:
        ConfigError: naming the column when it is missing or not a string.
    """
    value = row.get(column)
    if value is None:
        raise ConfigError(f"missing field {column!r}")
    if not isinstance(value, str):
        raise ConfigError(f"field {column!r} must be a string, got {type(value).__name__}")
    return value


def _read_label(row: Mapping[str, Any], fields: FieldMap) -> Verdict:
    value = row.get(fields.label)
    if _absent(value):
        return Verdict.NONE
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return parse_label(value, where=f"field {fields.label!r}:")


def detect_format(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in FORMATS:
            raise ConfigError(f"format {format!r} is not valid; expected one of {', '.join(FORMATS)}")
        return format
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(
            f"cannot tell the format of {path.name!r} from its suffix; expected one of "
            f"{', '.join(_SUFFIXES)} (or pass format=)"
        )
    return fmt


def _detect_fields(rows: list[tuple[int, Any]]) -> FieldMap:
    """LLMBar's columns when the first object row has them and none of ours; else the defaults."""
    default = FieldMap()
    first = next((row for _, row in rows if isinstance(row, Mapping)), None)
    if first is None:
        return default
    ours = {default.prompt, default.conversation, default.response_a, default.response_b}
    if {"input", "output_1", "output_2"} <= first.keys() and not ours & first.keys():
        return LLMBAR_FIELDS
    return default


def iter_rows(path: Path, fmt: str, limit: int | None) -> Iterator[tuple[int, Any]]:
    """(line, row) pairs; a row is a decoded value or a RecordError for an undecodable line."""
    if fmt == "jsonl":
        yield from _iter_jsonl(path, limit)
        return
    if fmt == "json":
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # several documents: JSON Lines in a .json file
                raise ConfigError(f"{path.name}: not valid JSON ({exc})") from None
            yield from _iter_jsonl(path, limit)
            return
        if not isinstance(data, list):
            raise ConfigError(f"{path.name}: expected a JSON list of records, got a {type(data).__name__}")
        yield from list(enumerate(data, start=1))[:limit]
        return
    yield from enumerate(_load_with_datasets(path, fmt, limit), start=1)


def _iter_jsonl(path: Path, limit: int | None) -> Iterator[tuple[int, Any]]:
    count = 0
    with path.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if limit is not None and count >= limit:
                return
            if not text.strip():
                continue
            count += 1
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as exc:
                why = f"line {line}: not valid JSON ({exc.msg} at column {exc.colno})"
                yield line, RecordError(line, str(line), why)


def _load_with_datasets(path: Path, fmt: str, limit: int | None) -> list[dict[str, Any]]:
    """Rows of a Parquet / CSV / TSV file via ``datasets``, cached in a throwaway dir (no stale cache)."""
    import datasets

    kwargs: dict[str, Any] = {}
    if fmt in ("csv", "tsv"):
        kwargs = {"na_filter": False, "delimiter": "\t" if fmt == "tsv" else ","}
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="brrm-records-") as cache:
            builder = "csv" if fmt == "tsv" else fmt
            kwargs.update(data_files=str(path), split="train", cache_dir=cache)
            try:
                ds = datasets.load_dataset(builder, **kwargs)
            except Exception as exc:  # pyarrow / pandas parse errors: the file as a whole is unreadable
                why = f"{type(exc).__name__}: {exc}"
                raise ConfigError(f"{path.name}: could not be read as {fmt} ({why})") from exc
            if limit is not None:
                ds = ds.select(range(min(limit, len(ds))))
            return ds.to_list()
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
