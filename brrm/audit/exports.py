"""Exports of a run's rows next to its report: ``results.jsonl`` (full results) and ``results.parquet`` (flat).

One row per planned input row, in input order, invalid rows included (status ``invalid_input`` with the line
number and reason). ``results.jsonl`` holds each row's normalized record and full result (``to_dict()``);
``results.parquet`` holds the columns an analysis filters on (status, flags, winner, P(A≻B), reward, label,
dimensions, slice columns) plus the record and result as JSON text. Both are written to a temporary file and
renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.audit.summary import AuditRow
from brrm.types import PairwiseJudgment, ScalarReward

if TYPE_CHECKING:
    from brrm.audit.options import AuditOptions

JSONL_FILE = "results.jsonl"
PARQUET_FILE = "results.parquet"


def export_row(row: AuditRow) -> dict[str, object]:
    """The JSONL object of one row."""
    return {"position": row.position, "line": row.line, "id": row.record_id, "item_hash": row.item_hash,
            "status": row.status, "reason": row.reason, "flags": list(row.flags), "slices": dict(row.slices),
            "record": None if row.record is None else dict(row.record),
            "result": None if row.result_dict is None else dict(row.result_dict)}


def write_exports(rows: Sequence[AuditRow], directory: Path, options: AuditOptions) -> dict[str, Path]:
    """Write ``results.jsonl`` and ``results.parquet``; returns their paths by name (``jsonl``, ``parquet``)."""
    directory = Path(directory)
    jsonl = directory / JSONL_FILE
    tmp = jsonl.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(export_row(row), ensure_ascii=False) + "\n")
    os.replace(tmp, jsonl)
    return {"jsonl": jsonl, "parquet": write_parquet(rows, directory / PARQUET_FILE, options.slice_by)}


def write_parquet(rows: Sequence[AuditRow], path: Path, slice_by: Sequence[str]) -> Path:
    """The flat Parquet export (pyarrow, an explicit schema: null where a column does not apply)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def num(x: float | None) -> float | None:
        return None if x is None or math.isnan(x) else x

    records = []
    for row in rows:
        res = row.result
        jd = res if isinstance(res, PairwiseJudgment) else None
        sr = res if isinstance(res, ScalarReward) else None
        values = {"position": row.position, "line": row.line, "id": row.record_id, "item_hash": row.item_hash,
                  "status": row.status, "reason": row.reason, "flags": list(row.flags),
                  "winner": jd.winner.value if jd else None, "p_a": num(jd.p_a) if jd else None,
                  "reward": num(sr.reward) if sr else None,
                  "label": (row.record or {}).get("label"), "correct": jd.correct if jd else None,
                  "consistent": jd.consistent if jd else None,
                  "dimensions": list(dict.fromkeys(d for s in (jd.sub_judgments or (jd,)) for d in s.dimensions))
                  if jd else [],
                  "record": None if row.record is None else json.dumps(row.record, ensure_ascii=False),
                  "result": None if row.result_dict is None else json.dumps(row.result_dict, ensure_ascii=False)}
        records.append({**values, **{f"slice.{col}": row.slices.get(col) for col in slice_by}})
    types = {"position": pa.int64(), "line": pa.int64(), "flags": pa.list_(pa.string()), "p_a": pa.float64(),
             "reward": pa.float64(), "correct": pa.bool_(), "consistent": pa.bool_(),
             "dimensions": pa.list_(pa.string())}
    names = ["position", "line", "id", "item_hash", "status", "reason", "flags", "winner", "p_a", "reward", "label",
             "correct", "consistent", "dimensions", "record", "result", *(f"slice.{col}" for col in slice_by)]
    schema = pa.schema([(name, types.get(name, pa.string())) for name in names])
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp)
    os.replace(tmp, path)
    return path
