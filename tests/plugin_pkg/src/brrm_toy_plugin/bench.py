"""Benchmark ``toybench``: two pairs whose preferred response is the longer one (a toy), and accuracy."""

from __future__ import annotations

import os
from collections.abc import Sequence

from brrm.bench.base import Benchmark, take
from brrm.bench.core import BenchItem, BenchResult, ItemResult, Pair, percent, row
from brrm.types import Verdict

ITEMS = (("Name a colour.", "Blue, like a clear sky at noon.", "Red."),
         ("Say hi.", "Hi", "Hello there, and welcome!"))


class ToyBench(Benchmark):
    """Two hand-written pairs in one subset; gold is the longer response."""

    name = "toybench"
    title = "Toy bench"
    subsets = ("all",)

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        items = [BenchItem(f"toy-{k}", "all", prompt, (a, b), (Pair(0, 1, _gold(a, b)),))
                 for k, (prompt, a, b) in enumerate(ITEMS)]
        return take(items, limit)

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        right = sum(_in_pair_frame(s.judgment.winner, s.swapped) is r.item.pairs[s.pair].gold
                    for r in results for s in r.shown)
        shown = sum(len(r.shown) for r in results)
        overall = row("Overall", percent(right, shown), results)
        return BenchResult(self.name, "accuracy", (overall,), f"accuracy {overall.score:.1f}%")


def _gold(a: str, b: str) -> Verdict:
    return Verdict.A if len(a) > len(b) else Verdict.B


def _in_pair_frame(winner: Verdict, swapped: bool) -> Verdict:
    return winner.mirrored() if swapped else winner
