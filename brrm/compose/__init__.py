"""Composition: every model kind becomes a :class:`~brrm.RewardJudge` here.

* :mod:`~brrm.compose.swap` — swap-order debiasing (both orders, disagreement is a tie);
* :mod:`~brrm.compose.pairwise` — scalar → pairwise (P(A ≻ B) = σ(r_A − r_B), tie margin), win-rate arithmetic;
* :mod:`~brrm.compose.strategies` — pairwise → scalar over groups (reference, round-robin, circular, knockout),
  batched across groups;
* :mod:`~brrm.compose.judges` — :class:`PairwiseRewardJudge` (BR-RM) and :class:`ScalarRewardJudge`
  (Bradley–Terry, principle models);
* :mod:`~brrm.compose.cascade` — :class:`CascadeJudge`: a first judge decides alone where it is confident, a second
  judge decides the rest.
"""

from __future__ import annotations

from typing import Any

from brrm.compose.cascade import CascadeJudge, Confidence
from brrm.compose.judges import PairwiseRewardJudge, ScalarRewardJudge
from brrm.compose.pairwise import adjusted_win_rate, pairwise_from_rewards, rank_by_win_rate, sigmoid
from brrm.compose.strategies import (
    GroupPlan,
    judgments_per_group,
    pairwise_cost,
    run_plans,
    scalar_cost,
    scalar_judge_cost,
)
from brrm.compose.swap import combine, judge_with_swap, mirror
from brrm.errors import ConfigError
from brrm.types import OrderedPairJudge, ScalarRewardModel

__all__ = [
    "CascadeJudge",
    "Confidence",
    "GroupPlan",
    "PairwiseRewardJudge",
    "ScalarRewardJudge",
    "adjusted_win_rate",
    "as_reward_judge",
    "combine",
    "judge_with_swap",
    "judgments_per_group",
    "mirror",
    "pairwise_cost",
    "pairwise_from_rewards",
    "rank_by_win_rate",
    "run_plans",
    "scalar_cost",
    "scalar_judge_cost",
    "sigmoid",
]


def as_reward_judge(model: object, **options: Any) -> PairwiseRewardJudge | ScalarRewardJudge:
    """Wrap a model in the one interface: an ordered-pair judge (``judge_ordered``) or a scalar model (``score``).

    Args:
        model: an :class:`~brrm.types.OrderedPairJudge` or :class:`~brrm.types.ScalarRewardModel`
            (already-wrapped judges are returned as they are).
        **options: passed to :class:`PairwiseRewardJudge` (``swap``) or :class:`ScalarRewardJudge`
            (``principle``, ``margin``, ``on_tie``).

    Raises:
        ConfigError: when ``model`` is neither.
    """
    if isinstance(model, PairwiseRewardJudge | ScalarRewardJudge):
        return model
    if isinstance(model, OrderedPairJudge):
        return PairwiseRewardJudge(model, **options)
    if isinstance(model, ScalarRewardModel):
        return ScalarRewardJudge(model, **options)
    raise ConfigError(f"{type(model).__name__} has neither judge_ordered(...) nor score(...)")
