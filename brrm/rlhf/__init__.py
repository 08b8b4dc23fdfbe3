"""brrm judges inside RLHF loops: TRL reward functions, verl ``compute_score`` and a group-aware verl manager.

* :func:`trl_reward` — a TRL ``reward_funcs`` entry (sync or async; scalar or GRPO-group pairwise).
* :class:`brrm.JudgeSpec` — :func:`brrm.load`'s arguments, so a reward pickles as a spec and each process
  loads its own judge.
* :mod:`brrm.rlhf.verl` — an async ``compute_score`` for verl's reward loop (local judge or a ``brrm serve`` URL),
  with a per-sample timeout; :mod:`brrm.rlhf.verl_manager` — a group-aware verl reward manager.

Importing this package is cheap (no torch, no trl, no verl).
"""

from brrm.rlhf.groups import check_groups, judgments_per_step
from brrm.rlhf.recipe import JudgeSource
from brrm.rlhf.trl import AsyncBrrmReward, BrrmReward, TRLRewardConfig, trl_reward

__all__ = [
    "AsyncBrrmReward",
    "BrrmReward",
    "JudgeSource",
    "TRLRewardConfig",
    "check_groups",
    "judgments_per_step",
    "trl_reward",
]
