"""EvalBiasBench (Park et al., 2024, "OffsetBias", arXiv 2407.06551): 80 pairs that bait six judge biases.

Data (ncsoft/offsetbias @ ``0bd16e4``, pinned in ``sources.json``): ``biasbench.json``, an object
keyed by bias type (``length bias`` 17, ``concreteness`` 14, ``empty reference`` 13, ``content_continuation`` 12,
``nested_instruction`` 12, ``familiar knowledge preference bias`` 12), each item ``instruction``, ``response1``,
``response2``, ``label`` (1 for every item: response 1 is the better one, response 2 carries the bait). The
official script reads the file as is (no stripping, unlike its other benchmarks).

Protocol (``run_bench.py`` ``add_inference``): every item is judged twice, in the original order and swapped.
Official metric (``run_bench.py`` ``get_model_statistics``, ``module.py`` ``is_correct``), per bias category:

* ``single_accuracy`` = correct judgments / (2·N): the original order is correct when the prediction equals the
  label; the swapped one when prediction + label == 3 (a tie or an unparsed answer is never correct);
* ``pair_accuracy`` = items correct in both orders / N — the category's score here;
* ``pair_agreement_rate`` = items whose two predictions are consistent across the swap (``{1, 2}``: the same
  response picked in both orders; or ``{3}``: a tie in both) / N — the swap-order consistency.

The script rounds each figure to one decimal and reports per category only; brrm keeps full precision and adds
Overall = the mean of the categories' figures (the paper's average over bias types) with the micro figures over
all items beside it. :meth:`EvalBiasBench.replay` reads the script's result file (``result/<run>/biasbench.json``:
the data object with ``result.orig.prediction`` / ``result.swap.prediction`` per item, 1 A, 2 B, 3 tie, 4 N/A).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from brrm.bench.base import Benchmark, take
from brrm.bench.core import (
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Row,
    Shown,
    group,
    mean,
    percent,
    row,
    stored_judgment,
)
from brrm.bench.data import locate
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, Verdict

CATEGORIES = ("length bias", "concreteness", "empty reference", "content_continuation", "nested_instruction",
              "familiar knowledge preference bias")
"""The bias categories, in the file's order (``SOURCE.md``)."""

FILE = "biasbench.json"
_PREDICTIONS = {1: Verdict.A, 2: Verdict.B, 3: Verdict.TIE}
"""The official prediction codes (``module.py`` ``get_prediction``: 1 A, 2 B, 3 tie, 4 N/A)."""


def figures(results: Sequence[ItemResult]) -> dict[str, float]:
    """One category's official figures in percent: ``single_accuracy``, ``pair_accuracy``,
    ``pair_agreement_rate`` (unrounded; see the module docstring)."""
    single = pair = agree = 0
    for r in results:
        shown = {s.swapped: s for s in r.presentations(0)}
        if len(shown) != 2:
            raise ConfigError("EvalBiasBench's metric needs both presentation orders of every item")
        gold = r.item.pairs[0].gold
        verdicts = [shown[False].verdict, shown[True].verdict]  # both in the item's frame (response1 = A)
        correct = [v is gold for v in verdicts]
        single += sum(correct)
        pair += all(correct)
        agree += (verdicts[0] is verdicts[1] and verdicts[0] in (Verdict.A, Verdict.B, Verdict.TIE))
    n = len(results)
    return {"single_accuracy": percent(single, 2 * n), "pair_accuracy": percent(pair, n),
            "pair_agreement_rate": percent(agree, n)}


class EvalBiasBench(Benchmark):
    """EvalBiasBench: both orders of every pair; per bias category pair accuracy (headline), single accuracy and
    swap-order agreement; Overall = mean over the categories."""

    name = "evalbiasbench"
    title = "EvalBiasBench"
    subsets = CATEGORIES
    order_policy = "both"
    metric_needs_orders = True
    data_folder = "EvalBiasBench"

    def aliases(self) -> dict[str, tuple[str, ...]]:
        out = {c.replace(" ", sep).replace("_", sep): (c,) for c in CATEGORIES for sep in ("-", "_", " ")}
        return {**out, "length": ("length bias",)}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        data = _read(locate(f"EvalBiasBench/{FILE}", root, "EvalBiasBench biasbench.json"))
        return [self.item(c, k, rec) for c in subsets for k, rec in enumerate(take(list(data.get(c, [])), limit))]

    @staticmethod
    def item(category: str, k: int, rec: Mapping[str, Any]) -> BenchItem:
        """A pair item: response1 is A, response2 is B; gold from ``label`` (1 → A, 2 → B); id ``<bias>/<k>``.

        Raises:
            ConfigError: for a missing string field or a label other than 1 or 2.
        """
        where = f"EvalBiasBench {category} item {k}"
        if not all(isinstance(rec.get(f), str) for f in ("instruction", "response1", "response2")):
            raise ConfigError(f"{where}: instruction, response1 and response2 must be strings")
        if rec.get("label") not in (1, 2):
            raise ConfigError(f"{where}: label must be 1 or 2, got {rec.get('label')!r}")
        gold = Verdict.A if rec["label"] == 1 else Verdict.B
        return BenchItem(f"{category}/{k}", category, rec["instruction"], (rec["response1"], rec["response2"]),
                         (Pair(0, 1, gold),), {"bias": category})

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        by_cat = group(results, lambda r: r.item.subset)
        present = [c for c in CATEGORIES if c in by_cat]
        per = {c: figures(by_cat[c]) for c in present}
        rows: list[Row] = [row(c, f["pair_accuracy"], by_cat[c], single=f["single_accuracy"],
                               agreement=f["pair_agreement_rate"]) for c, f in per.items()]
        macro = {k: mean([f[k] for f in per.values()]) for k in ("single_accuracy", "pair_accuracy",
                                                                    "pair_agreement_rate")}
        micro = figures(results) if results else {}
        rows.append(row("Overall", macro["pair_accuracy"], results, single=macro["single_accuracy"],
                        agreement=macro["pair_agreement_rate"],
                        micro_pair_accuracy=micro.get("pair_accuracy"),
                        micro_agreement=micro.get("pair_agreement_rate")))
        notes = ["score = pair accuracy (correct in both orders); agreement = swap-order consistency; a tie or "
                 "an unparsed answer is never correct (run_bench.py); Overall = mean over the categories"]
        if len(present) < len(CATEGORIES):
            notes.append("not every bias category was run: Overall averages the categories present")
        return BenchResult(self.name, "pair accuracy per bias category (%)", tuple(rows), "Overall", tuple(notes))

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over the official script's result files (``result/<run>/biasbench.json``).

        Raises:
            ConfigError: when a file is not that object, or an item lacks its two predictions.
        """
        results = []
        for path in paths:
            for category, rows in _read(path).items():
                if category not in CATEGORIES:
                    raise ConfigError(f"{path}: {category!r} is not an EvalBiasBench category")
                for k, rec in enumerate(rows):
                    item = self.item(category, k, rec)
                    results.append(ItemResult(item, tuple(Shown(0, swapped, _stored(rec, key, item.id, swapped))
                                                          for swapped, key in ((False, "orig"), (True, "swap")))))
        return self.score(results)


def _stored(rec: Mapping[str, Any], key: str, item_id: str, swapped: bool) -> PairwiseJudgment:
    """A stored prediction as a judgment in its presented frame (4 or anything else: a parse failure)."""
    try:
        value = rec["result"][key]["prediction"]
    except (KeyError, TypeError):
        raise ConfigError(f"EvalBiasBench item {item_id!r}: no result.{key}.prediction (not an official result "
                          "file of run_bench.py)") from None
    return stored_judgment(_PREDICTIONS, value, f"prediction {value!r} (official code 4: N/A)", item_id)


def _read(path: Path) -> dict[str, list[Any]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ConfigError(f"{path}: expected an object of bias category -> list of items")
    return data
