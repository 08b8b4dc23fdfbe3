"""What a judge cascade (:mod:`brrm.compose.cascade`) records on each result: which stage decided it, by which
confidence rule, and why (:attr:`brrm.types.PairwiseJudgment.cascade`).

A cascade's first judge decides alone where it is confident; a second judge decides the rest (issue 48: the
fast/slow-thinking reward models of arXiv 2603.20212 and E-GRM's reasoning only where parallel samples disagree,
arXiv 2604.10072, as a composition of the judges a user already has).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields
from typing import Protocol

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict, json_field


class FirstJudgment(Protocol):
    """What a decision keeps of the first stage's judgment (a :class:`~brrm.types.PairwiseJudgment`, named by
    this protocol so that results.py, which holds decisions, is not imported back)."""

    def to_dict(self) -> JSONDict: ...


class CascadeRule(enum.StrEnum):
    """When a cascade's first judge counts as confident (and decides alone).

    ``margin``: a Bradley–Terry margin |r_A − r_B| above ``m`` (reward units; read as |logit P(A ≻ B)| of the
    uncalibrated probability, since a scalar judge's P(A ≻ B) = σ(r_A − r_B)). ``band``: P(A ≻ B) outside
    [½ − δ, ½ + δ] (a principle model's σ(r_A − r_B), or a BR-RM single-sample verdict probability). ``agree``: every
    ordered judgment behind the result (a first judge's ``k`` voting samples and/or both orders of a swap) is ok
    and gives the same verdict.
    """

    MARGIN = "margin"
    BAND = "band"
    AGREE = "agree"


class CascadeStage(enum.StrEnum):
    """The stage whose judgment a cascade result is: ``first`` (decided alone) or ``second`` (escalated)."""

    FIRST = "first"
    SECOND = "second"


class CascadeWhy(enum.StrEnum):
    """Why that stage decided.

    ``confident``: the first judge was confident under the rule. ``no_model_call``: the first judge decided without a
    model call (identical or empty responses: a rule, not a model's confidence; the second would decide the same).
    ``uncertain``: the first judge was ok but not confident (inside the band, a margin at or below ``m``, samples or
    orders that disagree, or a probability it did not measure). ``first_failed``: the first judge failed (parse
    failure, truncation, backend error, …): a failure is never read as confidence.
    """

    CONFIDENT = "confident"
    NO_MODEL_CALL = "no_model_call"
    UNCERTAIN = "uncertain"
    FIRST_FAILED = "first_failed"


@dataclass(frozen=True)
class CascadeDecision:
    """Which stage of a cascade decided one result, and why.

    Attributes:
        stage: :class:`CascadeStage`: ``first`` for :attr:`CascadeWhy.CONFIDENT` and ``NO_MODEL_CALL``, else
            ``second``.
        why: :class:`CascadeWhy`.
        rule: the confidence rule (:class:`CascadeRule`).
        threshold: the rule's threshold: ``m`` >= 0 (margin), ``δ`` in [0, 0.5) (band), NaN (agree).
        measure: what the rule measured on the first judgment: |r_A − r_B| (margin), |P(A ≻ B) − ½| (band), the
            share of ordered judgments giving the majority verdict (agree); NaN when not measured (a failure, no
            model call, no probability).
        detail: one line for people, e.g. ``|P(A ≻ B) - 0.5| = 0.02 <= 0.1``.
        first: the first judge's own judgment (its provenance, tokens and texts) when the second decided; None when
            the first decided (the result is then the first's judgment itself).

    Raises:
        ConfigError: when ``stage`` does not fit ``why``, or ``first`` is missing for an escalated result.
    """

    stage: CascadeStage
    why: CascadeWhy
    rule: CascadeRule
    threshold: float
    measure: float = math.nan
    detail: str = ""
    first: FirstJudgment | None = None

    def __post_init__(self) -> None:
        decided_first = self.why in (CascadeWhy.CONFIDENT, CascadeWhy.NO_MODEL_CALL)
        if decided_first != (self.stage is CascadeStage.FIRST):
            raise ConfigError(f"cascade: why {self.why.value} is decided by the "
                              f"{'first' if decided_first else 'second'} stage, not the {self.stage.value}")
        if self.stage is CascadeStage.SECOND and self.first is None:
            raise ConfigError("cascade: an escalated result carries the first stage's judgment")

    @property
    def escalated(self) -> bool:
        """Whether the second judge ran for this item."""
        return self.stage is CascadeStage.SECOND

    def to_dict(self) -> JSONDict:
        """JSON-ready (NaN numbers become ``null``; the first judgment as its own ``to_dict()``)."""
        return {f.name: json_field(getattr(self, f.name)) for f in fields(self)}
