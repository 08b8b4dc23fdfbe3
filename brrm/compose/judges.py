"""The two :class:`~brrm.RewardJudge` implementations: every model kind becomes one here.

* :class:`PairwiseRewardJudge` over an ordered-pair judge (BR-RM): swap-order debiasing, P(response ≻
  reference) as a score, and group strategies whose judgments run batched across groups.
* :class:`ScalarRewardJudge` over a scalar reward model (Bradley–Terry, principle models): P(A ≻ B) =
  σ(r_A − r_B) with a tie margin (one scoring pass of 2N items serves N pairs; both orders give the same answer
  by construction, so ``swap`` never needs a second pass), and group strategies from one scoring pass.

Both have the same signatures and defaults (see :class:`brrm.types.RewardJudge`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Self

from brrm.compose.pairwise import pairwise_from_rewards
from brrm.compose.strategies import (
    GroupPlan,
    build_group,
    check_strategy,
    judgments_per_group,
    reference_reward,
    run_plans,
)
from brrm.compose.swap import judge_with_swap
from brrm.compose.vote import JudgmentCost, check_samples, judge_with_votes
from brrm.errors import ConfigError
from brrm.templates import is_blank, strip_reasoning
from brrm.types import (
    SHAPES,
    Conversation,
    GroupResult,
    JudgeInfo,
    OrderedPairJudge,
    PairwiseJudgment,
    Progress,
    ScalarReward,
    ScalarRewardModel,
    Status,
    Variable,
    Verdict,
    check_bool,
    check_choice,
    check_int,
    check_same_length,
    parse_label,
)
from brrm.types.conversation import ConversationLike
from brrm.types.protocols import Principles

OnResult = Callable[[int, Any], None] | None
OnStep = Callable[[int, int], None] | None
"""``on_step(rows, tokens)``: after each decoding step of a continuously batching backend, the rows in its batch
and the tokens the step added (for progress displays); judges without decoding steps never call it."""
"""``on_result(index, result)``: item ``index``'s final result (a judgment or reward), as soon as it is known, in
the calling thread; results still come back in order from the call."""


class _Base:
    """The single-item helpers, ``rank`` and resource handling, shared by both judges."""

    info: JudgeInfo
    model: Any

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        raise NotImplementedError

    def score(self, conversations: Sequence[ConversationLike],
              responses: Sequence[str], /, *, principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None,
              progress: Progress = None, on_result: OnResult = None) -> list[ScalarReward]:
        raise NotImplementedError

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]:
        raise NotImplementedError

    def judge(self, conversation: ConversationLike, response_a: str, response_b: str, /, *,
              swap: bool | None = None) -> PairwiseJudgment:
        """One pair; see ``judge_pairs``."""
        return self.judge_pairs([conversation], [response_a], [response_b], swap=swap)[0]

    def score_one(self, conversation: ConversationLike, response: str, /, *, principle: str | None = None,
                  reference: str | None = None) -> ScalarReward:
        """One response; see ``score``."""
        refs = None if reference is None else [reference]
        return self.score([conversation], [response], principles=principle, references=refs)[0]

    def rank(self, conversation: ConversationLike, responses: Sequence[str], /, *, strategy: str = "auto",
             reference: str | None = None, swap: bool | None = None, principles: Principles = None,
             progress: Progress = None) -> GroupResult:
        """One group; see ``rank_groups``."""
        refs = None if reference is None else [reference]
        return self.rank_groups([conversation], [responses], strategy=strategy, references=refs, swap=swap,
                                principles=principles, progress=progress)[0]

    def close(self) -> None:
        """Free the model (engines, threads, connections)."""
        self.model.close()

    def _variant_model(self, options: dict[str, Any]) -> Any:
        """The model with ``options`` (the model's own settings) applied, or the model itself when none.

        Raises:
            ConfigError: when options are given and the model makes no variants, or as its ``with_options``.
        """
        if not options:
            return self.model
        if not isinstance(self.model, Variable):
            raise ConfigError(f"{type(self.model).__name__} makes no variants; options {sorted(options)} cannot be "
                              "set on this judge")
        return self.model.with_options(**options)

    def _with_spec(self, variant: _Base, overrides: dict[str, Any]) -> _Base:
        """``variant`` whose info names the spec of this judge with ``overrides`` (None stays None)."""
        spec = self.info.spec
        if spec is not None:
            variant.info = replace(variant.info, spec=replace(spec, options={**spec.options, **overrides}))
        return variant

    def _check_cost(self, shape: str, n: int) -> None:
        check_choice("shape", shape, SHAPES)
        check_int("n", n, low=0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self.info
        return f"{type(self).__name__}(model={i.model!r}, kind={i.kind!r}, recipe={i.recipe!r}, backend={i.backend!r})"


def _report_all(results: Sequence[Any], on_result: OnResult) -> None:
    """Every result to ``on_result`` (a pass that finishes all its items at once)."""
    if on_result is not None:
        for i, r in enumerate(results):
            on_result(i, r)


def _groups(conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]],
            references: Sequence[str] | None) -> list[Conversation]:
    check_same_length(conversations=conversations, groups=groups)
    if references is not None:
        check_same_length(conversations=conversations, references=references)
    for g, group in enumerate(groups):
        if isinstance(group, str) or not isinstance(group, Sequence):
            raise ConfigError(f"groups[{g}] must be a list of response strings, got {type(group).__name__}")
    return [Conversation.coerce(c, where=f"conversations[{g}]") for g, c in enumerate(conversations)]


def _unscorable(response: Any, reference: Any, rid: str) -> ScalarReward | None:
    """Why P(response ≻ reference) cannot be a number (an empty response, a missing reference), or None."""
    if not isinstance(response, str) or not isinstance(reference, str):
        raise ConfigError(f"responses and references must be strings, got {type(response).__name__} and "
                          f"{type(reference).__name__}")
    if is_blank(strip_reasoning(reference)[0]):
        return ScalarReward.failed(Status.INVALID_INPUT, "the reference is empty: a response is scored against it",
                                   id=rid)
    if is_blank(strip_reasoning(response)[0]):
        return ScalarReward.failed(Status.EMPTY, "response is empty", id=rid)
    return None


def _labels(labels: Sequence[Any] | None, n: int) -> list[Verdict] | None:
    """Gold labels as verdicts (``A``/``B``/``tie``, ``1``/``2`` or :class:`Verdict`), checked."""
    if labels is None:
        return None
    if len(labels) != n:
        raise ConfigError(f"labels has {len(labels)} items, expected {n}")
    return [v if isinstance(v, Verdict) else parse_label(v, where=f"labels[{k}]") for k, v in enumerate(labels)]


def _ids(ids: Sequence[str] | None, n: int) -> list[str]:
    out = [str(x) for x in ids] if ids is not None else [""] * n
    if len(out) != n:
        raise ConfigError(f"ids has {len(out)} items, expected {n}")
    return out


class PairwiseRewardJudge(_Base):
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

    def __init__(self, model: OrderedPairJudge, *, swap: bool = False, samples: int = 1) -> None:
        import inspect

        self.model = model
        self.swap = check_bool("swap", swap)
        self.samples = check_samples(samples)
        if samples > 1 and "samples" not in inspect.signature(model.judge_ordered).parameters:
            raise ConfigError(f"samples={samples}: {type(model).__name__}.judge_ordered draws no separate samples "
                              "(it takes no samples= argument); use samples=1")
        extra = {"samples": samples} if samples > 1 else {}
        self.info = replace(model.info, options={**model.info.options, "swap": swap, **extra})

    def judgment_cost(self, pairs: int, *, swap: bool | None = None) -> JudgmentCost:
        """What ``judge_pairs`` of ``pairs`` pairs runs: pairs x orders x samples ordered judgments, 2 turns each
        (an upper bound: identical or empty responses are decided without a model call)."""
        swap = self.swap if swap is None else check_bool("swap", swap)
        return JudgmentCost(pairs, orders=2 if swap else 1, samples=self.samples, turns=2)

    def with_options(self, **overrides: Any) -> PairwiseRewardJudge:
        """A variant on the same backend: ``swap`` and the model's settings (BR-RM: ``decoding``, the sampling
        keywords ``temperature``, ``top_p``, ``max_new_tokens``, ``max_total_tokens``, ``seed``, and the other
        ``BRRMConfig`` fields). Closing either closes the shared backend.

        Raises:
            ConfigError: on an option the model does not take (naming the valid ones) or an invalid value.
        """
        from brrm.compose.vote import check_samples

        own = dict(overrides)
        swap = check_bool("swap", own.get("swap", self.swap))
        samples = check_samples(own.pop("samples", self.samples))
        variant = PairwiseRewardJudge(self._variant_model(own), swap=swap, samples=samples)
        return self._with_spec(variant, overrides)  # type: ignore[return-value]

    def cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None) -> int:
        """Ordered judgments (two-turn runs) a request makes: ``pairs``/``score`` n, twice with swap;
        ``group`` the strategy's count for a group of n (:func:`~brrm.compose.strategies.judgments_per_group`);
        each times ``samples`` under self-consistency voting.

        Raises:
            ConfigError: on an unknown shape or strategy, ``scores``, or n < 0.
        """
        self._check_cost(shape, n)
        swap = self.swap if swap is None else check_bool("swap", swap)
        if shape != "group":
            return n * (2 if swap else 1) * self.samples
        strategy = check_strategy(strategy, pairwise=True, has_reference=strategy == "reference")
        return judgments_per_group(strategy, n, swap=swap) * self.samples

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
            raise ConfigError("this pairwise judge (BR-RM) takes no principle; principles are for kind='principle'")
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
            for i, j in enumerate(out):
                if report is not None:
                    report(i, j)
        else:
            out = judge_with_swap(self.model.judge_ordered, conversations, responses_a, responses_b, swap=swap,
                                  ids=_ids(ids, n), progress=progress, on_result=report, on_step=on_step)
        return [replace(j, label=labels[i]) for i, j in enumerate(out)] if labels is not None else out

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
        plans = [GroupPlan(strategy, 0 if blank[g] else len(group), swap=swap) for g, group in enumerate(groups)]

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
        options = {**model.info.options, "margin": margin, "on_tie": on_tie.value}
        if self.principles:
            options["principle"] = list(self.principles)
        self.info = replace(model.info, options=options)

    def judgment_cost(self, pairs: int, *, swap: bool | None = None) -> JudgmentCost:
        """What ``judge_pairs`` of ``pairs`` pairs runs: one scoring pass per pair (its two responses scored
        once; ``swap`` cannot change a scalar comparison)."""
        return JudgmentCost(pairs, orders=1, samples=1, turns=1)


    def with_options(self, **overrides: Any) -> ScalarRewardJudge:
        """A variant on the same backend: ``margin``, ``principle`` and the model's settings (principle models:
        ``decoding``, the sampling keywords and the other ``PrincipleConfig`` fields; Bradley–Terry models:
        ``recipe``, ``max_length``, …); ``swap`` is accepted and changes nothing (σ(r_A − r_B) does not depend
        on the order). Closing either closes the shared backend.

        Raises:
            ConfigError: on an option the model does not take (naming the valid ones) or an invalid value.
        """
        own = dict(overrides)
        check_bool("swap", own.pop("swap", False))
        margin = own.pop("margin", self.margin)
        principle = own.pop("principle", list(self.principles) or None)
        variant = ScalarRewardJudge(self._variant_model(own), principle=principle, margin=margin, on_tie=self.on_tie)
        return self._with_spec(variant, overrides)  # type: ignore[return-value]

    def cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None) -> int:
        """Scored sequences a request makes (each response once per default principle): ``pairs`` 2n,
        ``score`` n, ``group`` n (n + 1 with the ``reference`` strategy); ``swap`` changes nothing.

        Raises:
            ConfigError: on an unknown shape or strategy, or n < 0.
        """
        self._check_cost(shape, n)
        if swap is not None:
            check_bool("swap", swap)
        per = max(1, len(self.principles))
        if shape != "group":
            return n * per * (2 if shape == "pairs" else 1)
        strategy = check_strategy(strategy, pairwise=False, has_reference=strategy == "reference")
        return (n + (strategy == "reference")) * per

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
                              "pairwise judges (kind='brrm')")
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
