"""LLMBar (Zeng et al., ICLR 2024): 419 instruction-following pairs with an objective winner.

Data (princeton-nlp/LLMBar @ ``900616bf``, pinned in ``sources.json``): ``<root>/LLMBar/LLMBar/<subset>/
dataset.json``, a JSON list of ``{input, output_1, output_2, label: 1|2}``; no ties. Natural has 100 pairs
(42 x 1, 58 x 2); the four adversarial subsets have 134 / 92 / 47 / 46.

Official protocol and metric (``LLMEvaluator/evaluate.py``): every evaluator judges each pair twice, as
(O1, O2) and swapped, the swapped winner mapped back; then per subset ``correct_False`` / ``correct_True``
(accuracy of each order), **``correct_average``** (their mean: the paper's Acc.), ``correct_both`` and
``equal`` (both orders name the same winner: the paper's positional agreement), and Cohen's kappas. The paper's
"Adversarial" figure is the mean of the four adversarial subsets' Acc.

Ties and failures, as the official script does: a winner that is not "1"/"2" (unparsed: ``None``; a scalar
model's equal rewards: ``tie``) never equals the label, and two such outcomes are "equal" (string equality,
so two failed orders count as positional agreement — reported apart in ``failures``).
Official kappa is not Cohen's kappa of verdict vs label: it maps winner "1" to 1 and everything else ("2",
unparsed) to 0, then compares with labels 1/2 (``int(w) if w in ("0", "1") else 0``). brrm reproduces it in
``statistics`` (so ``statistics.json`` files replay exactly) and reports the correct kappas in ``kappa``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

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
    row,
    stored_judgment,
)
from brrm.bench.data import DATA_DIR_ENV, default_data_root, locate, read_files, require
from brrm.errors import ConfigError
from brrm.records import LLMBAR_FIELDS, PairRecord, RecordError, read_pair_records
from brrm.types import Verdict

__all__ = ["DATA_DIR_ENV", "LLMBAR_SUBSETS", "LLMBar", "LLMBarFormat", "cohen_kappa", "default_data_root",
           "llmbar_path", "load_llmbar", "official_statistics"]

LLMBAR_SUBSETS = (
    "Natural",
    "Adversarial/Neighbor",
    "Adversarial/GPTInst",
    "Adversarial/GPTOut",
    "Adversarial/Manual",
)
"""The five LLMBar subsets, as folder paths under ``LLMBar/LLMBar/`` (419 pairs together)."""

ADVERSARIAL = LLMBAR_SUBSETS[1:]

_WINNERS = {False: {"1": Verdict.A, "2": Verdict.B}, True: {"1": Verdict.B, "2": Verdict.A}}
"""A stored ``winner`` (``"1"``: output_1 won) as the verdict in the frame shown, by ``swap``."""


def _canonical_subset(subset: str) -> str:
    """Match a subset name exactly, case-insensitively, or by its last part (``neighbor``)."""
    for name in LLMBAR_SUBSETS:
        if subset.lower() in (name.lower(), name.rsplit("/", 1)[-1].lower()):
            return name
    raise ConfigError(f"LLMBar subset {subset!r} is not valid; expected one of {', '.join(LLMBAR_SUBSETS)}")


def llmbar_path(subset: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Path of one subset's ``dataset.json``.

    Raises:
        ConfigError: for an unknown subset (listing the valid ones), or when the file is not there (naming
            the path and ``BRRM_DATA_DIR``).
    """
    name = _canonical_subset(subset)
    return locate(f"LLMBar/LLMBar/{name}/dataset.json", root, f"LLMBar {name}")


def load_llmbar(subset: str, root: str | os.PathLike[str] | None = None) -> list[PairRecord]:
    """Load one LLMBar subset as pairwise records (for ``brrm judge``-style use; benchmarks use :class:`LLMBar`).

    Ids are ``"<subset>/<row>"`` (row 1-based); labels 1 / 2 become ``Verdict.A`` / ``Verdict.B``.

    Raises:
        ConfigError: for an unknown subset, a missing file, or a row that is not a valid record.
    """
    path = llmbar_path(subset, root)
    name = _canonical_subset(subset)
    records: list[PairRecord] = []
    for item in read_pair_records(path, fields=LLMBAR_FIELDS):
        if isinstance(item, RecordError):
            raise ConfigError(f"{path}: {item.reason}")
        records.append(dataclasses.replace(item, id=f"{name}/{item.line}"))
    return records


_Label = TypeVar("_Label", int, str)


def cohen_kappa(y1: Sequence[_Label], y2: Sequence[_Label]) -> float:
    """Cohen's kappa of two label sequences, computed as ``sklearn.metrics.cohen_kappa_score`` does (the same
    confusion matrix, expected matrix and weights, so values match it bit for bit); NaN when undefined.

    Raises:
        ConfigError: on sequences of different lengths.
    """
    import numpy as np

    if len(y1) != len(y2):
        raise ConfigError(f"kappa needs sequences of one length, got {len(y1)} and {len(y2)}")
    labels = sorted(set(y1) | set(y2))
    index = {v: k for k, v in enumerate(labels)}
    n = len(labels)
    confusion = np.zeros((n, n), dtype=np.int64)
    for a, b in zip(y1, y2, strict=True):
        confusion[index[a], index[b]] += 1
    sum0, sum1 = np.sum(confusion, axis=0), np.sum(confusion, axis=1)
    expected = np.outer(sum0, sum1) / np.sum(sum0)
    weights = np.ones([n, n], dtype=int)
    weights.flat[:: n + 1] = 0
    denominator = np.sum(weights * expected)
    return float(1 - np.sum(weights * confusion) / denominator) if denominator else math.nan


def _winner(verdict: Verdict) -> str | None:
    """An LLMBar winner string: "1", "2", None (no verdict) or "tie" (a scalar model's equal rewards)."""
    return {Verdict.A: "1", Verdict.B: "2", Verdict.TIE: "tie"}.get(verdict)


def official_statistics(labels: Sequence[str], first: Sequence[str | None],
                        second: Sequence[str | None]) -> dict[str, str | float]:
    """``statistics.json`` as ``LLMEvaluator/evaluate.py`` writes it (same keys, same string formats).

    Args:
        labels: gold winners ("1"/"2"), one per pair.
        first, second: winners of the ``swap = False`` and ``swap = True`` runs, in the original numbering.
    """
    n = len(labels)
    c_f = sum(f == y for f, y in zip(first, labels, strict=True))
    c_t = sum(t == y for t, y in zip(second, labels, strict=True))
    both = sum(f == y and t == y for f, t, y in zip(first, second, labels, strict=True))
    equal = sum(f == t for f, t in zip(first, second, strict=True))
    stats: dict[str, str | float] = {
        "correct_False": f"{c_f} / {n} = {c_f / n * 100}%",
        "correct_True": f"{c_t} / {n} = {c_t / n * 100}%",
        "correct_average": f"{(c_f + c_t) / 2 / n * 100}%",
        "correct_both": f"{both} / {n} = {both / n * 100}%",
        "equal": f"{equal} / {n} = {equal / n * 100}%",
    }
    as_int = [int(y) for y in labels]
    k_f = [int(w) if w in ("0", "1") else 0 for w in first]
    k_t = [int(w) if w in ("0", "1") else 0 for w in second]
    kappa_f, kappa_t = cohen_kappa(k_f, as_int), cohen_kappa(k_t, as_int)
    stats["kappa_False"], stats["kappa_True"] = kappa_f, kappa_t
    stats["kappa_average"] = (kappa_f + kappa_t) / 2
    stats["kappa_agreement"] = cohen_kappa(k_f, k_t)
    return stats


def subset_row(name: str, results: Sequence[ItemResult]) -> Row:
    """One subset's row: score = ``correct_average`` (%), with the other official figures in ``extra``."""
    labels = [_winner(r.item.pairs[0].gold) or "" for r in results]
    orders = [[_winner(s.verdict) for s in r.presentations(0)] for r in results]
    if any(len(o) != 2 for o in orders):
        raise ConfigError("LLMBar's metric needs both presentation orders of every pair")
    first, second = [o[0] for o in orders], [o[1] for o in orders]
    n = len(results)
    c_f = sum(f == y for f, y in zip(first, labels, strict=True))
    c_t = sum(t == y for t, y in zip(second, labels, strict=True))
    both = sum(f == y and t == y for f, t, y in zip(first, second, labels, strict=True))
    equal = sum(f == t for f, t in zip(first, second, strict=True))
    norm = [[w or "none" for w in ws] for ws in (first, second)]
    return row(name, (c_f + c_t) / 2 / n * 100, results, correct_False=c_f / n * 100, correct_True=c_t / n * 100,
               correct_both=both / n * 100, equal=equal / n * 100,
               kappa={"False": cohen_kappa(norm[0], labels), "True": cohen_kappa(norm[1], labels),
                      "agreement": cohen_kappa(norm[0], norm[1])},
               statistics=official_statistics(labels, first, second))


class LLMBarFormat(Benchmark):
    """A set in LLMBar's ``dataset.json`` format, run and scored with LLMBar's protocol and metric.

    Attributes:
        folders: subset name -> folder under the data root holding ``dataset.json``.
    """

    order_policy = "both"
    metric_needs_orders = True
    folders: dict[str, str] = {}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        items: list[BenchItem] = []
        for subset in subsets:
            path = locate(f"{self.folders[subset]}/dataset.json", root, f"{self.title} {subset}")
            items += [self.item(subset, k, rec, where=f"{path} row {k}")
                      for k, rec in enumerate(take(read_files([path]), limit), start=1)]
        return items

    @staticmethod
    def item(subset: str, k: int, rec: dict[str, Any], *, where: str) -> BenchItem:
        """A pair item from one LLMBar-format record (id ``<subset>/<row>``, row 1-based as in ``load_llmbar``).

        Raises:
            ConfigError: for a label other than 1 or 2, or a missing field.
        """
        label = str(rec.get("label"))
        if label not in ("1", "2") or not all(isinstance(rec.get(f), str) for f in ("input", "output_1", "output_2")):
            raise ConfigError(f"{where}: expected input/output_1/output_2 strings and label 1 or 2")
        gold = Verdict.A if label == "1" else Verdict.B
        return BenchItem(f"{subset}/{k}", subset, rec["input"], (rec["output_1"], rec["output_2"]),
                         (Pair(0, 1, gold),))

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        by_subset = group(results, lambda r: r.item.subset)
        rows = [subset_row(name, by_subset[name]) for name in self.subsets if name in by_subset]
        rows += self.aggregates(rows, results)
        headline = rows[-1].name if len(rows) > len(by_subset) else rows[0].name
        return BenchResult(self.name, "accuracy averaged over both presentation orders (correct_average, %)",
                           tuple(rows), headline)

    def aggregates(self, rows: list[Row], results: Sequence[ItemResult]) -> list[Row]:
        """Aggregate rows after the subset rows (none by default)."""
        return []

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over official ``result.json`` files (``<subset>/<LLM>/<strategy>/result.json``): one row
        per file, named ``<subset> <LLM>/<strategy>``, its ``extra["statistics"]`` comparable with the sibling
        ``statistics.json``."""
        rows = []
        for path in paths:
            name = self._replay_name(Path(path))
            rows.append(subset_row(name, [self._replayed(name, k, rec) for k, rec in
                                          enumerate(self._official_rows(Path(path)), start=1)]))
        return BenchResult(self.name, "accuracy averaged over both presentation orders (correct_average, %)",
                           tuple(rows), rows[-1].name)

    @staticmethod
    def _official_rows(path: Path) -> list[dict[str, Any]]:
        require(path, "LLMBar result file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not an LLMBar result.json (not one JSON document: {exc.msg}); a brrm "
                              "judgments.jsonl is replayed from a `brrm bench --output` folder") from None
        if not isinstance(data, list) or not all(isinstance(r, dict) and "results" in r for r in data):
            raise ConfigError(f"{path}: not an LLMBar result.json (a list of records with 'results')")
        return data

    def _replay_name(self, path: Path) -> str:
        text, evaluator = path.as_posix(), "/".join(path.parts[-3:-1])
        subset = next((s for s in self.subsets if f"/{s}/" in text), "/".join(path.parts[-5:-3]))
        return f"{subset} {evaluator}"

    @staticmethod
    def _replayed(name: str, k: int, rec: dict[str, Any]) -> ItemResult:
        results = rec["results"]
        last = (ast.literal_eval(results) if isinstance(results, str) else results)[-1]
        item = LLMBarFormat.item(name, k, {**rec, "label": str(rec["label"])}, where=f"{name} row {k}")
        shown = []
        for swapped in (False, True):
            winner = last[f"swap = {swapped}"]["winner"]
            shown.append(Shown(0, swapped, stored_judgment(_WINNERS[swapped], winner, f"stored winner {winner!r}",
                                                           item.id)))
        return ItemResult(item, tuple(shown))


class LLMBar(LLMBarFormat):
    """LLMBar: Natural and the four Adversarial subsets; the "Adversarial" row is the paper's mean of four."""

    name = "llmbar"
    title = "LLMBar"
    subsets = LLMBAR_SUBSETS
    data_folder = "LLMBar"
    folders = {s: f"LLMBar/LLMBar/{s}" for s in LLMBAR_SUBSETS}

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"adversarial": ADVERSARIAL}

    def aggregates(self, rows: list[Row], results: Sequence[ItemResult]) -> list[Row]:
        adv = [r for r in rows if r.name in ADVERSARIAL]
        if len(adv) != len(ADVERSARIAL):
            return []
        pooled = [r for r in results if r.item.subset in ADVERSARIAL]
        return [row("Adversarial", mean([r.score for r in adv]), pooled, rule="mean of the four subsets' Acc.")]
