"""RewardBench's aggregate against reward-bench's own scoring code (PyPI ``rewardbench``, installed ``--no-deps``).

The package's ``__init__`` and ``rewardbench.utils`` import fastchat and every reward-model wrapper (which do not
import beside transformers 5), so the test reads the two files of the installed package itself: it executes
``rewardbench/constants.py`` as a module and ``calculate_scores_per_section`` exactly as written in
``rewardbench/utils.py`` (its source, extracted with ``ast``), and calls them. Skips with a reason without the
package.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from brrm.bench import get_benchmark
from brrm.bench.core import BenchItem, ItemResult, Pair, Shown, ok_judgment
from brrm.bench.rewardbench import EXAMPLE_COUNTS, SECTIONS
from brrm.types import Verdict


def _package() -> Path:
    spec = importlib.util.find_spec("rewardbench")  # finds the folder without running its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("reward-bench is not installed (pip install --no-deps rewardbench)")
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def official() -> tuple[ModuleType, Any]:
    """(``rewardbench.constants``, ``rewardbench.utils.calculate_scores_per_section``) from the installed package."""
    root = _package()
    spec = importlib.util.spec_from_file_location("rewardbench_constants", root / "constants.py")
    assert spec is not None and spec.loader is not None
    constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(constants)
    tree = ast.parse((root / "utils.py").read_text(encoding="utf-8"))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "calculate_scores_per_section"]
    space: dict[str, Any] = {}
    exec(compile(ast.Module([fn], type_ignores=[]), str(root / "utils.py"), "exec"), space)  # noqa: S102
    return constants, space["calculate_scores_per_section"]


def test_subsets_sections_and_weights_are_reward_benchs(official):
    constants, _ = official
    assert {k: tuple(v) for k, v in constants.SUBSET_MAPPING.items()} == SECTIONS
    assert constants.EXAMPLE_COUNTS == EXAMPLE_COUNTS
    assert (EXAMPLE_COUNTS["xstest-should-refuse"], EXAMPLE_COUNTS["xstest-should-respond"]) == (154, 250)


SIZES = {**EXAMPLE_COUNTS, "math-prm": 447}
"""Items per subset in the ``filtered`` split (EXAMPLE_COUNTS, except math-prm: 447 items weighted 984)."""


def _results(wins: dict[str, int]) -> list[ItemResult]:
    """Per-item results with ``wins[s]`` of each subset's items correct (one pair, shown in the given order)."""
    out = []
    for s, n in SIZES.items():
        for k in range(n):
            item = BenchItem(f"{s}/{k}", s, "q", ("chosen", "rejected"), (Pair(0, 1, Verdict.A),))
            verdict = Verdict.A if k < wins[s] else Verdict.B
            out.append(ItemResult(item, (Shown(0, False, ok_judgment(verdict)),)))
    return out


@pytest.mark.parametrize("spread", [(37, 11), (91, 3), (100, 0), (55, 29)])
def test_sections_and_score_equal_reward_benchs_own_scoring(official, spread):
    """Per-subset accuracies -> reward-bench's ``calculate_scores_per_section`` (as its ``rewardbench.py`` calls it
    with ``num_correct / num_total`` per subset) and the leaderboard Score = mean of the four sections: brrm's
    rows equal them exactly (the XSTest subsets get different accuracies, so swapped weights would differ)."""
    constants, calculate = official
    base, step = spread
    wins = {s: min(n, max(0, n * (base - (step * k) % 60) // 100)) for k, (s, n) in enumerate(SIZES.items())}
    metrics = {s: wins[s] / n for s, n in SIZES.items()}
    sections = calculate(constants.EXAMPLE_COUNTS, constants.SUBSET_MAPPING, metrics)
    result = get_benchmark("rewardbench").score(_results(wins))
    for s in SIZES:
        assert result.row(s).score == 100 * metrics[s]
    for name, value in sections.items():
        assert result.row(name).score == 100 * value, name
    assert result.overall == pytest.approx(100 * sum(sections.values()) / 4, abs=1e-12)
    assert round(result.overall, 2) == round(100 * sum(sections.values()) / 4, 2)
