"""The shape of a benchmark: subsets, loader, presentation-order protocol, official metric and replay.

Each benchmark module defines one :class:`Benchmark` subclass; :mod:`brrm.bench.registry` lists them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from brrm.bench.core import ORDER_POLICIES, BenchItem, BenchResult, ItemResult
from brrm.errors import ConfigError


class Benchmark:
    """A benchmark: its data, its protocol and its official metric.

    Attributes:
        name: registry name (``brrm bench NAME``).
        title: the benchmark's own name.
        subsets: the subsets ``--subset`` selects from, in report order.
        order_policy: how the official protocol presents pairs (see :data:`~brrm.bench.core.ORDER_POLICIES`).
        metric_needs_orders: True when the official metric scores each presentation order on its own (LLMBar,
            JudgeBench, Auto-J): the order policy is then fixed. Otherwise ``orders="both"`` may replace the
            official order: the two orders are combined per pair (disagreement is a tie) before scoring.
        published_key: the benchmark's name in model cards' published figures (:data:`brrm.recipes.KNOWN`).
        source_split: for benchmarks read from the hub: the split ``--data`` names; None for local data.
        data_folder: the benchmark's folder under the data root (its ``SOURCE.md`` names the upstream commit;
            :func:`brrm.bench.data.data_revision`); None for hub-only data.
        hub_source: the hub id hub-only data is read from when ``--data`` is not given.
        released_options: the benchmark options (:func:`brrm.bench.registry.get_benchmark` keywords) of the
            released BR-RM evaluation where they differ from the benchmark's own (RewardBench: ``weighting``).
        official_sequence: where the loader reproduces the released evaluation's presentation orders (items carry
            :data:`~brrm.bench.core.SEQUENCE_KEY`; ``--protocol released`` runs orders ``sequence``), the
            official draw in words with its source; "" where it does not.
    """

    name: str = ""
    title: str = ""
    subsets: tuple[str, ...] = ()
    order_policy: str = "given"
    metric_needs_orders: bool = False
    published_key: str | None = None
    source_split: str | None = None
    data_folder: str | None = None
    hub_source: str | None = None
    released_options: dict[str, str] = {}
    official_sequence: str = ""

    def resolve_subsets(self, names: Sequence[str] | None) -> tuple[str, ...]:
        """Canonical subset names (all subsets when ``names`` is empty), matched case-insensitively, by their last
        path part, or by a benchmark-specific alias (:meth:`aliases`).

        Raises:
            ConfigError: for an unknown subset, listing the valid ones.
        """
        if not names:
            return self.subsets
        out: list[str] = []
        for name in names:
            key = name.strip().lower()
            hits = [s for s in self.subsets if key in (s.lower(), s.rsplit("/", 1)[-1].lower())]
            hits += self.aliases().get(key, ())
            if not hits:
                raise ConfigError(f"{self.title} subset {name!r} is not valid; expected one of "
                                  f"{', '.join(self.subsets)}")
            out += [h for h in hits if h not in out]
        return tuple(s for s in self.subsets if s in out)

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Extra subset names (lower-case) -> the subsets they select."""
        return {}

    def orders(self, requested: str | None) -> str:
        """The order policy of a run: the official one, or ``both`` where the metric allows it.

        Raises:
            ConfigError: for an unknown policy, or one the official metric cannot score.
        """
        if requested in (None, "official", self.order_policy):
            return self.order_policy
        if requested == "sequence" and self.official_sequence:
            return "sequence"
        if requested not in ORDER_POLICIES:
            raise ConfigError(f"--orders {requested!r} is not valid; expected official or both")
        if self.metric_needs_orders or requested != "both":
            raise ConfigError(f"{self.title} scores each presentation order as its official script does "
                              f"({self.order_policy}); --orders {requested} does not apply")
        return requested

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        """The items of the given subsets (the first ``limit`` of each subset when set).

        Raises:
            ConfigError: when the data is missing or malformed.
        """
        raise NotImplementedError

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        """The official metric over judged items."""
        raise NotImplementedError

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The official metric over official per-item output files.

        Raises:
            ConfigError: when the benchmark has no official output format, or a file is not one.
        """
        raise ConfigError(f"{self.title} has no official per-item output format brrm reads; pass a brrm output "
                          "(judgments.jsonl of an earlier `brrm bench` run) to --predictions")


T = TypeVar("T")


def take(items: list[T], limit: int | None) -> list[T]:
    """The first ``limit`` items (all when None)."""
    return items if limit is None else items[:limit]
