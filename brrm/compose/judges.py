"""The two :class:`~brrm.RewardJudge` implementations: every model kind becomes one here.

* :class:`PairwiseRewardJudge` over an ordered-pair judge (BR-RM): swap-order debiasing, P(response ≻
  reference) as a score, and group strategies whose judgments run batched across groups.
* :class:`ScalarRewardJudge` (:mod:`brrm.compose.scalar`) over a scalar reward model (Bradley–Terry, principle
  models): P(A ≻ B) = σ(r_A − r_B) with a tie margin.

Both have the same signatures and defaults (see :class:`brrm.types.RewardJudge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from brrm.compose.base import _Base, _groups, _ids, _labels, _report_all, _unscorable
from brrm.compose.scalar import ScalarRewardJudge
from brrm.compose.strategies import (
    GroupPlan,
    build_group,
    pairwise_cost,
    reference_reward,
    run_plans,
)
from brrm.compose.swap import judge_with_swap
from brrm.compose.vote import check_samples, judge_with_votes
from brrm.errors import ConfigError
from brrm.templates import is_blank, strip_reasoning
from brrm.types import (
    GroupResult,
    OrderedPairJudge,
    PairwiseJudgment,
    Progress,
    ScalarReward,
    Status,
    Verdict,
    check_bool,
    check_same_length,
)
from brrm.types.conversation import ConversationLike
from brrm.types.cost import JudgmentCost
from brrm.types.protocols import OnResult, OnStep, Principles
from brrm.types.strategies import check_strategy

__all__ = ["OnResult", "OnStep", "PairwiseRewardJudge", "PairwiseSurface", "ScalarRewardJudge"]


class PairwiseSurface(_Base):
    """What a judge of pairs builds on its ``judge_pairs``: P(response ≻ reference) as a score, and group strategies
    whose judgments run batched across groups (:class:`PairwiseRewardJudge`, and the judge cascade of
    :mod:`brrm.compose.cascade`). A subclass sets ``swap`` (its default; None: its stages' own)."""

    swap: bool | None

    def score(self, conversations: Sequence[ConversationLike],
              responses: Sequence[str], /, *, principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None,
              progress: Progress = None, on_result: OnResult = None) -> list[ScalarReward]:
        """P(response ≻ reference) per item, in [0, 1] (the judgment's p_a, else 1 / 0.5 / 0); N judgments.
        ``on_result(i, reward)`` is called as soon as item ``i`` is final.

        Raises:
            ConfigError: without ``references`` (a pairwise judge scores only against something), with
                principles, or on mismatched lengths.
        """
        if references is None:
            raise ConfigError("a pairwise judge scores a response against a reference: pass references=[...]")
        n = check_same_length(conversations=conversations, responses=responses, references=references)
        rids = _ids(ids, n)
        out: list[ScalarReward | None] = [_unscorable(responses[k], references[k], rids[k]) for k in range(n)]
        todo = [k for k in range(n) if out[k] is None]
        report = None
        if on_result is not None:
            for k, r in enumerate(out):
                if r is not None:
                    on_result(k, r)

            def report(t: int, jd: PairwiseJudgment) -> None:
                on_result(todo[t], reference_reward(jd, todo[t]))

        judgments = self.judge_pairs([conversations[k] for k in todo], [responses[k] for k in todo],
                                     [references[k] for k in todo], ids=[rids[k] for k in todo],
                                     principles=principles, progress=progress, on_result=report) if todo else []
        for k, jd in zip(todo, judgments, strict=True):
            out[k] = reference_reward(jd, k)
        return [r for r in out if r is not None]

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]:
        """Rank each group of responses to its conversation; every round's judgments of all groups run in one
        batch (see :mod:`brrm.compose.strategies` for the judgments each strategy costs).

        Raises:
            ConfigError: on an unknown strategy, ``scores`` (no scalar score), a missing reference, principles,
                or mismatched lengths.
        """
        convs = _groups(conversations, groups, references)
        strategy = check_strategy(strategy, pairwise=True, has_reference=references is not None)
        swap = False if strategy == "round_robin" else (self.swap if swap is None else check_bool("swap", swap))
        blank = [references is not None and is_blank(strip_reasoning(references[g])[0]) for g in range(len(groups))]
        plans = [GroupPlan(strategy, 0 if blank[g] else len(group), swap=bool(swap)) for g, group in enumerate(groups)]

        def text(g: int, k: int) -> str:
            return groups[g][k] if k < len(groups[g]) else references[g]  # type: ignore[index]

        def judge(triples: list[tuple[int, int, int]]) -> list[PairwiseJudgment]:
            return self.judge_pairs([convs[g] for g, _, _ in triples], [text(g, i) for g, i, _ in triples],
                                    [text(g, j) for g, _, j in triples], swap=swap, principles=principles,
                                    progress=progress)

        run_plans(plans, judge)
        missing = "the reference is empty: the group's responses are scored against it"
        return [plan.result() if not blank[g] else build_group(strategy, [
            ScalarReward.failed(Status.INVALID_INPUT, missing, id=str(k)) for k in range(len(groups[g]))],
            (0.0, 1.0), [], []) for g, plan in enumerate(plans)]


class PairwiseRewardJudge(PairwiseSurface):
    """The :class:`~brrm.RewardJudge` of an ordered-pair judge (BR-RM).

    Args:
        model: an :class:`~brrm.types.OrderedPairJudge` (e.g. :class:`brrm.judges.brrm.BRRMJudge`).
        swap: the default of every call's ``swap`` (judge both orders; disagreement is a tie).
        samples: self-consistency voting: independent two-turn judgments per presentation order, int >= 1
            (default 1, no voting); see :mod:`brrm.compose.vote`. Needs a model whose ``judge_ordered`` takes
            ``samples=`` (a sample index per item, which keys its sampler streams).

    Raises:
        ConfigError: when ``swap`` is not a bool, ``samples`` not an int >= 1, or ``samples`` > 1 for a model
            that cannot draw separate samples.
    """

    swap: bool

    def __init__(self, model: OrderedPairJudge, *, swap: bool = False, samples: int = 1) -> None:
        self.model = model
        self.swap = check_bool("swap", swap)
        self.samples = check_samples(samples)
        if samples > 1 and not getattr(model, "votes", False):
            raise ConfigError(f"samples={samples}: {type(model).__name__} draws no separate samples (its votes "
                              "trait is not set); use samples=1")
        self.info = replace(model.info, composition=replace(model.info.composition, swap=swap, samples=samples))

    def with_options(self, **overrides: object) -> PairwiseRewardJudge:
        """A variant on the same backend: ``swap`` and the model's settings (BR-RM: ``decoding``, the sampling
        keywords ``temperature``, ``top_p``, ``max_new_tokens``, ``max_total_tokens``, ``seed``, and the other
        ``BRRMConfig`` fields). Closing either closes the shared backend.

        Raises:
            ConfigError: on an option the model does not take (naming the valid ones) or an invalid value.
        """
        own = dict(overrides)
        swap = check_bool("swap", own.get("swap", self.swap))
        samples = check_samples(own.pop("samples", self.samples))
        variant = PairwiseRewardJudge(self._variant_model(own), swap=swap, samples=samples)
        return self._with_spec(variant, overrides)

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> JudgmentCost:
        """What a request runs: ``pairs``/``score`` n pairs (a scored response is judged against its reference)
        in one or both orders, ``group`` the strategy's judgments for a group of n; each times ``samples`` under
        self-consistency voting, two turns each (an upper bound: identical or empty responses are decided
        without a model call).

        Raises:
            ConfigError: on an unknown shape or strategy, ``scores``, n < 0, or ``principles`` (a pairwise judge
                takes none).
        """
        swap = self.swap if swap is None else check_bool("swap", swap)
        return pairwise_cost(shape, n, strategy=strategy, swap=swap, samples=self.samples, principles=principles)

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        """One judgment per (conversation, A, B), in input order; ``swap=None`` uses the judge's default.
        ``on_result(i, judgment)`` is called as soon as pair ``i`` is final (label set).

        Raises:
            ConfigError: on mismatched lengths, invalid inputs, or principles (a BR-RM judge takes none).
        """
        if principles is not None:
            raise ConfigError("this pairwise judge (BR-RM) takes no principle; principles are for {setting}",
                              field="kind", value="principle")
        n = check_same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b)
        labels = _labels(labels, n)
        swap = self.swap if swap is None else check_bool("swap", swap)
        report = on_result
        if on_result is not None and labels is not None:
            def report(i: int, j: PairwiseJudgment) -> None:
                on_result(i, replace(j, label=labels[i]))

        if self.samples > 1:  # the votes of a pair are known when the call returns: reported then
            out = judge_with_votes(self.model.judge_ordered, conversations, responses_a, responses_b, swap=swap,
                                   samples=self.samples, ids=_ids(ids, n), progress=progress)
            _report_all(out, report)
        else:
            out = judge_with_swap(self.model.judge_ordered, conversations, responses_a, responses_b, swap=swap,
                                  ids=_ids(ids, n), progress=progress, on_result=report, on_step=on_step)
        return [replace(j, label=labels[i]) for i, j in enumerate(out)] if labels is not None else out
