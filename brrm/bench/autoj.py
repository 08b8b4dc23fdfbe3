"""Auto-J Eval-P (Li et al., ICLR 2024): 1,392 pairs in 58 scenarios, human labels with ties.

Data (GAIR-NLP/auto-j @ ``2ae17a3``, pinned in ``sources.json``): ``testdata_pairwise.jsonl``
(``scenario``, ``label`` 0 = response 1 better / 1 = response 2 / 2 = tie, ``prompt``, ``response 1``,
``response 2``) and ``scenario_group.json`` (the 8 groups of ``codes/leaderboard/utils_constants.py``).

Official metric (``codes/leaderboard/pairwise_eval.py``), per group and Overall (micro over samples):

* type "pairwise" (a judge that sees both responses in one prompt: brrm's pairwise judges): both orders are
  judged; **agreement** = share of samples where the prediction on the original order, the swapped-back
  prediction on the exchanged order and the human label are all equal; **consistency** = share where the two
  predictions are equal.
* type "single" (responses rated independently: brrm's scalar reward models): **agreement** = share of
  prediction == label on the original order; no consistency. A tie is predicted when |r_1 − r_2| ≤ the judge's
  ``margin`` (the README searched this threshold on the test set itself, in [0, 2] by 0.01; brrm takes it as
  an option instead of tuning on test data).

Ties are labels: a judge that never says "tie" (BR-RM) cannot be right on the 373 tie samples. The official
script asserts that every prediction is 0, 1 or 2; brrm scores a failed judgment as matching nothing (wrong, and
position-inconsistent) and reports it apart. Figures are rounded to 2 decimals as the script prints them
(``extra["official"]``); ``score`` keeps full precision.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from brrm.bench.base import Benchmark, take
from brrm.bench.core import (
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Row,
    Shown,
    group,
    percent,
    row,
    stored_judgment,
)
from brrm.bench.data import locate, read_files, require
from brrm.errors import ConfigError
from brrm.types import Verdict
from brrm.types.jsonvalue import JSONValue

LABELS = {0: Verdict.A, 1: Verdict.B, 2: Verdict.TIE}
"""Auto-J's labels and outputs (in the frame shown) as verdicts."""

_PRED = {Verdict.A: 0, Verdict.B: 1, Verdict.TIE: 2}


def groups(root: str | os.PathLike[str] | None = None) -> dict[str, list[str]]:
    """Group -> scenarios, in the official order (``scenario_group.json``).

    Raises:
        ConfigError: when the file is missing.
    """
    path = locate("AutoJ-EvalP/scenario_group.json", root, "Auto-J scenario groups")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): list(v) for k, v in data.items()}


def _prediction(shown: Shown) -> int | None:
    """An Auto-J prediction in the original frame (0, 1, 2), None without a verdict."""
    return _PRED.get(shown.verdict)


def _counts(results: Sequence[ItemResult], pairwise: bool) -> tuple[int, int]:
    """(agreeing samples, position-consistent samples) under the official rule of the type."""
    agree = consistent = 0
    for r in results:
        label = _PRED[r.item.pairs[0].gold]
        shown = {s.swapped: s for s in r.presentations(0)}
        pred = _prediction(shown[False])
        if not pairwise:
            agree += pred == label
            continue
        exchanged = _prediction(shown[True])
        same = pred is not None and pred == exchanged
        consistent += same
        agree += same and pred == label
    return agree, consistent


class AutoJ(Benchmark):
    """Auto-J Eval-P: agreement (and consistency for pairwise judges) per scenario group and Overall."""

    name = "autoj"
    title = "Auto-J Eval-P"
    subsets = ("Summarization", "Exam Questions", "Code", "Rewriting", "Creative Writing", "Functional Writing",
               "General Communication", "NLP Tasks")
    order_policy = "both"
    data_folder = "AutoJ-EvalP"
    metric_needs_orders = True

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        items = self._all(root)
        return [it for s in subsets for it in take([x for x in items if x.subset == s], limit)]

    def _all(self, root: str | os.PathLike[str] | None) -> list[BenchItem]:
        group_of = {scenario: name for name, scenarios in groups(root).items() for scenario in scenarios}
        path = locate("AutoJ-EvalP/testdata_pairwise.jsonl", root, "Auto-J Eval-P test set")
        items = []
        for k, rec in enumerate(read_files([path]), start=1):
            if rec.get("label") not in LABELS or rec.get("scenario") not in group_of:
                raise ConfigError(f"{path} line {k}: label must be 0, 1 or 2 and scenario one of the 58 scenarios")
            items.append(BenchItem(f"autoj/{k}", group_of[rec["scenario"]], rec["prompt"],
                                   (rec["response 1"], rec["response 2"]), (Pair(0, 1, LABELS[rec["label"]]),),
                                   {"scenario": rec["scenario"], "line": k}))
        return items

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        pairwise = all(not r.scalar and len(r.presentations(0)) == 2 for r in results)
        by_group = group(results, lambda r: r.item.subset)
        rows: list[Row] = []
        for name, part in [*((g, by_group[g]) for g in self.subsets if g in by_group), ("Overall", results)]:
            agree, consistent = _counts(part, pairwise)
            n = len(part)
            official = {"agreement": round(100 * agree / float(n), 2),
                        "consistency": round(100 * (1 - (n - consistent) / float(n)), 2) if pairwise else "-"}
            rows.append(row(name, percent(agree, n), part, consistency=percent(consistent, n) if pairwise else None,
                            official=official))
        kind = "pairwise" if pairwise else "single"
        return BenchResult(self.name, f"agreement with human labels (%), type {kind!r}", tuple(rows), "Overall",
                           (f"type {kind!r}: " + ("a sample agrees only when both orders equal the label (ties "
                                                 "included); consistency = both orders agree" if pairwise else
                                                 "the original order's prediction vs the label; ties come from the "
                                                 "judge's margin"),))

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over official prediction files: one (type "single") or two (type "pairwise": the original
        order, then the exchanged order in its own frame), each one ``{"output": 0|1|2}`` per test sample.

        Raises:
            ConfigError: for more than two files, a length other than the test set's, or an output not in 0/1/2.
        """
        if not 1 <= len(paths) <= 2:
            raise ConfigError("Auto-J replay takes one prediction file (type single) or two (original order, then "
                              "exchanged order: type pairwise)")
        items = self._all(root)
        columns = [self._outputs(Path(p), len(items)) for p in paths]
        results = []
        for k, item in enumerate(items):
            shown = tuple(Shown(0, swapped, stored_judgment(LABELS, col[k], f"stored output {col[k]!r}", item.id))
                          for swapped, col in zip((False, True), columns, strict=False))
            results.append(ItemResult(item, shown))
        return self.score(results)

    @staticmethod
    def _outputs(path: Path, n: int) -> list[JSONValue]:
        lines = [ln for ln in require(path, "Auto-J prediction file").read_text(encoding="utf-8").splitlines()
                 if ln.strip()]
        if len(lines) != n:
            raise ConfigError(f"{path}: {len(lines)} predictions for {n} test samples")
        return [json.loads(ln).get("output") for ln in lines]
