"""PandaLM test set (Wang et al., ICLR 2024): 999 human-annotated pairs with ties.

Data (WeOpenML/PandaLM @ ``3871806``, pinned in ``sources.json``): ``testset-v1.json`` with
``instruction``, ``input``, ``response1``, ``response2`` and three annotators' labels (1 = response 1 better,
2 = response 2, 0 = tie). The gold label is the annotators' majority vote (every item has one; the README's
label counts 105 / 422 / 472 are exactly those votes).

Metric: the repository has no evaluation script; the paper reports accuracy and macro precision / recall / F1
of the 3-way decision (1 / 2 / tie) against the human labels. brrm computes those over the classes {1, 2, tie}
(a judgment without a verdict — GPT-3.5's "garbage" outputs — is wrong and belongs to no class, as
``sklearn``'s ``precision_recall_fscore_support(…, labels=[0, 1, 2], average="macro")`` would count it).
The released result files reproduce GPT-3.5 acc 69.77 / F1 52.74 and PandaLM-7B acc 66.77 / F1 57.43; they do
**not** reproduce the README's "93.75% of GPT-3.5's F1" (the published table used other runs or conventions).

Protocol: the test set's order (response 1 shown first), as the released judge outputs were made;
``orders="both"`` judges both orders and a disagreement becomes a tie (a valid PandaLM label). The prompt is the
instruction followed by a blank line and the input when the input is not empty.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brrm.bench.base import Benchmark, take
from brrm.bench.core import (
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Shown,
    failed_judgment,
    ok_judgment,
    pair_row,
    percent,
)
from brrm.bench.data import locate, read_files, require
from brrm.errors import ConfigError
from brrm.records.duplicates import duplicate_ids
from brrm.types import Status, Verdict

LABELS = {1: Verdict.A, 2: Verdict.B, 0: Verdict.TIE}
"""PandaLM's annotator labels as verdicts (response 1 = A)."""

_STORED = {"1": Verdict.A, "2": Verdict.B, "Tie": Verdict.TIE, 1: Verdict.A, 2: Verdict.B, 0: Verdict.TIE}
"""Verdicts of the released result files (``gpt_result`` strings, ``pandalm_result`` ints)."""


def majority(rec: dict[str, Any]) -> Verdict:
    """The annotators' majority label.

    Raises:
        ConfigError: when the three annotators all differ or a label is not 0/1/2.
    """
    votes = [rec.get(f"annotator{k}") for k in (1, 2, 3)]
    if any(v not in LABELS for v in votes):
        raise ConfigError(f"PandaLM idx {rec.get('idx')!r}: annotator labels must be 0, 1 or 2, got {votes}")
    value, count = Counter(int(v) for v in votes if v is not None).most_common(1)[0]
    if count < 2:
        raise ConfigError(f"PandaLM idx {rec.get('idx')!r}: no majority among annotators {votes}")
    return LABELS[value]


def macro_prf(gold: Sequence[Verdict], predicted: Sequence[Verdict]) -> tuple[float, float, float]:
    """Macro precision, recall and F1 over the classes A, B, tie (fractions; an undefined ratio counts 0)."""
    p_sum = r_sum = f_sum = 0.0
    for c in (Verdict.A, Verdict.B, Verdict.TIE):
        tp = sum(g is c and p is c for g, p in zip(gold, predicted, strict=True))
        npred, ngold = sum(p is c for p in predicted), sum(g is c for g in gold)
        p = tp / npred if npred else 0.0
        r = tp / ngold if ngold else 0.0
        p_sum, r_sum, f_sum = p_sum + p, r_sum + r, f_sum + (2 * p * r / (p + r) if p + r else 0.0)
    return p_sum / 3, r_sum / 3, f_sum / 3


def _idx(rec: dict[str, Any], path: Path) -> int:
    """A stored result's ``idx`` as an integer.

    Raises:
        ConfigError: naming the file and the value when it is missing or not an integer.
    """
    value = rec.get("idx")
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: a record's idx {value!r} is not an integer") from None


class PandaLM(Benchmark):
    """PandaLM: 3-way accuracy and macro P/R/F1 against the annotators' majority."""

    name = "pandalm"
    title = "PandaLM"
    subsets = ("testset-v1",)
    order_policy = "given"
    data_folder = "PandaLM"

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        path = locate("PandaLM/testset-v1.json", root, "PandaLM test set")
        return [self.item(rec) for rec in take(read_files([path]), limit)]

    @staticmethod
    def item(rec: dict[str, Any]) -> BenchItem:
        """One pair (response1 = A); id ``pandalm/<idx>``."""
        prompt = rec["instruction"] + (f"\n\n{rec['input']}" if rec.get("input") else "")
        return BenchItem(f"pandalm/{int(rec['idx'])}", "testset-v1", prompt, (rec["response1"], rec["response2"]),
                         (Pair(0, 1, majority(rec)),), {"idx": int(rec["idx"]), "cmp_key": rec.get("cmp_key", "")})

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        gold = [r.item.pairs[0].gold for r in results]
        pred = [r.verdict(0) for r in results]
        correct = sum(g is p for g, p in zip(gold, pred, strict=True))
        precision, recall, f1 = macro_prf(gold, pred)
        rows = (pair_row("Overall", percent(correct, len(results)), results, correct=correct,
                    macro_precision=100 * precision, macro_recall=100 * recall, macro_f1=100 * f1),
                pair_row("Macro-F1", 100 * f1, results))
        return BenchResult(self.name, "3-way accuracy vs the annotators' majority (%), macro F1", rows, "Overall",
                           ("a tie is a label here: it is correct when the annotators' majority is a tie; a judgment "
                            "without a verdict is wrong and in no class",))

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over a released result file (``gpt_result`` or ``pandalm_result`` per ``idx``).

        Raises:
            ConfigError: for a file in another format, an ``idx`` not in the test set, or ``idx`` values that repeat
                in the file or the test set (the replay joins by ``idx``; naming each repeated value and its count).
        """
        if len(paths) != 1:
            raise ConfigError("PandaLM replay takes one result file")
        loaded = self.load(self.subsets, root=root)
        join = "the replay joins each stored result to its test sample by idx, so each idx must be unique"
        duplicate_ids((it.meta_int("idx") for it in loaded), what="idx values").refuse("PandaLM test set", join)
        items = {it.meta["idx"]: it for it in loaded}
        rows = json.loads(require(Path(paths[0]), "PandaLM result file").read_text(encoding="utf-8"))
        if not isinstance(rows, list) or not all(isinstance(rec, dict) for rec in rows):
            raise ConfigError(f"{paths[0]}: expected a JSON list of records with idx and gpt_result or pandalm_result")
        key = next((k for k in ("gpt_result", "pandalm_result") if rows and k in rows[0]), None)
        if key is None:
            raise ConfigError(f"{paths[0]}: expected records with gpt_result or pandalm_result")
        duplicate_ids((_idx(rec, paths[0]) for rec in rows), what="idx values").refuse(str(paths[0]), join)
        results = []
        for rec in rows:
            item = items.get(_idx(rec, paths[0]))
            if item is None:
                raise ConfigError(f"{paths[0]}: idx {rec['idx']!r} is not in the test set")
            value = rec.get(key)
            known = isinstance(value, int | str) and not isinstance(value, bool) and value in _STORED  # [1]: unknown
            judged = (ok_judgment(_STORED[value], item.id) if known
                      else failed_judgment(Status.PARSE_FAILURE, f"stored {key} {value!r}", item.id))
            results.append(ItemResult(item, (Shown(0, False, judged),)))
        return self.score(results)
