"""Scalar reward models: one forward pass gives one reward per (conversation, response).

:class:`~brrm.reward_models.bradley_terry.BradleyTerryRewardModel` covers Bradley–Terry reward models with a
one-label sequence-classification head and the Nemotron recipes (``DESIGN.md`` §3). Principle-following
(RLBFF) models think before they answer, so they live with the generative judges in
:mod:`brrm.judges.principle`. Both implement :class:`brrm.types.ScalarRewardModel`; :mod:`brrm.compose`
turns either into a pairwise judge and a group ranker.

Importing this package is cheap; torch and transformers are imported by the model module itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brrm.backends.transformers.bucketing import bucket_by_length
    from brrm.reward_models.bradley_terry import BradleyTerryRewardModel, BTConfig

__all__ = ["BTConfig", "BradleyTerryRewardModel", "bucket_by_length"]


def __getattr__(name: str) -> Any:
    if name == "bucket_by_length":
        from brrm.backends.transformers.bucketing import bucket_by_length

        return bucket_by_length
    if name in ("BradleyTerryRewardModel", "BTConfig"):
        from brrm.reward_models import bradley_terry

        return getattr(bradley_terry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
