"""GRPO groups: check the grouping of a batch, state its cost, and rank every group in one batched call.

GRPO samples ``num_generations`` completions per prompt and repeats each prompt that many times, consecutively,
in the batch (TRL's ``RepeatSampler``; verl's ``rollout.n`` with a shared ``uid``). This module never assumes
that: :func:`check_groups` verifies that each block of ``num_generations`` rows holds one prompt.

:func:`rank_in_groups` ranks all groups of a step through ``judge.rank_groups`` (every round's judgments of
every group in one backend call) and keeps failures out of the group baseline: a completion that could not be
judged gets no reward (``None`` for TRL, which keeps it out of the group mean and std) and never counts as a
loss or a tie for a sibling. Round-robin and reference rewards have that property already (a failed judgment
only removes one game). Circular and knockout do not: a completion whose every judgment failed leaves holes in
its neighbours' ring or bracket. For those, the group is ranked again without such completions (a *repair*
pass, batched across groups), so the others get exactly the rewards of the smaller group — the ring closes
over the completions that can be judged. A knockout match that fails cannot say which side caused it, so both
sides of a failed first match are left unscored.

Rewards never depend on the order of a group's completions: :func:`brrm.service.run.run` judges every group in the
canonical order of :mod:`brrm.service.order` and answers in the batch's order; identical completions get identical
rewards.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from brrm.errors import ConfigError
from brrm.service.items import GroupItem, RankCall, ScoreItem
from brrm.service.order import CanonicalGroup
from brrm.service.run import run
from brrm.types import ConversationLike, GroupResult, RewardJudge, ScalarReward, Status

GROUP_STRATEGIES = ("auto", "scores", "round_robin", "circular", "reference", "knockout")
"""Strategies of group mode (see :mod:`brrm.compose.strategies`); ``auto``: the judge's default."""

REPAIRED = ("circular", "knockout")
"""Strategies whose rewards depend on which siblings could be judged; they get a repair pass."""


def prompt_key(prompt: object) -> str:
    """A canonical text form of a prompt (a string, or a list of message dicts) for equality checks."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, sort_keys=True, default=str, ensure_ascii=False)


def check_groups(keys: Sequence[str], num_generations: int, *, what: str = "prompts") -> int:
    """The number of GRPO groups in a batch, after checking that rows come in blocks of one prompt.

    Args:
        keys: one canonical prompt per row (:func:`prompt_key`), B = G·num_generations rows.
        num_generations: completions per prompt (the trainer's ``num_generations``), >= 1.
        what: the name of the checked column, for error messages.

    Returns:
        G, the number of groups.

    Raises:
        ConfigError: when B is not a multiple of ``num_generations``, or a block mixes prompts.
    """
    n, g = len(keys), num_generations
    if n % g:
        raise ConfigError(f"group mode got {n} completions, not a multiple of num_generations={g}; GRPO repeats each "
                          f"prompt num_generations times, so set num_generations to the trainer's value")
    for start in range(0, n, g):
        odd = next((k for k in range(start + 1, start + g) if keys[k] != keys[start]), None)
        if odd is not None:
            raise ConfigError(f"{what} {start}..{start + g - 1} are not one prompt repeated num_generations={g} times "
                              f"(row {odd} differs from row {start}); group mode needs each prompt's completions "
                              "consecutive, as GRPO trainers produce them")
    return n // g


def judgments_per_step(judge: RewardJudge, strategy: str, num_generations: int, groups: int, *, swap: bool) -> int:
    """Model judgments (two-turn BR-RM runs, voting samples included; 0 for scalar models, which judge no pairs) of
    one step's first pass, as the judge counts them (:meth:`~brrm.RewardJudge.cost`).

    Example: circular with swap, 8 prompts × 8 completions: 8 · 16 = 128.
    """
    if not judge.info.pairwise:
        return 0
    if strategy == "reference" and num_generations == 1:  # each completion against its reference
        return judge.cost("score", groups, swap=swap)
    return groups * judge.cost("group", num_generations, strategy=strategy, swap=swap)


@dataclass
class GroupOutcome:
    """One step's group rewards.

    Attributes:
        rewards: one reward per row (B), failed ones with their status and reason.
        results: every :class:`GroupResult` computed (first pass, then repair passes), for statistics.
        repaired: groups ranked again without their unjudgeable completions.
        repair_skipped: groups left unrepaired because the judgment budget would be exceeded.
        planned: model judgments planned for the first pass.
    """

    rewards: list[ScalarReward]
    results: list[GroupResult] = field(default_factory=list)
    repaired: int = 0
    repair_skipped: int = 0
    planned: int = 0


def _judgment_count(result: GroupResult, swap: bool) -> int:
    return sum(max(1, len(jd.sub_judgments)) if swap else 1 for jd in result.judgments if jd.attempts)


def _rewards(result: GroupResult, soft: bool, texts: Sequence[str]) -> list[ScalarReward]:
    """The group's rewards; ``soft``: expected win rates, identical ``texts`` pooled as the hard rewards are
    (:meth:`~brrm.service.order.CanonicalGroup.pool_values`)."""
    if not soft:
        return list(result.rewards)
    rates = CanonicalGroup.of(texts).pool_values(result.expected_win_rates())
    return [replace(r, reward=rates[k]) if r.ok and math.isfinite(rates[k]) else r
            for k, r in enumerate(result.rewards)]


def _culprits(result: GroupResult) -> set[int]:
    """Completions that took part in judgments and none of whose judgments produced a verdict."""
    seen: dict[int, bool] = {}
    n = len(result.rewards)
    for (i, j), jd in zip(result.pairs, result.judgments, strict=True):
        for k in (i, j):
            if k < n:
                seen[k] = seen.get(k, False) or jd.ok
    return {k for k, any_ok in seen.items() if not any_ok}


def rank_in_groups(judge: RewardJudge, conversations: Sequence[ConversationLike], responses: Sequence[str], *,
                   num_generations: int, strategy: str, swap: bool, soft: bool,
                   references: Sequence[str] | None, max_judgments: int | None) -> GroupOutcome:
    """Rank every GRPO group of a step (rows already checked by :func:`check_groups`).

    Args:
        judge: the judge.
        conversations: B conversations (each group's rows share one).
        responses: B completion texts.
        num_generations: group size G, >= 1 (1 only with ``reference``).
        strategy: a concrete strategy (not ``auto``).
        swap: judge both presentation orders inside each judgment.
        soft: rewards are expected win rates from P(A ≻ B) instead of hard win rates.
        references: one reference per row (``reference`` strategy), else None.
        max_judgments: the step's judgment budget; None: unlimited.

    Returns:
        The step's :class:`GroupOutcome`.

    Raises:
        ConfigError: when the first pass alone would exceed ``max_judgments`` (before any model call).
    """
    g = num_generations
    n_groups = len(responses) // g
    planned = judgments_per_step(judge, strategy, g, n_groups, swap=swap)
    if max_judgments is not None and planned > max_judgments:
        raise ConfigError(f"this step needs {planned} judgments ({n_groups} groups × "
                          f"{planned // max(n_groups, 1)} for strategy {strategy!r} on groups of {g}"
                          f"{' with swap' if swap else ''}), over max_judgments_per_step={max_judgments}; raise the "
                          "budget, use fewer completions per prompt, or a cheaper strategy (circular: G per group)")
    convs = [conversations[k * g] for k in range(n_groups)]
    if g == 1:  # only "reference": P(response ≻ reference), the reference strategy's reward
        assert references is not None
        rewards = run(judge, [ScoreItem(c, r, reference=ref) for c, r, ref in zip(convs, responses, references,
                                                                                     strict=True)])
        _check_length(rewards, len(responses))
        return GroupOutcome([replace(r, id=str(k)) for k, r in enumerate(rewards)], planned=planned)
    groups = [list(responses[k * g:(k + 1) * g]) for k in range(n_groups)]
    refs = [references[k * g] for k in range(n_groups)] if references is not None else None
    results = run(judge, [GroupItem(c, tuple(grp), refs[k] if refs is not None else None)
                          for k, (c, grp) in enumerate(zip(convs, groups, strict=True))],
                  call=RankCall(strategy, swap, reference=refs is not None))
    _check_length(results, n_groups)
    outcome = GroupOutcome([], list(results), planned=planned)
    members = [list(range(g)) for _ in range(n_groups)]  # original indices behind each group's current result
    current = list(results)
    used = sum(_judgment_count(r, swap) for r in results)
    if strategy in REPAIRED:
        used = _repair(judge, convs, groups, current, members, outcome, strategy=strategy, swap=swap,
                       max_judgments=max_judgments, used=used)
    for k in range(n_groups):
        row: list[ScalarReward | None] = [None] * g
        rewards = _rewards(current[k], soft, [groups[k][i] for i in members[k]])
        for pos, orig in enumerate(members[k]):
            row[orig] = rewards[pos]
        for orig in range(g):
            if row[orig] is None:
                row[orig] = _dropped(results[k], orig)
        outcome.rewards += [replace(r, id=str(k * g + i)) for i, r in enumerate(row) if r is not None]
    return outcome


def _repair(judge: RewardJudge, convs: list[ConversationLike], groups: list[list[str]], current: list[GroupResult],
            members: list[list[int]], outcome: GroupOutcome, *, strategy: str, swap: bool,
            max_judgments: int | None, used: int) -> int:
    """Re-rank groups without completions none of whose judgments succeeded, until none is left (batched)."""
    while True:
        todo = []
        for k, result in enumerate(current):
            bad = _culprits(result)
            keep = [orig for pos, orig in enumerate(members[k]) if pos not in bad]
            if bad and len(keep) >= 2:
                todo.append((k, keep))
        if not todo:
            return used
        cost = sum(judge.cost("group", len(keep), strategy=strategy, swap=swap) for _, keep in todo)
        if max_judgments is not None and used + cost > max_judgments:
            outcome.repair_skipped += len(todo)
            return used
        again = run(judge, [GroupItem(convs[k], tuple(groups[k][i] for i in keep)) for k, keep in todo],
                    call=RankCall(strategy, swap))
        _check_length(again, len(todo))
        for (k, keep), result in zip(todo, again, strict=True):
            current[k], members[k] = result, keep
        outcome.results += again
        outcome.repaired += len(todo)
        used += sum(_judgment_count(r, swap) for r in again)


def _dropped(first: GroupResult, orig: int) -> ScalarReward:
    """The reward of a completion left out by a repair pass: its first-pass failure."""
    reward = first.rewards[orig]
    if not reward.ok:
        return reward
    return ScalarReward.failed(Status.BACKEND_ERROR, "every judgment of this completion failed")


def _check_length(results: Sequence[object], expected: int) -> None:
    """Raise when the judge returned a result list of the wrong length (never zip it misaligned)."""
    if len(results) != expected:
        raise ConfigError(f"the judge returned {len(results)} results for {expected} inputs; refusing to align "
                          "rewards to the wrong completions")
