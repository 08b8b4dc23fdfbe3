"""Records: every input format and field map, read row by row with per-row errors and line numbers.

* :mod:`~brrm.records._io` — files to ``(line, row)`` (JSONL, JSON, Parquet, CSV, TSV);
* :mod:`~brrm.records.fields` — :class:`FieldMap` (``--field field=column``) and the shared field readers;
* :mod:`~brrm.records.shapes` — pair, single-response and group records;
* :mod:`~brrm.records.duplicates` — ids that repeat in an input, said by name and count (refused where a metric
  or table joins by id).

Records come back as a list in input order, and every surface files results by that position (and, where it
stores them, by content hash): a record's ``id`` is data, never a key, so ids may repeat and each record still
gets its own result (``brrm judge``/``score``/``rank`` lines by position; the audit store by content hash,
:mod:`brrm.audit.keys`; benchmarks by :func:`brrm.bench.core.item_keys`).
"""

from brrm.records._io import FORMATS, RecordError, detect_format, iter_rows, open_rows, read_string_field
from brrm.records.fields import LLMBAR_FIELDS, FieldMap, read_conversation, read_label
from brrm.records.shapes import (
    SHAPES,
    GroupRecord,
    PairRecord,
    Record,
    ScalarRecord,
    detect_fields,
    detect_shape,
    missing_reference,
    parse_group_record,
    parse_pair_record,
    parse_scalar_records,
    read_pair_records,
    read_records,
    seed_ids,
)

__all__ = [
    "FORMATS",
    "LLMBAR_FIELDS",
    "SHAPES",
    "FieldMap",
    "GroupRecord",
    "PairRecord",
    "Record",
    "RecordError",
    "ScalarRecord",
    "detect_fields",
    "detect_format",
    "detect_shape",
    "missing_reference",
    "iter_rows",
    "open_rows",
    "parse_group_record",
    "parse_pair_record",
    "parse_scalar_records",
    "read_conversation",
    "read_label",
    "read_pair_records",
    "read_records",
    "read_string_field",
    "seed_ids",
]
