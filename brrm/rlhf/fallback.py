"""What a trainer gets for a completion brrm could not score: nothing, a group-neutral value, or a constant.

A failed item (any non-``ok`` :class:`~brrm.types.ScalarReward`) has no reward. How a trainer should see it
depends on whether it can take a missing value:

* ``"none"`` — the item's reward is ``None``. TRL (1.16) takes it: a completion for which *every* reward
  function returned ``None`` is unscorable, left out of its group's baseline and given zero advantage
  (``GRPOTrainer._generate_and_score_completions``). Next to a second reward function it is not: TRL sums the
  functions with ``nansum``, so under ``multi_objective_aggregation="sum_then_normalize"`` (TRL's default) the
  failed brrm term counts as 0.0 in that completion's sum and in its group's mean (under
  ``"normalize_then_sum"`` each function is normalised over its non-NaN values first, and the ``None`` is
  neutral).
* ``"group_mean"`` — the mean of the ``ok`` rewards of the item's own GRPO group (same prompt / same ``uid``):
  substituting the group mean leaves the group's mean unchanged, so the item's own contribution to its
  advantage is exactly 0 before any std scaling — neutral under any GRPO aggregation, for trainers that need a
  number (verl's ``reward_score``, TRL with several reward functions). A group with no ``ok`` reward gets
  ``constant``.
* a number — that constant for every failed item (the old ``fallback_score`` behaviour).

Whatever the value, the item stays marked failed (``ok`` False, its status and reason) in the logged metrics
and in verl's ``reward_extra_info``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from brrm.errors import ConfigError
from brrm.types import ScalarReward

FAILED_POLICIES = ("none", "group_mean")
"""Named policies for a failed item's reward; a finite number is the constant policy."""


def check_failed_reward(name: str, value: object) -> str | float:
    """Validate a failed-reward policy: ``"none"``, ``"group_mean"`` or a finite number.

    Raises:
        ConfigError: naming ``name`` and the valid values.
    """
    if isinstance(value, str) and value in FAILED_POLICIES:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and float(value) == float(value) \
            and abs(float(value)) != float("inf"):
        return float(value)
    raise ConfigError(f"{name} must be 'none', 'group_mean' or a finite number, got {value!r}")


def fill_failed(rewards: Sequence[ScalarReward], groups: Sequence[Hashable], policy: str | float, *,
                constant: float | None = 0.0) -> list[float | None]:
    """The trainer-facing reward of each item under ``policy``.

    Args:
        rewards: B results, ok or failed.
        groups: B group keys (GRPO groups: the prompt, or verl's ``uid``); items with equal keys are one group.
        policy: ``"none"`` (failed → None), ``"group_mean"`` (failed → mean of its group's ok rewards, or
            ``constant`` when the group has none), or a float (failed → that float).
        constant: the value of a failed item in a group without any ok reward (``group_mean`` only); None
            where the trainer takes a missing value (TRL).

    Returns:
        B floats (ok items: their reward) or ``None`` (``"none"`` policy only).

    Raises:
        ValueError: when ``rewards`` and ``groups`` differ in length (a programming error).
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys")
    if policy == "none":
        return [r.reward if r.ok else None for r in rewards]
    if not isinstance(policy, str):
        return [r.reward if r.ok else float(policy) for r in rewards]
    sums: dict[Hashable, list[float]] = {}
    for r, g in zip(rewards, groups, strict=True):
        if r.ok:
            sums.setdefault(g, []).append(r.reward)
    means = {g: sum(v) / len(v) for g, v in sums.items()}
    return [r.reward if r.ok else means.get(g, constant) for r, g in zip(rewards, groups, strict=True)]
