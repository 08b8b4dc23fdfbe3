"""Reading record files: JSONL (line by line, so one bad line loses nothing), JSON, Parquet, CSV and TSV, and
Hugging Face datasets (a ``save_to_disk`` folder, a dataset repository folder, or a hub id in the local cache).

Rows come out as ``(line, value)``: the 1-based line number (JSONL) or row number (other formats and datasets)
and the decoded row, or a :class:`RecordError` for a line that is not valid JSON or is longer than
:data:`MAX_LINE_BYTES` (its bytes are skipped without being held; the rest of the file goes on). A file that is
not UTF-8 text (a binary file, another encoding) is one :class:`~brrm.errors.ConfigError` naming the file and the
line. Parquet, CSV/TSV and datasets go through ``datasets``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from brrm.errors import ConfigError
from brrm.types.config import check_choice, check_text

MAX_LINE_BYTES = 16 << 20
"""Longest JSONL line read as a record, in bytes (16 MiB, the newline not counted): a longer line is that line's
``invalid_input``, never read into memory whole nor sent to a model (a 60 MB line once took minutes to tokenize
and held off SIGTERM meanwhile). Far above any real conversation (the server's default body limit is 8 MiB)."""

_CHUNK = 1 << 20
"""Bytes read at a time while skipping the rest of an over-long line."""

FORMATS = ("jsonl", "json", "parquet", "csv", "tsv", "hf")
"""Input formats the record readers take (``hf``: a Hugging Face dataset folder or hub id, through ``datasets``)."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

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
class RecordError:
    """One input row that could not be read as a record.

    Attributes:
        line: 1-based line number (JSONL) or row number (other formats).
        id: the row's id when it could be read, else the line number as a string.
        reason: what is wrong, starting with ``line N:`` and naming the field and valid options.
    """

    line: int
    id: str
    reason: str


def absent(value: object) -> bool:
    """None, NaN (a missing numeric cell) and "" count as absent for optional fields."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def read_string_field(row: Mapping[str, object], column: str) -> str:
    """``row[column]`` as a string.

    Raises:
        ConfigError: naming the column when it is missing or not a string.
    """
    value = row.get(column)
    if value is None:
        raise ConfigError(f"field {column!r} is null" if column in row else f"missing field {column!r}")
    if not isinstance(value, str):
        raise ConfigError(f"field {column!r} must be a string, got {type(value).__name__}")
    return check_text(f"field {column!r}", value)


def read_id(row: Mapping[str, object], line: int, column: str) -> str:
    """The row's id as a string (the line number when absent).

    Raises:
        ConfigError: when the id is neither a string nor an integer.
    """
    value = row.get(column)
    if absent(value):
        return str(line)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"field {column!r} must be a string or an integer, got {type(value).__name__}")
    return str(value)


def open_rows(path: str | Path, *, format: str | None = None, limit: int | None = None,
              split: str | None = None) -> list[tuple[int, object]]:
    """Every ``(line, row)`` of a record file or Hugging Face dataset, checked before any model loads.

    Args:
        path: a record file; or a dataset folder or hub id (format ``hf``, detected when ``path`` is a folder,
            or not a file but shaped like ``owner/name``).
        format: one of :data:`FORMATS`; default from the suffix (``hf`` for folders and hub ids).
        limit: read at most this many rows (>= 1); None reads all.
        split: the dataset split (``hf`` only); default: the only split, else an error listing them.

    Raises:
        ConfigError: when the file is missing, its format unknown, it is not a list of records at all, a
            dataset cannot be loaded (or has no such split), ``split`` is given for a file, or ``limit`` is not
            an int >= 1.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be an int >= 1 or None, got {limit!r}", field="limit")
    text = str(path)
    path = Path(path).expanduser()
    if format == "hf" or (format is None and not path.is_file() and (path.is_dir() or _HUB_ID.match(text))):
        return list(enumerate(_load_hf(text, split, limit), start=1))
    if split is not None:
        raise ConfigError(f"split applies to Hugging Face datasets (a folder or hub id), not the file {text!r}")
    if not path.is_file():
        raise ConfigError(f"input file {text!r} does not exist or is not a file")
    return list(iter_rows(path, detect_format(path, format), limit))


def detect_format(path: Path, format: str | None) -> str:
    if format is not None:
        return check_choice("format", format, FORMATS)
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(
            f"cannot tell the format of {path.name!r} from its suffix; expected one of "
            f"{', '.join(_SUFFIXES)} (or pass --input-format)"
        )
    return fmt


def iter_rows(path: Path, fmt: str, limit: int | None) -> Iterator[tuple[int, object]]:
    """(line, row) pairs; a row is a decoded value or a RecordError for an undecodable line."""
    if fmt == "jsonl":
        yield from _iter_jsonl(path, limit)
        return
    if fmt == "json":
        text = _decode(path.read_bytes(), path, 1)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # several documents: JSON Lines in a .json file
                raise ConfigError(f"{path.name}: not valid JSON ({exc})") from None
            yield from _iter_jsonl(path, limit)
            return
        if _grouped(data):
            data = [row for rows in data.values() for row in rows]  # records grouped by key (EvalBiasBench)
        if not isinstance(data, list):
            raise ConfigError(f"{path.name}: expected a JSON list of records, got a {type(data).__name__} (an "
                              "object is read only when every value is a non-empty list of records)")
        yield from list(enumerate(data, start=1))[:limit]
        return
    yield from enumerate(_load_with_datasets(path, fmt, limit), start=1)


def _grouped(data: object) -> bool:
    """Whether a JSON document is records grouped by key: an object whose every value is a non-empty list of
    objects (EvalBiasBench's ``biasbench.json``, keyed by bias type; read in key order, then list order)."""
    return isinstance(data, dict) and bool(data) and all(
        isinstance(v, list) and v and all(isinstance(x, dict) for x in v) for v in data.values())


def _nested_records(line: int, row: object) -> RecordError:
    """A JSON Lines line that is an object of record lists (``{"pairs": [...]}``): not a record, but a whole JSON
    document written on one line; said so, with the way to read it."""
    assert isinstance(row, dict)
    held = ", ".join(f"{k!r}: {len(v)} records" for k, v in row.items())
    return RecordError(line, str(line), f"line {line}: an object of record lists ({held}), not one record: a JSON "
                                        "document on one line; save it as .json or pass --input-format json")


def _decode(data: bytes, path: Path, line: int) -> str:
    """``data`` (line ``line`` of ``path``, or the whole file) as UTF-8 text.

    Raises:
        ConfigError: naming the file and line when it is not UTF-8 text (a NUL byte counts as binary).
    """
    try:
        if b"\0" in data:
            raise UnicodeError("a NUL byte")
        return data.decode("utf-8")
    except UnicodeError as exc:
        raise ConfigError(f"{path.name}: not a UTF-8 text file (line {line}: {exc}); is it binary, or in another "
                          "encoding? Convert it to UTF-8 JSON Lines, or pass --input-format") from None


def _lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """Each line of ``handle`` without its newline, or None for a line over :data:`MAX_LINE_BYTES` (skipped in
    chunks, never held whole)."""
    limit = MAX_LINE_BYTES
    while data := handle.readline(limit + 2):
        content = data.rstrip(b"\r\n")
        if len(content) <= limit and (data.endswith(b"\n") or len(data) <= limit):  # whole, and within the limit
            yield content
            continue
        while not data.endswith(b"\n") and (data := handle.readline(_CHUNK)):
            pass
        yield None


def _iter_jsonl(path: Path, limit: int | None) -> Iterator[tuple[int, object]]:
    count = 0
    with path.open("rb") as handle:
        for line, data in enumerate(_lines(handle), start=1):
            if limit is not None and count >= limit:
                return
            if data is None:
                count += 1
                yield line, RecordError(line, str(line), f"line {line}: longer than the {MAX_LINE_BYTES}-byte line "
                                                         "limit (brrm.records._io.MAX_LINE_BYTES); not read")
                continue
            text = _decode(data, path, line)
            if not text.strip():
                continue
            count += 1
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                early = "; the line ends early: cut short?" if exc.pos >= len(text.rstrip()) else ""
                why = f"line {line}: not valid JSON ({exc.msg} at column {exc.colno}{early})"
                yield line, RecordError(line, str(line), why)
                continue
            yield line, _nested_records(line, row) if _grouped(row) else row


def _load_hf(source: str, split: str | None, limit: int | None) -> list[dict[str, object]]:
    """Rows of a Hugging Face dataset: a ``save_to_disk`` folder, a dataset repository folder, or a hub id
    (loaded from the local cache when offline)."""
    import datasets

    local = Path(source).expanduser()
    try:
        with _quiet_datasets():
            if (local / "dataset_dict.json").is_file() or (local / "state.json").is_file():
                ds = datasets.load_from_disk(str(local))
            else:
                ds = datasets.load_dataset(str(local) if local.is_dir() else source)
    except Exception as exc:  # missing, not cached offline, unreadable: the input as a whole is unusable
        raise ConfigError(f"{source!r} could not be loaded as a Hugging Face dataset ({type(exc).__name__}: "
                          f"{str(exc)[:300]})") from exc
    if isinstance(ds, datasets.DatasetDict):
        splits = ", ".join(ds)
        if split is None and len(ds) != 1:
            raise ConfigError(f"{source!r} has several splits; pass split (one of: {splits})")
        if split is not None and split not in ds:
            raise ConfigError(f"split {split!r} is not in {source!r}; splits: {splits}", field="split")
        ds = ds[split if split is not None else next(iter(ds))]
    elif split is not None:
        raise ConfigError(f"{source!r} is a single dataset without splits; drop split")
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return list(ds.to_list())


def _load_with_datasets(path: Path, fmt: str, limit: int | None) -> list[dict[str, object]]:
    """Rows of a Parquet / CSV / TSV file via ``datasets``, cached in a throwaway dir (no stale cache)."""
    import datasets

    kwargs: dict[str, object] = {}
    if fmt in ("csv", "tsv"):
        kwargs = {"na_filter": False, "delimiter": "\t" if fmt == "tsv" else ","}
    with _quiet_datasets(), tempfile.TemporaryDirectory(prefix="brrm-records-") as cache:
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


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """``datasets`` without its progress bars and log lines while the block runs (both restored after): a file
    that fails to parse is one error line (the exception's), not also datasets' own log line."""
    import datasets

    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars_were_on:
            datasets.enable_progress_bars()
