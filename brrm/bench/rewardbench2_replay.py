"""Read RewardBench 2's official per-item score files back as brrm item results (``--predictions``).

``scripts/run_v2.py`` (rewardbench 0.1.4) saves ``eval-set-scores/<model>.json``: ``out_dataset.to_dict()``, a
JSON object of columns (``id``, ``subset``, ``num_correct``, ``scores``, ``text``, ``results``, …) plus the scalar
keys ``model``, ``model_type``, ``chat_template``. brrm reads that object, or the same columns as JSON lines (one
item per line), and needs ``id``, ``subset``, ``num_correct`` and ``scores`` (one score per completion, chosen
first; a one-element list ``[x]`` counts as ``x``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from brrm.bench.core import BenchItem, ItemResult, known_subset
from brrm.errors import ConfigError
from brrm.types import ScalarReward, Status

COLUMNS = ("id", "subset", "num_correct", "scores")


def _rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        lengths = {len(data[c]) for c in COLUMNS if isinstance(data.get(c), list)}
        if len(lengths) != 1 or any(not isinstance(data.get(c), list) for c in COLUMNS):
            raise ConfigError(f"{path}: an official score file needs equal-length columns {', '.join(COLUMNS)}")
        return [{c: data[c][k] for c in COLUMNS} for k in range(lengths.pop())]
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise ConfigError(f"{path}: neither a JSON object of columns nor JSON lines ({exc})") from None


def _score(value: Any) -> float:
    x = value[0] if isinstance(value, list) and len(value) == 1 else value
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise ConfigError(f"score {value!r} is not a finite number")
    return float(x)

SUBSETS = ("Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties")
"""RewardBench 2's six subsets, in the paper's order (:mod:`brrm.bench.rewardbench2` uses them too)."""


def read_scores(path: Path) -> list[ItemResult]:
    """One :class:`ItemResult` per row (rewards = the stored scores; texts are not needed).

    Raises:
        ConfigError: naming the file and row of a missing column or a score that is not a finite number.
    """
    out = []
    for k, row in enumerate(_rows(path), start=1):
        missing = [c for c in COLUMNS if c not in row]
        if missing or not isinstance(row.get("scores"), list) or not row["scores"]:
            raise ConfigError(f"{path} row {k}: needs {', '.join(COLUMNS)} (scores: a non-empty list); "
                              f"missing {', '.join(missing) or 'scores list'}")
        try:
            rewards = tuple(ScalarReward(_score(s), Status.OK, id=f"{row['id']}#r{m}")
                            for m, s in enumerate(row["scores"]))
        except ConfigError as exc:
            raise ConfigError(f"{path} row {k}: {exc}") from None
        subset = known_subset(row["subset"], SUBSETS, f"{path} row {k}")
        item = BenchItem(str(row["id"]), subset, "", ("",) * len(rewards), (),
                         {"num_correct": int(row["num_correct"])})
        out.append(ItemResult(item, (), rewards))
    return out
