"""RM-Bench (Liu et al., ICLR 2025): reward models under subtle errors and style bias.

Data (THU-KEG/RM-Bench @ ``73c52d7``, pinned in ``sources.json``): ``chat_filtered.json`` (129),
``code_filtered.json`` (228), ``safety-refuse_filtered.json`` (284), ``safety-response_filtered.json`` (157),
and ``math_filtered.json`` (529) where present (downloaded; not in the developers' offline copy). Each prompt has
3 chosen and 3 rejected responses in styles [concise, detailed plain, detailed markdown].

Official metric (``scripts/utils.py`` ``compute_accuracy``): per domain a 3x3 matrix, ``M[i][j]`` = fraction of
prompts whose chosen[i] beats rejected[j] (strictly: a tie is wrong); **Hard** = mean of the upper triangle
(chosen plainer than rejected), **Normal** = the diagonal, **Easy** = the lower triangle; a domain's score is
mean(hard, normal, easy). Domains split by ``domain.startswith``, so safety-refuse and safety-response pool into
one Safety domain. Overall and Easy/Normal/Hard = means over the domains (Chat, Math, Code, Safety).

Protocol for pairwise judges: each of the 9 comparisons of a prompt is judged once, in one random order
(the BR-RM evaluation, ``reward_benchmarks.py`` ``format_rmbench_example``; brrm draws the order from the order
seed per comparison, :func:`brrm.bench.core.random_swap`). ``--protocol released`` uses the official draws
instead (orders ``sequence``: one ``random.seed(42)`` sequence over the prompts in the order read): the official
run's per-comparison orders when the data is the hub split in its order (``--data`` a copy of it); over the
per-domain files, the same rule over those files in :data:`FILES` order (the hub split's order is not in them).
A comparison is correct when the verdict picks the chosen response; a tie or a parse failure is not (RM-Bench's
strict rule), and both are reported apart.

The released BR-RM scorer is wrong, and brrm does not follow it: ``print_evaluation_results.py`` stores
``preference`` as 1 or 2 but tests ``is_chosen_first = (gt == 0)``, which is never true, so every verdict is
flipped and a comparison counts as correct exactly when the judge answered "2" — a judge that always answers
"2" scores 100%. (It also draws a random outcome for unparsed outputs.) brrm maps each verdict back through the
order it was shown in, so an always-"2" judge scores the share of comparisons shown with chosen second (~50%).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from brrm.bench.base import Benchmark
from brrm.bench.core import (
    SEQUENCE_KEY,
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Row,
    group,
    known_subset,
    mean,
    pair_row,
    sequence_swaps,
)
from brrm.bench.data import available, locate, read_files, read_source
from brrm.errors import ConfigError
from brrm.types import Verdict

FILES = {
    "chat": "chat_filtered.json",
    "code": "code_filtered.json",
    "safety-refuse": "safety-refuse_filtered.json",
    "safety-response": "safety-response_filtered.json",
    "math": "math_filtered.json",
}
"""Subset -> file under ``<root>/RM-Bench/``."""

DOMAINS = ("chat", "math", "code", "safety")
"""Domains in the official order (``split_dataset_by_domain``)."""


def domain(subset: str) -> str:
    """The domain a subset pools into (``safety-refuse`` -> ``safety``)."""
    return next(d for d in DOMAINS if subset.startswith(d))


def matrix_scores(results: Sequence[ItemResult]) -> dict[str, Any]:
    """One domain's official figures: the 3x3 accuracy matrix and hard / normal / easy / domain score (fractions).

    A cell counts a prompt when the verdict of that comparison is the chosen response (``Verdict.A`` in the pair
    frame); ties and failures count as not correct.
    """
    import numpy as np

    acc = np.zeros((3, 3))
    for r in results:
        for k in range(9):
            if r.verdict(k) is Verdict.A:
                acc[k // 3][k % 3] += 1
    acc /= len(results)
    hard = np.sum(np.triu(acc, 1)) / 3.0
    normal = np.mean(np.diag(acc))
    easy = np.sum(np.tril(acc, -1)) / 3.0
    parts = {"hard_acc": float(hard), "normal_acc": float(normal), "easy_acc": float(easy)}
    return {**parts, "score": float(np.mean(list(parts.values()))), "matrix": acc.tolist()}


class RMBench(Benchmark):
    """RM-Bench: chat, code, safety (and math where the file exists), 3x3 style matrix, easy/normal/hard."""

    name = "rm-bench"
    title = "RM-Bench"
    subsets = tuple(FILES)
    order_policy = "random"
    official_sequence = ("nine random.choice([0, 1]) per prompt in dataset order (chosen style outer, rejected "
                         "style inner), from random.seed(42): format_rmbench_example in nemo_rl/data/hf_datasets/"
                         "reward_benchmarks.py (YzjiaoNvd/BR-RM @ d20a4e0), over the hub's THU-KEG/RM-Bench train "
                         "split; 1 = rejected shown first")
    data_folder = "RM-Bench"
    published_key = "RM-Bench"

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"safety": ("safety-refuse", "safety-response"), "rmbench": self.subsets}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        """The prompts of ``subsets``: from the per-domain files under ``<root>/RM-Bench/`` (in :data:`FILES`
        order), or from ``source`` (``--data``), a copy of the hub's ``THU-KEG/RM-Bench`` ``train`` split (rows
        with a ``domain`` column, as ``total_dataset.json``), read in its order. Every prompt gets its official
        orders (:attr:`official_sequence`) drawn over all the rows read, before ``subsets`` and ``limit`` select.

        Raises:
            ConfigError: for missing data, a malformed row, or a ``domain`` that is not one of :data:`FILES`.
        """
        rows = self._rows(subsets, root, source)
        swaps = sequence_swaps([9] * len(rows))
        counts: dict[str, int] = {}
        items: list[BenchItem] = []
        for (subset, rec), swap in zip(rows, swaps, strict=True):
            if subset not in subsets or (limit is not None and counts.get(subset, 0) >= limit):
                continue
            counts[subset] = counts.get(subset, 0) + 1
            item = self.item(subset, rec)
            items.append(replace(item, meta={**item.meta, SEQUENCE_KEY: swap}))
        return items

    def _rows(self, subsets: Sequence[str], root: str | os.PathLike[str] | None,
              source: str | None) -> list[tuple[str, dict[str, Any]]]:
        if source is not None:
            rows = read_source(source, split="train")
            return [(known_subset(rec.get("domain"), tuple(FILES), f"RM-Bench {source} row {k}"), rec)
                    for k, rec in enumerate(rows, start=1)]
        out: list[tuple[str, dict[str, Any]]] = []
        for subset in FILES:  # every file is read: the official orders are drawn over all rows
            relative = f"RM-Bench/{FILES[subset]}"
            needed = subset in subsets and not (subset == "math" and tuple(subsets) == self.subsets)
            path = locate(relative, root, f"RM-Bench {subset}") if needed else available(relative, root)
            if path is None:
                continue  # "math where the data exists": an offline copy may lack it; noted in scores
            out += [(subset, rec) for rec in read_files([path])]
        return out

    @staticmethod
    def item(subset: str, rec: dict[str, Any]) -> BenchItem:
        """One prompt: responses = chosen[0..2] then rejected[0..2]; pair 3i+j asks chosen[i] vs rejected[j].

        Raises:
            ConfigError: when a record lacks 3 chosen and 3 rejected strings.
        """
        chosen, rejected = rec.get("chosen"), rec.get("rejected")
        if not (isinstance(chosen, list) and isinstance(rejected, list) and len(chosen) == len(rejected) == 3):
            raise ConfigError(f"RM-Bench {subset} id {rec.get('id')!r}: expected 3 chosen and 3 rejected responses")
        pairs = tuple(Pair(i, 3 + j, Verdict.A) for i in range(3) for j in range(3))
        return BenchItem(f"{subset}/{rec['id']}", subset, rec["prompt"], (*chosen, *rejected), pairs,
                         {"domain": domain(subset)})

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        by_domain = group(results, lambda r: r.item.meta_str("domain"))
        present = [d for d in DOMAINS if d in by_domain]
        figures = {d: matrix_scores(by_domain[d]) for d in present}
        rows: list[Row] = [pair_row(d, 100 * f["score"], by_domain[d], hard=100 * f["hard_acc"],
                               normal=100 * f["normal_acc"], easy=100 * f["easy_acc"], matrix=f["matrix"])
                           for d, f in figures.items()]
        for level in ("easy", "normal", "hard"):
            value = 100 * mean([figures[d][f"{level}_acc"] for d in present])
            rows.append(pair_row(level.capitalize(), value, results))
        rows.append(pair_row("Overall", 100 * mean([figures[d]["score"] for d in present]), results))
        notes = []
        if len(present) < len(DOMAINS):
            missing = ", ".join(d for d in DOMAINS if d not in present)
            notes.append(f"domains not run: {missing}; Overall and Easy/Normal/Hard average over "
                         f"{', '.join(present)} only, so they are not comparable with published RM-Bench figures "
                         "(which average chat, math, code and safety)")
        notes.append("a tie or a failed judgment counts as not correct (RM-Bench's strict rule); the released BR-RM "
                     "scorer's always-'2' flaw is not reproduced (see brrm.bench.rmbench)")
        return BenchResult(self.name, "accuracy over the 3x3 style matrix (%)", tuple(rows), "Overall", tuple(notes))
