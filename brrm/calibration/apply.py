"""Apply a calibration to a judge: every P(A ≻ B) it returns is calibrated, the raw one kept beside it.

Pairwise judges (BR-RM) are calibrated per ordered judgment, inside the judge (:class:`CalibratedPairJudge` wraps
its ordered-pair model), so swap-order combination, group strategies and the RLHF adapters all see calibrated
probabilities (swap: the mean of the two calibrated orders). Scalar models are calibrated where their P(A ≻ B) =
σ(r_A − r_B) is formed, in ``judge_pairs`` (:class:`CalibratedScalarJudge`); their rewards are unchanged.
The judge's ``info.options["calibration"]`` holds the calibration's hash (so audits and benchmark resumes keep a
calibrated judge apart from the raw one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from brrm.calibration.model import Calibration
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment


class CalibratedPairJudge:
    """An ordered-pair judge whose judgments carry calibrated P(A ≻ B) (see :meth:`Calibration.apply`).

    Args:
        model: the :class:`~brrm.types.OrderedPairJudge` (e.g. BR-RM).
        calibration: a ``pairwise`` calibration.
    """

    def __init__(self, model: Any, calibration: Calibration) -> None:
        self.model, self.calibration = model, calibration
        self.info = replace(model.info, options={**model.info.options, "calibration": calibration.hash})

    def judge_ordered(self, conversations: Sequence[Any], first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None, **kw: Any) -> list[PairwiseJudgment]:
        kw, reported = _reporting(kw, self.calibration.apply)
        out = self.model.judge_ordered(conversations, first, second, ids=ids, **kw)
        return [reported.get(i) or self.calibration.apply(j) for i, j in enumerate(out)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


class CalibratedScalarJudge:
    """A scalar :class:`~brrm.RewardJudge` whose pairwise judgments carry calibrated σ(s·(r_A − r_B)).

    Args:
        judge: the scalar judge (:class:`~brrm.compose.judges.ScalarRewardJudge`).
        calibration: a ``scalar`` calibration.
    """

    def __init__(self, judge: Any, calibration: Calibration) -> None:
        self.inner, self.calibration = judge, calibration
        self.info = replace(judge.info, options={**judge.info.options, "calibration": calibration.hash})

    def judge_pairs(self, *args: Any, **kw: Any) -> list[PairwiseJudgment]:
        kw, reported = _reporting(kw, self.calibration.apply)
        return [reported.get(i) or self.calibration.apply(j) for i, j in enumerate(self.inner.judge_pairs(*args, **kw))]

    def judge(self, conversation: Any, response_a: str, response_b: str, /, **kw: Any) -> PairwiseJudgment:
        (out,) = self.judge_pairs([conversation], [response_a], [response_b], **kw)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __enter__(self) -> CalibratedScalarJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()


def _reporting(kw: dict[str, Any], apply: Any) -> tuple[dict[str, Any], dict[int, PairwiseJudgment]]:
    """``kw`` with its ``on_result`` callback (if any) given calibrated judgments, and the ones it was given
    (returned as they were reported: one object per item)."""
    report = kw.get("on_result")
    reported: dict[int, PairwiseJudgment] = {}
    if report is None:
        return kw, reported

    def got(i: int, j: PairwiseJudgment) -> None:
        reported[i] = apply(j)
        report(i, reported[i])

    return {**kw, "on_result": got}, reported


def calibrate(judge: Any, calibration: Calibration) -> Any:
    """``judge`` with ``calibration`` applied (a pairwise calibration to a pairwise judge, scalar to scalar).

    Raises:
        ConfigError: when the calibration's kind does not fit the judge's.
    """
    pairwise = str(judge.info.kind) == "brrm"
    want = "pairwise" if pairwise else "scalar"
    if calibration.kind != want:
        raise ConfigError(f"calibration is for {calibration.kind} judges, but kind {judge.info.kind!r} is {want}")
    if pairwise:
        judge.model = CalibratedPairJudge(judge.model, calibration)
        judge.info = replace(judge.info, options={**judge.info.options, "calibration": calibration.hash})
        return judge
    return CalibratedScalarJudge(judge, calibration)
