"""brrm judges as inspect_ai scorers: ``scorer=brrm_pairwise(model=...)`` or ``scorer=brrm_reward(model=...)``.

inspect_ai (UK AISI) calls a scorer once per sample as ``await score(state, target)`` and expects a ``Score``
(``inspect_ai.scorer``); ``Score.unscored(reason=...)`` keeps a sample in the log but out of every metric and
reducer (its value is NaN). Here:

* :func:`brrm_pairwise` judges the sample's output (``state.output.completion``) against a reference: the
  sample's target (``target.text``, default) or a reference model's output for the same input
  (``reference_model="openai/gpt-4o-mini"``, generated through inspect's own ``get_model``). Value: 1.0 when the
  output wins, 0.5 for a tie, 0.0 when the reference wins (the ``mean`` metric is the win rate).
* :func:`brrm_reward` gives the judge's scalar reward of the output (Bradley–Terry or principle models; a
  pairwise judge gives P(output ≻ target)).

Every ``Score`` carries ``answer`` (the verdict or reward), ``explanation`` (the dimensions turn 1 chose and its
analyses, or the judge's text) and ``metadata`` (``status``, ``reason``, ``p_a``, the judge's ``provenance``
and ``judge`` info). A judgment that failed (status not ``ok``) is an unscored sample with its status as the
``reason`` and brrm's reason as the explanation — never a number.

The judge is built once, on first use, in the process that scores: from a :class:`~brrm.RewardJudge`, from a
spec (anything with ``.load()``, e.g. a ``JudgeSpec``), or by :func:`brrm.load` from ``model`` and options. Judge
calls run in a worker thread, one at a time per scorer (inspect scores samples concurrently; a local model's
backend runs one batch at a time).

This module imports inspect_ai (``pip install -e '.[inspect]'`` in the clone); nothing else in brrm does.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, Unpack, runtime_checkable

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, RewardJudge, ScalarReward, Verdict
from brrm.types.jsonvalue import JSONDict

if TYPE_CHECKING:
    from inspect_ai.model import Model

    from brrm.load import LoadOptions

WIN_VALUE = {Verdict.A: 1.0, Verdict.TIE: 0.5, Verdict.B: 0.0}
"""Pairwise score value of each verdict (A = the sample's output, B = the reference)."""


_T = TypeVar("_T")


@runtime_checkable
class Loadable(Protocol):
    """What builds a judge: a :class:`~brrm.JudgeSpec` (or anything with its ``load``)."""

    def load(self) -> RewardJudge: ...


class _LazyJudge:
    """Builds the judge on first use (thread-safe) and serialises calls to it."""

    def __init__(self, judge: RewardJudge | Loadable | None, model: str | None, kind: str, backend: str,
                 options: LoadOptions) -> None:
        if judge is not None and (model is not None or options or kind != "auto" or backend != "transformers"):
            raise ConfigError("pass either judge= (a judge or spec) or model= with options, not both")
        self._given, self._model, self._kind, self._backend, self._options = judge, model, kind, backend, options
        self._judge: RewardJudge | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[RewardJudge], _T]) -> _T:
        with self._lock:
            if self._judge is None:
                self._judge = self._build()
            return fn(self._judge)

    def _build(self) -> RewardJudge:
        import brrm

        given = self._given
        if given is None:
            return brrm.load(self._model, kind=self._kind, backend=self._backend, **self._options)
        if isinstance(given, RewardJudge):
            return given
        if isinstance(given, Loadable):
            return given.load()
        raise ConfigError(f"judge must be a RewardJudge or a spec with .load(), got {type(given).__name__}")


def conversation(state: TaskState) -> str | list[dict[str, str]]:
    """The sample's input as a brrm conversation: the prompt string, or its messages as role/content dicts."""
    if isinstance(state.input, str):
        return state.input
    return [{"role": m.role, "content": m.text} for m in state.input]


def _meta(result: PairwiseJudgment | ScalarReward, judge: RewardJudge) -> JSONDict:
    p_a = result.p_a if isinstance(result, PairwiseJudgment) else math.nan
    out: JSONDict = {"status": result.status.value, "reason": result.reason,
                           "p_a": None if math.isnan(p_a) else p_a,
                           "provenance": result.provenance.to_dict() if result.provenance else None,
                           "judge": judge.info.to_dict()}
    if isinstance(result, PairwiseJudgment):
        out.update(winner=result.winner.value, consistent=result.consistent)
        if result.samples > 1:
            out.update(samples=result.samples, agreement=None if math.isnan(result.agreement) else result.agreement)
    return out


def explain(j: PairwiseJudgment) -> str:
    """The dimensions turn 1 chose and its analyses of the output (A) and the reference (B)."""
    lines = [f"verdict: {j.winner.value} (A = the output, B = the reference)"]
    if j.dimensions:
        lines.append("dimensions: " + ", ".join(j.dimensions))
    if j.analysis_a:
        lines.append(f"analysis of the output: {j.analysis_a}")
    if j.analysis_b:
        lines.append(f"analysis of the reference: {j.analysis_b}")
    if j.reason:
        lines.append(f"note: {j.reason}")
    return "\n".join(lines)


def pairwise_score(j: PairwiseJudgment, judge: RewardJudge) -> Score:
    """The inspect ``Score`` of one judgment of (output, reference); unscored when the judgment failed."""
    meta = _meta(j, judge)
    if not j.ok:
        return Score.unscored(reason=j.status.value, explanation=j.reason, metadata=meta)
    return Score(value=WIN_VALUE[j.winner], answer=j.winner.value, explanation=explain(j), metadata=meta)


def reward_score(r: ScalarReward, judge: RewardJudge) -> Score:
    """The inspect ``Score`` of one reward; unscored when it was not computed."""
    meta = _meta(r, judge)
    if not r.ok:
        return Score.unscored(reason=r.status.value, explanation=r.reason, metadata=meta)
    return Score(value=r.reward, answer=f"{r.reward:.6g}", explanation=r.text or r.reason or None, metadata=meta)


async def _reference(state: TaskState, target: Target, reference_model: str | Model | None) -> str:
    if reference_model is None:
        return target.text
    from inspect_ai.model import get_model

    model = get_model(reference_model) if isinstance(reference_model, str) else reference_model
    out = await model.generate(state.input)
    return out.completion


@scorer(metrics=[mean(), stderr()], name="brrm_pairwise")
def brrm_pairwise(judge: RewardJudge | Loadable | None = None, *, model: str | None = None,
                  reference_model: str | Model | None = None, kind: str = "auto", backend: str = "transformers",
                  **options: Unpack[LoadOptions]) -> Scorer:
    """Judge each sample's output against its target (or a reference model's output) with a brrm judge.

    Args:
        judge: a :class:`~brrm.RewardJudge`, or a spec with ``.load()``; None: built by :func:`brrm.load`.
        model: the judge's model for :func:`brrm.load` (None with no ``judge``: the embedded demo model).
        reference_model: an inspect model (a name for ``get_model`` or a ``Model``) whose output for the sample's
            input is the reference; None: the sample's target.
        kind, backend, **options: :func:`brrm.load`'s (``kind``, ``backend``, ``swap``, ``samples``,
            ``decoding``, …).

    Returns:
        An inspect scorer: value 1.0 / 0.5 / 0.0 (output wins / tie / reference wins), metrics mean and stderr.

    Raises:
        ConfigError: on the first sample, for an invalid judge or option (as :func:`brrm.load` raises).
    """
    lazy = _LazyJudge(judge, model, kind, backend, options)

    async def score(state: TaskState, target: Target) -> Score:
        reference = await _reference(state, target, reference_model)
        conv, output = conversation(state), state.output.completion

        def run(j: RewardJudge) -> Score:
            return pairwise_score(j.judge_pairs([conv], [output], [reference], ids=[str(state.sample_id)])[0], j)

        return await asyncio.to_thread(lazy.call, run)

    return score


@scorer(metrics=[mean(), stderr()], name="brrm_reward")
def brrm_reward(judge: RewardJudge | Loadable | None = None, *, model: str | None = None, kind: str = "auto",
                backend: str = "transformers", **options: Unpack[LoadOptions]) -> Scorer:
    """Each sample's output's scalar reward from a brrm judge (a pairwise judge: P(output ≻ target)).

    Args:
        judge: a :class:`~brrm.RewardJudge`, or a spec with ``.load()``; None: built by :func:`brrm.load`.
        model: the judge's model for :func:`brrm.load`.
        kind, backend, **options: :func:`brrm.load`'s (``kind``, ``principle``, …).

    Returns:
        An inspect scorer whose value is the reward (Bradley–Terry: unbounded logit scale, compare within one
        prompt; principle models: logit(Yes) − logit(No); pairwise judges: a probability in [0, 1]).
    """
    lazy = _LazyJudge(judge, model, kind, backend, options)

    async def score(state: TaskState, target: Target) -> Score:
        conv, output = conversation(state), state.output.completion

        def run(j: RewardJudge) -> Score:
            refs: Sequence[str] | None = [target.text] if j.info.needs_reference else None
            return reward_score(j.score([conv], [output], references=refs, ids=[str(state.sample_id)])[0], j)

        return await asyncio.to_thread(lazy.call, run)

    return score
