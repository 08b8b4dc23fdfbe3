"""The :class:`~brrm.RewardJudge` of a scalar reward model (Bradley–Terry, principle models): P(A ≻ B) =
σ(r_A − r_B) with a tie margin (one scoring pass of 2N items serves N pairs; both orders give the same answer by
construction, so ``swap`` never needs a second pass), and group strategies from one scoring pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from brrm.compose.base import _Base, _groups, _ids, _labels, _report_all
from brrm.compose.pairwise import pairwise_from_rewards
from brrm.compose.strategies import (
    GroupPlan,
    build_group,
    run_plans,
    scalar_judge_cost,
)
from brrm.errors import ConfigError
from brrm.types import (
    GroupResult,
    PairwiseJudgment,
    Progress,
    ScalarReward,
    ScalarRewardModel,
    Status,
    Verdict,
    check_bool,
    check_same_length,
)
from brrm.types.conversation import ConversationLike
from brrm.types.cost import JudgmentCost
from brrm.types.protocols import OnResult, OnStep, Principles
from brrm.types.strategies import check_strategy


class ScalarRewardJudge(_Base):
    """The :class:`~brrm.RewardJudge` of a scalar reward model (Bradley–Terry or principle model).

    Args:
        model: a :class:`~brrm.types.ScalarRewardModel`.
        principle: the default principle of principle models: one string, or several (a response's reward is
            then its mean over them, ok only when every principle scored ok); None for Bradley–Terry models.
        margin: |r_A − r_B| ≤ margin is a tie (reward units, finite, >= 0).
        on_tie: what a tie becomes (see :func:`~brrm.compose.pairwise.pairwise_from_rewards`).

    Raises:
        ConfigError: on an invalid margin or on_tie.
    """

    def __init__(self, model: ScalarRewardModel, *, principle: str | Sequence[str] | None = None,
                 margin: float = 0.0, on_tie: Verdict = Verdict.TIE) -> None:
        self.model = model
        self.principles = (principle,) if isinstance(principle, str) else tuple(principle or ())
        self.margin, self.on_tie = margin, on_tie
        pairwise_from_rewards(ScalarReward(0.0, Status.OK), ScalarReward(0.0, Status.OK), margin=margin,
                              on_tie=on_tie)  # validates margin and on_tie now
        self.info = replace(model.info, composition=replace(model.info.composition, margin=margin,
                                                            on_tie=on_tie.value, principles=self.principles))

    def with_options(self, **overrides: object) -> ScalarRewardJudge:
        """A variant on the same backend: ``margin``, ``principle`` and the model's settings (principle models:
        ``decoding``, the sampling keywords and the other ``PrincipleConfig`` fields; Bradley–Terry models:
        ``recipe``, ``max_length``, …); ``swap`` is accepted and changes nothing (σ(r_A − r_B) does not depend
        on the order). Closing either closes the shared backend.

        Raises:
            ConfigError: on an option the model does not take (naming the valid ones) or an invalid value.
        """
        from brrm.compose.options import PrincipleOptions
        from brrm.types.options import build

        own = dict(overrides)
        mine = build(PrincipleOptions, {"swap": own.pop("swap", False), "margin": own.pop("margin", self.margin),
                                        "principle": own.pop("principle", list(self.principles) or None)})
        variant = ScalarRewardJudge(self._variant_model(own), principle=mine.principle, margin=mine.margin,
                                    on_tie=self.on_tie)
        return self._with_spec(variant, overrides)

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> JudgmentCost:
        """Scored sequences a request makes, each response once per principle (``principles`` when the request
        names its own, else the judge's default principles): ``pairs`` 2n, ``score`` n, ``group`` n (n + 1 with the
        ``reference`` strategy); ``swap`` changes nothing.

        Raises:
            ConfigError: on an unknown shape or strategy, n < 0, ``principles`` < 1, or ``principles`` for a
                Bradley–Terry model (it takes none).
        """
        if swap is not None:
            check_bool("swap", swap)
        return scalar_judge_cost(self.info, shape, n, strategy=strategy, principles=principles)

    def score(self, conversations: Sequence[ConversationLike],
              responses: Sequence[str], /, *, principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None,
              progress: Progress = None, on_result: OnResult = None) -> list[ScalarReward]:
        """The model's reward per (conversation, response); ``principles`` default to the judge's.
        ``on_result(i, reward)`` is called for every item once the scoring pass is done.

        Raises:
            ConfigError: with references (a scalar model scores each response on its own), a principle for a
                Bradley–Terry model or none for a principle model, mismatched lengths or invalid inputs.
        """
        if references is not None:
            raise ConfigError("a scalar reward model scores each response on its own; references are for "
                              "pairwise judges ({setting})", field="kind", value="brrm")
        n = check_same_length(conversations=conversations, responses=responses)
        rids = _ids(ids, n)
        if principles is not None or len(self.principles) <= 1:
            chosen = principles if principles is not None else (self.principles[0] if self.principles else None)
            out = self.model.score(conversations, responses, principles=chosen, ids=rids)
        else:
            out = self._mean_over_principles(conversations, responses, rids)
        if progress:
            progress(float(n))
        _report_all(out, on_result)
        return out

    def _mean_over_principles(self, conversations: Sequence[ConversationLike], responses: Sequence[str],
                              ids: list[str]) -> list[ScalarReward]:
        p = len(self.principles)
        flat = self.model.score([c for c in conversations for _ in range(p)], [r for r in responses for _ in range(p)],
                                principles=[q for _ in responses for q in self.principles],
                                ids=[i for i in ids for _ in range(p)])
        out = []
        for i in range(len(responses)):
            row = flat[i * p:(i + 1) * p]
            joined = " | ".join(self.principles)
            bad = next((r for r in row if not r.ok), None)
            if bad is not None:
                out.append(replace(bad, principle=joined))
                continue
            out.append(replace(row[0], reward=sum(r.reward for r in row) / p, principle=joined,
                               logits=tuple(r.reward for r in row), text=""))
        return out

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        """Judge N pairs from one scoring pass over the 2N responses (``swap`` cannot change the result);
        ``on_result(i, judgment)`` is called for every pair once that pass is done.

        Raises:
            ConfigError: on mismatched lengths or invalid inputs.
        """
        n = check_same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b)
        if swap is not None:
            check_bool("swap", swap)
        rids = _ids(ids, n)
        labels = _labels(labels, n)
        per_item = principles if isinstance(principles, str) or principles is None else [*principles, *principles]
        rewards = self.score([*conversations, *conversations], [*responses_a, *responses_b], principles=per_item,
                             ids=[*rids, *rids], progress=(lambda x: progress(x / 2)) if progress else None)
        out = [pairwise_from_rewards(rewards[i], rewards[n + i], margin=self.margin, on_tie=self.on_tie,
                                     id=rids[i], label=labels[i] if labels is not None else Verdict.NONE)
               for i in range(n)]
        _report_all(out, on_result)
        return out

    def _derived(self, rewards: list[ScalarReward]) -> Callable[[list[tuple[int, int, int]]], list[PairwiseJudgment]]:
        """A free judge over already computed rewards (σ(r_i − r_j), no model call)."""

        def judge(triples: list[tuple[int, int, int]]) -> list[PairwiseJudgment]:
            return [pairwise_from_rewards(rewards[i], rewards[j], margin=self.margin, on_tie=self.on_tie)
                    for _, i, j in triples]

        return judge

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]:
        """Rank each group from one scoring pass over every response (and reference) of every group.

        ``scores`` keeps the model's rewards and derives the win matrix from all ordered pairs; the other
        strategies apply σ(r_i − r_j) to the same rewards (no further model calls).
        """
        convs = _groups(conversations, groups, references)
        strategy = check_strategy(strategy, pairwise=False, has_reference=references is not None)
        texts = [[*group, *([references[g]] if references is not None else [])] for g, group in enumerate(groups)]
        flat_conv = [convs[g] for g, t in enumerate(texts) for _ in t]
        flat = self.score(flat_conv, [r for t in texts for r in t], principles=principles, progress=progress)
        rewards, pos = [], 0
        for t in texts:
            rewards.append(flat[pos:pos + len(t)])
            pos += len(t)
        out = []
        for g, group in enumerate(groups):
            n, rw = len(group), rewards[g]
            if strategy == "scores":
                pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
                judged = [pairwise_from_rewards(rw[i], rw[j], margin=self.margin, on_tie=self.on_tie) for i, j in pairs]
                out.append(build_group("scores", [replace(r, id=str(k)) for k, r in enumerate(rw)],
                                       (-float("inf"), float("inf")), pairs, judged, n_scored=n))
                continue
            plan = GroupPlan(strategy, n)
            run_plans([plan], self._derived(rw))
            out.append(replace(plan.result(), n_scored=len(rw)))
        return out
