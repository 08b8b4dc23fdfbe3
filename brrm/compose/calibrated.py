"""Calibrated judges, as composition: every P(A ≻ B) the judge returns is calibrated, the raw one kept beside it.
:func:`brrm.load` builds them (``calibration=PATH``) from the :class:`~brrm.types.calibration.Calibration` value
(fitted by :mod:`brrm.calibration`); nothing edits a built judge.

Pairwise judges (BR-RM) are calibrated per ordered judgment, inside the judge (:class:`CalibratedPairJudge` wraps
its ordered-pair model), so swap-order combination, group strategies and the RLHF adapters all see calibrated
probabilities (swap: the mean of the two calibrated orders). Scalar models are calibrated where their P(A ≻ B) =
σ(r_A − r_B) is formed, in ``judge_pairs`` (:class:`CalibratedScalarJudge`); their rewards are unchanged.
The judge's ``info.composition.calibration`` (its records' ``options.calibration``) holds the calibration's hash
(so audits and benchmark resumes keep a calibrated judge apart from the raw one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from brrm.compose.base import _Base
from brrm.errors import ConfigError
from brrm.types import (
    ConversationLike,
    JudgeInfo,
    OrderedPairJudge,
    PairwiseJudgment,
    Progress,
    RewardJudge,
    Variable,
    Verdict,
)
from brrm.types.calibration import Calibration
from brrm.types.protocols import OnResult, OnStep, Principles


class CalibratedPairJudge:
    """An ordered-pair judge whose judgments carry calibrated P(A ≻ B) (see :meth:`Calibration.apply`).

    Args:
        model: the :class:`~brrm.types.OrderedPairJudge` (e.g. BR-RM).
        calibration: a ``pairwise`` calibration.
    """

    def __init__(self, model: OrderedPairJudge, calibration: Calibration) -> None:
        self.model, self.calibration = model, calibration
        self.votes = bool(getattr(model, "votes", False))  # draws separate samples as the model does
        self.info: JudgeInfo = replace(model.info, composition=replace(model.info.composition,
                                                                       calibration=calibration.hash))

    def judge_ordered(self, conversations: Sequence[ConversationLike], first: Sequence[str], second: Sequence[str],
                      /, *, ids: Sequence[str] | None = None, **kw: object) -> list[PairwiseJudgment]:
        report = kw.pop("on_result", None)
        assert report is None or callable(report), f"on_result must be callable, got {report!r}"
        given, reported = _reporting(report, self.calibration.apply)
        if given is not None:
            kw["on_result"] = given
        ordered: Callable[..., list[PairwiseJudgment]] = self.model.judge_ordered  # takes progress=, samples=, …
        out = ordered(conversations, first, second, ids=ids, **kw)
        return [reported.get(i) or self.calibration.apply(j) for i, j in enumerate(out)]

    def with_options(self, **options: object) -> OrderedPairJudge:
        """The model's variant with ``options`` (as the model's own ``with_options``: not calibrated).

        Raises:
            ConfigError: when the model makes no variants.
        """
        if not isinstance(self.model, Variable):
            raise ConfigError(f"{type(self.model).__name__} makes no variants; options {sorted(options)} cannot be "
                              "set on this judge")
        variant: OrderedPairJudge = self.model.with_options(**options)
        return variant

    def close(self) -> None:
        self.model.close()


class CalibratedScalarJudge(_Base):
    """A scalar :class:`~brrm.RewardJudge` whose pairwise judgments carry calibrated σ(s·(r_A − r_B)); every other
    method is the wrapped judge's own (rewards, rankings and costs unchanged; its ``with_options`` variants are not
    calibrated).

    Args:
        judge: the scalar judge (:class:`~brrm.compose.judges.ScalarRewardJudge`).
        calibration: a ``scalar`` calibration.
    """

    def __init__(self, judge: RewardJudge, calibration: Calibration) -> None:
        self.inner = self.model = judge  # closed by _Base.close
        self.calibration = calibration
        self.score, self.rank_groups = judge.score, judge.rank_groups
        self.with_options, self.judgment_cost = judge.with_options, judge.judgment_cost
        self.info: JudgeInfo = replace(judge.info, composition=replace(judge.info.composition,
                                                                       calibration=calibration.hash))

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        given, reported = _reporting(on_result, self.calibration.apply)
        out = self.inner.judge_pairs(conversations, responses_a, responses_b, swap=swap, ids=ids, labels=labels,
                                     principles=principles, progress=progress, on_result=given, on_step=on_step)
        return [reported.get(i) or self.calibration.apply(j) for i, j in enumerate(out)]


def _reporting(report: Callable[[int, PairwiseJudgment], object] | None,
               apply: Callable[[PairwiseJudgment], PairwiseJudgment],
               ) -> tuple[Callable[[int, PairwiseJudgment], None] | None, dict[int, PairwiseJudgment]]:
    """The ``on_result`` callback (if any) to hand on, which gives ``report`` calibrated judgments, and the ones it
    was given (returned as they were reported: one object per item)."""
    reported: dict[int, PairwiseJudgment] = {}
    if report is None:
        return None, reported

    def got(i: int, j: PairwiseJudgment) -> None:
        reported[i] = apply(j)
        report(i, reported[i])

    return got, reported


def calibrated_ordered(model: OrderedPairJudge, calibration: Calibration | None) -> OrderedPairJudge:
    """The ordered-pair model a pairwise :class:`~brrm.compose.PairwiseRewardJudge` is composed over: ``model``
    itself, or with a calibration, ``model`` inside a :class:`CalibratedPairJudge`.

    Raises:
        ConfigError: for a ``scalar`` calibration.
    """
    if calibration is None:
        return model
    if calibration.kind != "pairwise":
        raise ConfigError(f"a {calibration.kind} calibration does not apply to a pairwise judge "
                          f"({model.info.describe()})")
    return CalibratedPairJudge(model, calibration)


def calibrated_scalar(judge: RewardJudge, calibration: Calibration | None) -> RewardJudge:
    """A scalar :class:`~brrm.RewardJudge` as it is, or with a calibration inside a :class:`CalibratedScalarJudge`.

    Raises:
        ConfigError: for a ``pairwise`` calibration.
    """
    if calibration is None:
        return judge
    if calibration.kind != "scalar":
        raise ConfigError(f"a {calibration.kind} calibration does not apply to a scalar judge "
                          f"({judge.info.describe()})")
    return CalibratedScalarJudge(judge, calibration)
