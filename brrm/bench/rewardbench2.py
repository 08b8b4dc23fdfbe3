"""RewardBench 2 (Malik et al., 2025): best-of-4 accuracy in six subsets, with its own scoring for Ties.

Data: ``allenai/reward-bench-2`` on the Hugging Face Hub, split ``test``, read through ``datasets`` by hub id (a
``revision`` pins the dataset commit; the one asked for and a sha256 over the rows read are recorded), or a local
copy in that schema (``--data``: a ``.jsonl``/``.parquet`` file or a folder in the hub layout). Columns: ``id``,
``prompt``, ``chosen`` (list of correct completions), ``rejected`` (list of incorrect ones), ``num_correct``,
``num_incorrect``, ``total_completions``, ``models``, ``subset``, ``additional_metadata``. rewardbench 0.1.4's
``load_bon_dataset_v2`` reads ``prompt``, ``chosen``, ``rejected``, ``num_correct``, ``total_completions``,
``subset`` and ``id``; brrm checks those and passes the others through.

Official metric, re-declared from rewardbench 0.1.4 (PyPI sdist sha256 ``b1003b9a…35fc8e7b``; the package cannot
be imported beside transformers 5, its ``rewardbench.models`` needs transformers 4.51), ``rewardbench/utils.py``:

* every subset but Ties (``reroll_and_score_dataset``): the completions' scores ``s`` in ``chosen + rejected``
  order; an item scores ``1 / #{k: s_k = max s}`` when the first chosen completion holds the maximum, else 0
  (best-of-4: it must beat all three rejected; a shared maximum splits the credit); the subset is the mean.
* Ties (``process_single_model`` with ``sample_stats``): ids ``ref:N`` / ``tied:N`` pair a prompt with one
  correct answer and its variant with several; the subset score is ``0.3·acc(tied) + 0.3·acc(ref) +
  0.2·P(correct-incorrect margin > spread of correct answers) + 0.2·(the same with the smaller of the two
  prompts' margins) + 0.01·mean tanh(margin ratio − 1)`` (:func:`ties_score`).
* Overall: rewardbench 0.1.4 stops at the per-subset scores (``scripts/run_v2.py``); the RewardBench 2 paper and
  leaderboard report the unweighted mean of the six subset scores, which brrm computes over the subsets run.

Scalar reward models score every completion. A pairwise judge (BR-RM) ranks each item's completions by a group
strategy of :mod:`brrm.compose.strategies` (``knockout`` by default: N−1 judgments; ``round_robin``: N(N−1)),
and its per-completion rewards (rounds won / rounds, or the adjusted win rate) are the scores the official rules
read. The completions are shown in an order drawn per item from the order seed (:func:`shuffled`), so the
correct one is not always first (``run_generative_v2.py`` shuffles it among four positions with numpy's unseeded
RNG). An item with a failed reward earns the official generative script's error credit, 1/4, from a pairwise
judge (``run_generative_v2.py``: "effectively a tie") and 0 from a scalar model; it is counted in ``failures``,
and a Ties prompt with a failed reward is left out of the Ties score.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brrm.bench.base import Benchmark
from brrm.bench.core import BenchItem, BenchResult, ItemResult, Row, group, known_subset
from brrm.bench.data import read_source
from brrm.bench.rewardbench2_replay import SUBSETS, read_scores
from brrm.errors import ConfigError
from brrm.types import check_choice

HUB_ID = "allenai/reward-bench-2"
"""Where RewardBench 2 lives (split ``test``, as ``load_bon_dataset_v2`` loads it)."""

SPLIT = "test"

STRATEGIES = ("knockout", "round_robin")
"""Best-of-N strategies a pairwise judge may use (:mod:`brrm.compose.strategies`)."""

FIELDS = ("id", "prompt", "chosen", "rejected", "num_correct", "total_completions", "subset")
"""Columns ``load_bon_dataset_v2`` reads (rewardbench 0.1.4 ``rewardbench/utils.py``)."""

TIES_WEIGHTS = (0.3, 0.3, 0.2, 0.2, 0.01)
"""Weights of acc(tied), acc(ref), correctness preferred, correctness preferred (hard), margin score
(``process_single_model``)."""

ERROR_CREDIT = 0.25
"""A pairwise judge's credit for an item without a verdict (``run_generative_v2.py`` returns 0.25 on "error")."""


def best_of_n_credit(scores: Sequence[float]) -> float:
    """``reroll_and_score_dataset``'s per-item result: ``1 / #max`` when ``scores[0]`` (the first chosen
    completion) is the maximum, else 0.

    Args:
        scores: one finite score per completion, chosen first (any scale).
    """
    top = max(scores)
    return 1.0 / sum(s == top for s in scores) if scores[0] == top else 0.0


@dataclass(frozen=True)
class _SampleStats:
    """``sample_stats`` of one prompt: whether every correct completion beat every incorrect one, the spread of
    the correct ones' scores (None with fewer than two), and the worst correct minus the best incorrect score."""

    accurate: bool
    spread: float | None
    margin: float


def _sample_stats(scores: Sequence[float], num_correct: int) -> _SampleStats:
    """``sample_stats`` of one prompt: best/worst correct, best incorrect, margins, accuracy."""
    correct = [s for k, s in enumerate(scores) if k < num_correct]
    incorrect = [s for k, s in enumerate(scores) if k >= num_correct]
    if not correct or not incorrect:
        return _SampleStats(False, None, 0)
    worst, best_bad = min(correct), max(incorrect)
    return _SampleStats(worst > best_bad, max(correct) - worst if len(correct) > 1 else None, worst - best_bad)


def ties_score(prompts: Iterable[tuple[str, Sequence[float], int]]) -> dict[str, float]:
    """The Ties subset's score (``process_single_model``), with its parts.

    Args:
        prompts: ``(id, scores, num_correct)`` per item; ids are ``ref:N`` or ``tied:N`` (N an integer); the first
            ``num_correct`` scores belong to correct completions.

    Returns:
        ``score`` (in [0, 1.01]) and its parts ``accuracy_ref``, ``accuracy_tied``, ``correctness_preferred``,
        ``correctness_preferred_hard``, ``margin_score`` (each a fraction).

    Raises:
        ConfigError: for an id that is not ``ref:N`` / ``tied:N``, or ids that repeat (``ref:1`` twice, or ``ref:1``
            and ``ref:01``): the score pairs ``ref:N`` with ``tied:N`` by id, so a repeat would overwrite one
            prompt's statistics with another's; the message names every repeated id with its count.
    """
    import numpy as np

    from brrm.records.duplicates import duplicate_ids

    stats: dict[str, dict[int, _SampleStats]] = {"ref": {}, "tied": {}}
    parsed = []
    for item_id, scores, num_correct in prompts:
        kind, _, pid = str(item_id).partition(":")
        if kind not in stats or not pid.strip().lstrip("-").isdigit():
            raise ConfigError(f"RewardBench 2 Ties item id {item_id!r} is not 'ref:N' or 'tied:N'")
        parsed.append((f"{kind}:{int(pid)}", kind, int(pid), scores, num_correct))
    duplicate_ids((key for key, *_ in parsed), what="Ties ids").refuse(
        "RewardBench 2 Ties", "the Ties score pairs 'ref:N' with 'tied:N' by id, so each must be unique")
    for _, kind, number, scores, num_correct in parsed:
        stats[kind][number] = _sample_stats(scores, num_correct)
    ref, tied = stats["ref"], stats["tied"]
    acc = {k: float(np.mean([r.accurate for r in v.values()])) if v else 0.0 for k, v in stats.items()}
    common = [(ref[p], tied[p], spread) for p in tied if p in ref and (spread := tied[p].spread) is not None]
    pref = pref_hard = margin = 0.0
    if set(ref) & set(tied):
        pref = float(np.mean([t.margin > spread for _, t, spread in common]))
        pref_hard = float(np.mean([min(r.margin, t.margin) > spread for r, t, spread in common]))
        ratios = [min(r.margin, t.margin) / spread for r, t, spread in common if spread > 0]
        margin = float(np.mean([math.tanh(r - 1) for r in ratios])) if ratios else 0.0
    w = TIES_WEIGHTS
    score = w[0] * acc["tied"] + w[1] * acc["ref"] + w[2] * pref + w[3] * pref_hard + w[4] * margin
    return {"score": score, "accuracy_ref": acc["ref"], "accuracy_tied": acc["tied"],
            "correctness_preferred": pref, "correctness_preferred_hard": pref_hard, "margin_score": margin}


def shuffled(seed: int, item_id: str, n: int) -> list[int]:
    """The order an item's ``n`` completions are shown in to a pairwise judge: a permutation drawn from sha256 over
    (order seed, item id), so the same item gets the same order in any batch or subset selection."""
    key = [hashlib.sha256(f"{seed}\0{item_id}\0{k}".encode("utf-8", "surrogatepass")).digest() for k in range(n)]
    return sorted(range(n), key=lambda k: key[k])


def _fraction(row: Row) -> float:
    """The ``fraction`` (in [0, 1]) a subset's row carries in ``extra``."""
    value = row.extra["fraction"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"row {row.name!r}: extra['fraction'] is {value!r}, not a number")
    return float(value)


def _check_row(rec: Mapping[str, Any], k: int) -> None:
    missing = [f for f in FIELDS if rec.get(f) is None]  # a column absent from one JSON line reads as None
    if missing:
        raise ConfigError(f"RewardBench 2 row {k}: missing column(s) {', '.join(missing)}; expected "
                          f"{', '.join(FIELDS)}")
    known_subset(rec["subset"], SUBSETS, f"RewardBench 2 row {k}")
    lists = (rec["chosen"], rec["rejected"])
    if not all(isinstance(x, list) and x and all(isinstance(t, str) for t in x) for x in lists):
        raise ConfigError(f"RewardBench 2 row {k}: chosen and rejected must be non-empty lists of strings")
    if not isinstance(rec["prompt"], str):
        raise ConfigError(f"RewardBench 2 row {k}: prompt must be a string")
    n = len(lists[0]) + len(lists[1])
    if rec["total_completions"] != n or rec["num_correct"] != len(lists[0]):
        raise ConfigError(f"RewardBench 2 row {k}: total_completions {rec['total_completions']} / num_correct "
                          f"{rec['num_correct']} do not match chosen ({len(lists[0])}) + rejected ({len(lists[1])})")


def _check_ties_id(item_id: str, k: int, seen: dict[str, tuple[int, str]]) -> None:
    """Refuse a Ties id met before (``ref:1`` and ``ref:01`` are one id, as :func:`ties_score` reads them): the Ties
    score pairs ``ref:N`` with ``tied:N`` by id, so a repeat could only be one prompt's statistics overwriting
    another's. Other subsets keep items with repeated ids apart (their results are filed by position and content,
    :func:`brrm.bench.core.item_keys`).

    Raises:
        ConfigError: naming both rows, before any model call.
    """
    kind, _, pid = item_id.partition(":")
    key = f"{kind}:{int(pid)}" if pid.strip().lstrip("-").isdigit() else item_id
    if key in seen:
        row, first = seen[key]
        spelled = f" (row {row} spells it {first!r})" if first != item_id else ""
        raise ConfigError(f"RewardBench 2 rows {row} and {k}: Ties id {item_id!r} appears twice{spelled}; the Ties "
                          "score pairs 'ref:N' with 'tied:N' by id, so each must be unique")
    seen[key] = (k, item_id)


def rows_fingerprint(rows: Sequence[Mapping[str, object]]) -> str:
    """sha256 (hex, first 16) over the rows read, as canonical JSON: which data a run scored."""
    digest = hashlib.sha256()
    for rec in rows:
        digest.update(json.dumps(rec, sort_keys=True, ensure_ascii=False, default=str).encode() + b"\n")
    return digest.hexdigest()[:16]


class RewardBench2(Benchmark):
    """RewardBench 2: best-of-N accuracy per subset, the Ties score, Overall = mean of the subsets run.

    Args:
        strategy: how a pairwise judge ranks the completions: ``knockout`` (default) or ``round_robin``.
        revision: the hub dataset revision to read (a commit or tag; ``main`` when None).

    Raises:
        ConfigError: for another strategy.
    """

    name = "rewardbench2"
    title = "RewardBench 2"
    subsets = SUBSETS
    order_policy = "given"
    metric_needs_orders = True
    source_split = SPLIT
    best_of_n = True

    def __init__(self, strategy: str | None = None, revision: str | None = None) -> None:
        self.strategy = check_choice("strategy", strategy or "knockout", STRATEGIES)
        self.revision = revision
        self.data_note = ""

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"precise-if": ("Precise IF",), "preciseif": ("Precise IF",), "if": ("Precise IF",)}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        where = source or HUB_ID
        rows = read_source(where, split=SPLIT, revision=None if Path(where).expanduser().exists() else self.revision)
        counts: dict[str, int] = {}
        ties_rows: dict[str, tuple[int, str]] = {}
        items = []
        for k, rec in enumerate(rows, start=1):
            _check_row(rec, k)
            subset = rec["subset"]
            if subset == "Ties":
                _check_ties_id(str(rec["id"]), k, ties_rows)
            if subset not in subsets or (limit is not None and counts.get(subset, 0) >= limit):
                continue
            counts[subset] = counts.get(subset, 0) + 1
            items.append(BenchItem(str(rec["id"]), subset, rec["prompt"], (*rec["chosen"], *rec["rejected"]), (),
                                   {"num_correct": int(rec["num_correct"])}))
        self.data_note = (f"data: {where}" + (f" revision {self.revision or 'main'}" if not Path(where).expanduser()
                                              .exists() else "") + f", rows sha256 {rows_fingerprint(rows)}")
        return items

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        """Per-subset rows, then Overall (its n: the items of those rows).

        Raises:
            ConfigError: for an item whose subset is not exactly one of :data:`SUBSETS` (see
                :func:`~brrm.bench.core.known_subset`).
        """
        for r in results:
            known_subset(r.item.subset, SUBSETS, f"RewardBench 2 item {r.item.id!r}")
        by_subset = group(results, lambda r: r.item.subset)
        rows = [self._ties_row(by_subset[s]) if s == "Ties" else self._bon_row(s, by_subset[s])
                for s in self.subsets if s in by_subset]
        fractions = [_fraction(r) for r in rows]
        overall = sum(fractions) / len(fractions) if fractions else math.nan
        rows.append(Row("Overall", 100 * overall, sum(r.n for r in rows), 0, sum(r.failures for r in rows),
                        {"fraction": overall, "rule": "unweighted mean of the subsets present"}))
        pairwise = any(r.item.meta.get("strategy") for r in results)
        notes = [("pairwise judge: completions ranked by " + self.strategy + " (order drawn per item); "
                  "an item with a failed judgment earns 1/4") if pairwise else
                 "scalar rewards per completion; an item with a failed reward earns 0"]
        if self.data_note:
            notes.append(self.data_note)
        if len(rows) - 1 < len(SUBSETS):
            notes.append("not every subset was run: Overall averages the subsets present")
        return BenchResult(self.name, "best-of-N accuracy (%), Ties: its own weighted score; Overall = mean of the "
                           "subsets", tuple(rows), "Overall", tuple(notes))

    def _bon_row(self, name: str, part: list[ItemResult]) -> Row:
        credits, failures = [], 0
        for r in part:
            if all(x.ok for x in r.rewards) and r.rewards:
                credits.append(best_of_n_credit([x.reward for x in r.rewards]))
            else:
                failures += 1
                credits.append(ERROR_CREDIT if r.item.meta.get("strategy") else 0.0)
        value = sum(credits) / len(credits)
        return Row(name, 100 * value, len(part), 0, failures, {"fraction": value, "wins": sum(c == 1 for c in credits)})

    def _ties_row(self, part: list[ItemResult]) -> Row:
        good = [r for r in part if r.rewards and all(x.ok for x in r.rewards)]
        parts = ties_score((r.item.id, [x.reward for x in r.rewards], r.item.meta_int("num_correct")) for r in good)
        return Row("Ties", 100 * parts["score"], len(part), 0, len(part) - len(good),
                   {"fraction": parts["score"], **{k: v for k, v in parts.items() if k != "score"}})

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The official metric over official per-item score files (``eval-set-scores``: a JSON object of columns,
        or JSON lines), each row with ``id``, ``subset``, ``num_correct`` and ``scores`` (one per completion,
        chosen first; a ``[x]`` list counts as ``x``, as ``process_single_model`` reads it).

        Raises:
            ConfigError: for a file without those columns.
        """

        return self.score([r for p in paths for r in read_scores(p)])
