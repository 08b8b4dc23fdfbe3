"""What a request costs, counted by the judge before it runs (:meth:`brrm.RewardJudge.judgment_cost`).

Every surface that bounds, announces or budgets work — the server's admission and its OpenAPI limits, the RLHF
adapters' per-step budgets, ``brrm rank``, best-of-N benchmarks — asks the judge and never counts judgments
itself: a judge's swap, voting samples, principles and group strategy are its own business.
"""

from __future__ import annotations

from dataclasses import dataclass

UNITS = ("judgment", "scored sequence")
"""What one unit of :attr:`JudgmentCost.judgments` is: an ordered two-turn judgment of a pair (pairwise judges) or
one response scored once (scalar reward models)."""


@dataclass(frozen=True)
class JudgmentCost:
    """The model work one request makes, known before it is queued.

    Attributes:
        shape: ``pairs``, ``score`` or ``group`` (:data:`brrm.types.SHAPES`).
        n: pairs, items scored, or responses in the group, >= 0.
        units: units of work per sample (:attr:`unit`), >= 0: a pairwise judge's ordered judgments (each pair
            once per presentation order; a group's strategy count), or a scalar model's scored sequences (both
            responses of a pair, each response once per principle).
        samples: independent judgments per unit (self-consistency voting), >= 1; 1 for scalar models.
        turns: model generations per unit, >= 1 (2 for BR-RM's two-turn protocol; 1 for one scoring pass).
        orders: presentation orders per pair (2 with swap, else 1).
        strategy: the group's concrete strategy (``group`` only; ``""`` otherwise).
        unit: one of :data:`UNITS`.
        pairs: pairs a pairwise judge judges, a pair judged in both orders counted once (the unit its progress
            bars count), >= 0; 0 for scalar models.
    """

    shape: str
    n: int
    units: int
    samples: int = 1
    turns: int = 2
    orders: int = 1
    strategy: str = ""
    unit: str = "judgment"
    pairs: int = 0

    @property
    def total(self) -> int:
        """Units run, samples included: what admission limits and budgets count (``judge.cost(...)``)."""
        return self.units * self.samples

    @property
    def judgments(self) -> int:
        """:attr:`total` by its name for a pairwise judge: ordered judgments run, samples included."""
        return self.total

    @property
    def generations(self) -> int:
        """Model generations run: :attr:`total` x :attr:`turns`."""
        return self.total * self.turns

    def describe(self) -> str:
        """One line for a terminal or an error message, e.g. ``8 pairs x 2 orders x 3 samples = 48 judgments (96
        generations)``, ``round_robin over 8 responses = 56 judgments (112 generations)`` or ``16 scored
        sequences``."""
        from brrm.wording import counted

        if self.unit != "judgment":
            return counted(self.total, self.unit)
        if self.shape == "group":
            head = f"{self.strategy} over {counted(self.n, 'response')}"
            head += f" ({counted(self.units, 'judgment')}) x {self.samples} samples" if self.samples != 1 else ""
        else:
            head = (f"{counted(self.n, 'pair' if self.shape == 'pairs' else 'item')} x {counted(self.orders, 'order')}"
                    f" x {counted(self.samples, 'sample')}")
        return f"{head} = {counted(self.total, 'judgment')} ({counted(self.generations, 'generation')})"


@dataclass(frozen=True)
class CascadeCost(JudgmentCost):
    """What a judge cascade's request costs (:mod:`brrm.compose.cascade`): its first judge on every item, and its
    second judge on the items the first was not confident about (or failed on).

    Each stage's cost is its own judge's (:meth:`~brrm.RewardJudge.judgment_cost`); the two stages may count
    different units (a Bradley–Terry first stage scores sequences, a BR-RM second stage runs two-turn judgments).
    :attr:`total` and :attr:`generations` are the worst case, both stages on every item; :meth:`expected` is the
    cost at an escalation rate (the share of items sent to the second judge, e.g. measured by
    :func:`brrm.compose.cascade.escalation_rate` on earlier results: no rate is assumed here).

    Attributes:
        first: the first judge's cost for the whole request.
        second: the second judge's cost for the whole request (what it costs when every item escalates).
    """

    first: JudgmentCost | None = None
    second: JudgmentCost | None = None

    def _stages(self) -> tuple[JudgmentCost, JudgmentCost]:
        if self.first is None or self.second is None:
            raise ValueError("a CascadeCost needs both stages' costs")
        return self.first, self.second

    @property
    def total(self) -> int:
        """Worst case: the first stage's units plus the second stage's on every item (``judge.cost(...)``)."""
        first, second = self._stages()
        return first.total + second.total

    @property
    def generations(self) -> int:
        """Worst case model generations (or scoring passes): both stages' on every item."""
        first, second = self._stages()
        return first.generations + second.generations

    def expected(self, escalation_rate: float) -> float:
        """Expected units at ``escalation_rate`` in [0, 1]: the first stage's total plus that share of the
        second's (each stage's units are linear in the items it judges).

        Raises:
            ValueError: on a rate outside [0, 1] or NaN.
        """
        first, second = self._stages()
        if not 0.0 <= escalation_rate <= 1.0:
            raise ValueError(f"escalation_rate must be in [0, 1], got {escalation_rate!r}")
        return first.total + escalation_rate * second.total

    def describe(self) -> str:
        """One line: both stages' costs, e.g. ``cascade: 16 scored sequences, then up to 8 pairs x 1 order x 1
        sample = 8 judgments (16 generations) on escalated items``."""
        first, second = self._stages()
        return f"cascade: {first.describe()}, then up to {second.describe()} on escalated items"
