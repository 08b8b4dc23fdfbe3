"""Which protocol a benchmark run follows: the released evaluation (``released``) or brrm's own (``brrm``).

* ``released`` — what the BR-RM model cards' figures come from: ``faithful`` decoding (the released prompts and
  parser end to end), temperature 1.0, top_p 1.0, at most 8192 new tokens per turn and 16384 in all (the cards'
  sampling and budgets, ``DESIGN.md`` §3), each pair in the benchmark's own presentation order (on RewardBench
  and RM-Bench the very order the official script drew for it: orders ``sequence``,
  :attr:`brrm.bench.base.Benchmark.official_sequence`), the headline
  over parsed items only (the official BR-RM scorer averages over the samples it could parse), and the BR-RM
  scorer's aggregate where it differs from the benchmark's own (RewardBench: ``weighting="unweighted"``).
* ``brrm`` — constrained decoding (every verdict parses) with both presentation orders combined per pair where the
  benchmark's metric scores one verdict per pair (swap; disagreement is a tie), headline over all items (a failure
  scores as the benchmark's own rule says: not correct, or 0.5 in RewardBench).

``brrm bench`` runs ``released`` by default for a known checkpoint (:data:`brrm.recipes.KNOWN`); ``both`` runs the
two side by side. Any other model runs ``custom`` unless told otherwise: the judge's options as given (brrm's
defaults: constrained decoding), the benchmark's own presentation orders, headline over all items. Flags the user
sets explicitly win over a protocol's settings and are reported as deviations from it. Decoding settings apply to
BR-RM judges only: a scalar reward model has no decoding, so for it a protocol only chooses orders and the headline
denominator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from brrm.bench.core import BenchResult, ItemResult
from brrm.types.config import check_choice
from brrm.types.jsonvalue import record
from brrm.types.summary import check_logprob_semantics, logprob_semantics

if TYPE_CHECKING:
    from brrm.bench.base import Benchmark

PROTOCOLS = ("released", "brrm", "both")
"""Values of ``--protocol`` (``custom`` is what runs without it for a model that is not a known checkpoint)."""

RELEASED_OPTIONS: Mapping[str, object] = {"decoding": "faithful", "temperature": 1.0, "top_p": 1.0,
                                       "max_new_tokens": 8192, "max_total_tokens": 16384}
"""The released evaluation's judge settings (BR-RM model cards / ``DESIGN.md`` §3: temperature 1.0, top_p 1.0,
≤ 8192 new tokens per turn, 16384 total, thinking on — thinking stays ``auto``, which is on for Qwen3 tokenizers)."""

RELEASED_THINKING = ("auto", "on")
"""``thinking`` values that keep the released evaluation's thinking on (:data:`RELEASED_OPTIONS`); any other value
the user sets (``off``) is listed among the deviations."""

BRRM_OPTIONS: Mapping[str, object] = {"decoding": "constrained"}
"""brrm's own protocol: constrained decoding with brrm's defaults (which already are the cards' sampling)."""


@dataclass(frozen=True)
class Protocol:
    """One protocol as a run applies it.

    Attributes:
        name: ``released``, ``brrm`` or ``custom``.
        options: the judge options it sets (``brrm.load`` keywords), after the user's explicit flags (``custom``
            sets none).
        orders: the order policy of the run (:data:`brrm.bench.core.ORDER_POLICIES`).
        headline: ``parsed`` (over parsed items, the official BR-RM scorer) or ``all`` (every item; a failure
            scores by the benchmark's rule).
        deviations: the protocol's settings the user's flags replaced, as ``"name value"`` strings.
        bench_options: benchmark options it sets (``released`` on RewardBench: ``weighting unweighted``, the
            BR-RM scorer's sections), after the user's flags.
    """

    name: str
    options: Mapping[str, object]
    orders: str
    headline: str
    deviations: tuple[str, ...] = ()
    bench_options: Mapping[str, str] = field(default_factory=dict)

    def describe(self, decoding: str | None, *, pairwise: bool = True) -> str:
        """One line: the protocol's name, decoding settings, orders and headline denominator.

        Args:
            decoding: the pairwise judge's decoding mode (:attr:`brrm.JudgeInfo.decoding`).
            pairwise: False for a scalar reward model (no decoding).
        """
        if not pairwise:
            parts = ["no decoding (scalar model)"]
        elif self.name == "custom":
            parts = [f"decoding {decoding} (your judge options; not a known checkpoint)"]
        else:
            parts = [f"{k.replace('_', ' ')} {v}" for k, v in self.options.items()]
        parts += [f"{k} {v}" for k, v in self.bench_options.items()]
        parts += [f"orders {self.orders}",
                  "headline over parsed items (official BR-RM scorer)" if self.headline == "parsed"
                  else "headline over all items (failures scored by the benchmark's rule)"]
        text = f"protocol {self.name}: " + ", ".join(parts)
        return text + (f"; deviations (your flags): {', '.join(self.deviations)}" if self.deviations else "")

    def to_dict(self) -> dict[str, object]:
        """The fields by name, JSON-ready (:func:`~brrm.types.jsonvalue.record`)."""
        return dict(record(self))


def default_protocol(model: str | None) -> str:
    """``released`` for a known checkpoint — by id, a local copy named like one, its config or its content (a
    renamed copy: :func:`brrm.recipes.known_id`) — else ``custom``."""
    from brrm.recipes import known_recipe, model_config

    return "released" if model and known_recipe(model, model_config(model)) is not None else "custom"


def resolve(requested: str | None, bench: Benchmark, *, model: str | None, user: Mapping[str, object],
            orders: str | None, bench_user: Mapping[str, str] | None = None) -> tuple[Protocol, ...]:
    """The protocols a run follows, in report order.

    Args:
        requested: ``--protocol`` (None: :func:`default_protocol`).
        bench: the :class:`~brrm.bench.base.Benchmark`.
        model: the model id or folder (None: the embedded demo).
        user: the judge options the user set explicitly (they win, and are listed as deviations).
        orders: ``--orders`` when given (``official`` or ``both``), else None (the protocol decides).
        bench_user: the benchmark options the user set explicitly (``--weighting``); they win, as ``user`` does.

    Raises:
        ConfigError: for a protocol outside :data:`PROTOCOLS`, or ``--orders`` the benchmark cannot score.
    """
    name = requested or default_protocol(model)
    if name == "custom" and requested is None:
        return (Protocol("custom", {}, bench.orders(orders), "all"),)
    check_choice("--protocol", name, PROTOCOLS)
    names = ("released", "brrm") if name == "both" else (name,)
    return tuple(_one(n, bench, user, orders, dict(bench_user or {})) for n in names)


def _one(name: str, bench: Benchmark, user: Mapping[str, object], orders: str | None,
         bench_user: dict[str, str]) -> Protocol:
    base = RELEASED_OPTIONS if name == "released" else BRRM_OPTIONS
    options = {**base, **{k: user[k] for k in base if k in user}}
    deviations = [f"{k} {user[k]}" for k in base if k in user and user[k] != base[k]]
    if name == "released" and str(user.get("thinking", "auto")) not in RELEASED_THINKING:
        deviations.append(f"thinking {user['thinking']}")
    official = "official" if name == "released" or bench.metric_needs_orders else "both"
    if name == "released" and bench.official_sequence:
        official = "sequence"  # the released evaluation's own draws, pair for pair
    chosen = bench.orders(orders or official)
    if chosen != bench.orders(official):
        deviations.append(f"orders {chosen}")
    released = dict(bench.released_options) if name == "released" else {}
    deviations += [f"{k} {bench_user[k]}" for k in released if k in bench_user and bench_user[k] != released[k]]
    bench_options = {**released, **{k: v for k, v in bench_user.items() if k in released}}
    return Protocol(name, options, chosen, "parsed" if name == "released" else "all", tuple(deviations),
                    bench_options)


def parsed(result: ItemResult) -> bool:
    """Whether every presentation of the item got a verdict (a tie is a verdict) and every reward a value."""
    return all(s.judgment.ok for s in result.shown) and all(r.ok for r in result.rewards)


@dataclass(frozen=True)
class Scored:
    """A run's scores under one protocol, over both denominators.

    Attributes:
        protocol: the protocol (None for a replay of stored outputs).
        all: the benchmark's metric over every item.
        parsed: the metric over the items whose every presentation parsed (:func:`parsed`); None when no item
            parsed. Items the official scorer would score per sample lose all their presentations here when one
            fails (for one-comparison items — RewardBench, RMB pairs — the two rules are the same).
        n_parsed: items behind ``parsed``.
        per_item: False for a replay of official output files, which brrm scores through the official script's
            rules without per-item parse states: ``parsed`` is then None and only the official figure exists.
        results: the per-item results behind the scores (empty for official files).
        calibration: label -> ECE / Brier / log loss of the run's P(A ≻ B) (filled when measured).
    """

    protocol: Protocol | None
    all: BenchResult
    parsed: BenchResult | None
    n_parsed: int
    per_item: bool = True
    results: tuple[ItemResult, ...] = ()
    calibration: dict[str, Mapping[str, object]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.protocol.name if self.protocol else "replay"

    def parsed_score(self, row: str) -> float | None:
        """The row's score over parsed items; None when that row has no parsed item."""
        if self.parsed is None:
            return None
        return next((r.score for r in self.parsed.rows if r.name == row), None)

    def headline(self) -> float | None:
        """The protocol's own headline figure (over parsed items for ``released``, else over all items)."""
        if self.protocol is not None and self.protocol.headline == "parsed":
            return self.parsed_score(self.all.headline)
        return self.all.overall

    def to_dict(self) -> dict[str, object]:
        return {"protocol": self.protocol.to_dict() if self.protocol else None, "n_parsed": self.n_parsed,
                "per_item": self.per_item,
                "parsed_only": self.parsed.to_dict() if self.parsed else None,
                **({"calibration": dict(self.calibration)} if self.calibration else {})}


def score_both(bench: Benchmark, results: Sequence[ItemResult], protocol: Protocol | None, all_: BenchResult) -> Scored:
    """:class:`Scored` from a run's results: ``all_`` (already scored over every item) and the parsed items.

    Raises:
        ConfigError: when the results mix unknown and known logprob semantics (e.g. a resume on another server).
    """
    check_logprob_semantics(logprob_semantics([*(s.judgment for r in results for s in r.shown),
                                               *(w for r in results for w in r.rewards)]), "the bench report")
    kept = [r for r in results if parsed(r)]
    if len(kept) == len(results):
        return Scored(protocol, all_, all_, len(kept))
    # the parsed figure names the same run: its judge and data (revision and digests) are all_'s
    over_parsed = replace(bench.score(kept), judge=all_.judge, data_revision=all_.data_revision) if kept else None
    return Scored(protocol, all_, over_parsed, len(kept))
