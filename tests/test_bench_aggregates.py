"""Benchmark aggregates against published figures: RM-Bench's Overall from the official leaderboard's per-domain
scores (``../shared/data/RM-Bench/official_results/leaderboard.csv``, THU-KEG/RM-Bench-Leaderboard @ ``b0d159f``).

The leaderboard prints per-domain scores (Chat, Math, Code, Safety) and their mean ("Domain Avg"), one decimal
each. brrm's RM-Bench Overall is the mean of the four domain scores; fed per-item results whose domain scores are
exactly the leaderboard's, it must print the leaderboard's Domain Avg (to its rounding) for every model listed with
all four domains.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.core import BenchItem, ItemResult, Pair, Shown, ok_judgment
from brrm.bench.rmbench import domain
from brrm.types import Verdict

N = 1000
"""Items per domain: a domain score of x.y % is exactly xy·N/1000 items right on all nine comparisons."""

SUBSET = {"chat": "chat", "math": "math", "code": "code", "safety": "safety-refuse"}


def _leaderboard(shared: Path) -> list[dict[str, str]]:
    path = shared / "data" / "RM-Bench" / "official_results" / "leaderboard.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if all(r[k] not in ("", "-") for k in ("Chat", "Math", "Code", "Safety", "Domain Avg"))]


def _variants() -> dict[str, tuple[list[ItemResult], list[ItemResult]]]:
    """Per domain: N items all right, and the same N items all wrong (9 comparisons each)."""
    out = {}
    for name, subset in SUBSET.items():
        right, wrong = [], []
        for k in range(N):
            pairs = tuple(Pair(i, 3 + j, Verdict.A) for i in range(3) for j in range(3))
            item = BenchItem(f"{name}/{k}", subset, "q", tuple("abcdef"), pairs, {"domain": domain(subset)})
            for verdict, into in ((Verdict.A, right), (Verdict.B, wrong)):
                into.append(ItemResult(item, tuple(Shown(p, False, ok_judgment(verdict)) for p in range(9))))
        out[name] = (right, wrong)
    return out


def test_rmbench_overall_reproduces_the_leaderboards_domain_average(shared):
    rows = _leaderboard(shared)
    assert len(rows) >= 40  # SOURCE.md: 51 models, 40 of them with all four domains
    variants, bench = _variants(), get_benchmark("rm-bench")
    for row in rows[::4]:
        results = []
        for name in SUBSET:
            correct = round(float(row[name.capitalize()]) * N / 100)
            right, wrong = variants[name]
            results += right[:correct] + wrong[correct:]
        got = bench.score(results)
        for name in SUBSET:
            assert got.row(name).score == pytest.approx(float(row[name.capitalize()]), abs=1e-9)
        assert got.overall == pytest.approx(float(row["Domain Avg"]), abs=0.05 + 1e-9), row["Model Name"]
