"""Model kind ``bt``: Bradley–Terry scalar reward models (a one-label classification head, or a vocabulary logit),
its one :class:`~brrm.registry.KindEntry` (:data:`KIND`), its builder and its detection from a checkpoint's config."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from brrm.errors import ConfigError
from brrm.registry import KindEntry
from brrm.types.jsonvalue import JSONDict
from brrm.types.options import build, split_keywords

if TYPE_CHECKING:
    from brrm.backends.base import Backend
    from brrm.types import RewardJudge
    from brrm.types.calibration import Calibration


def builder(name: str, opts: Mapping[str, object],
            calibration: Calibration | None) -> Callable[[Backend, str | None], RewardJudge]:
    """Check a Bradley–Terry model's options and return the maker of its judge: a
    :class:`~brrm.compose.ScalarRewardJudge` over :class:`BradleyTerryRewardModel`, with the card's recipe of a
    known checkpoint (by id, folder name or config) unless ``recipe`` is given.

    Raises:
        ConfigError: for an invalid option.
    """
    from brrm.compose import ScalarRewardJudge
    from brrm.compose.calibrated import calibrated_scalar
    from brrm.compose.options import ScalarOptions
    from brrm.recipes import known_recipe_of, model_config
    from brrm.reward_models.bradley_terry import BradleyTerryRewardModel, BTConfig

    margin = build(ScalarOptions, split_keywords(ScalarOptions, opts)).margin
    config = build(BTConfig, split_keywords(BTConfig, opts))  # every option checked before anything loads

    def make(backend: Backend, source: str | None) -> RewardJudge:
        mine = config
        if "recipe" not in opts:  # the card's recipe for a known checkpoint: by id, folder name or its config
            known = known_recipe_of(name, model_config(source) if source is not None else None, "bt")
            mine = replace(config, recipe=known)
        return calibrated_scalar(ScalarRewardJudge(BradleyTerryRewardModel.from_config(backend, mine), margin=margin),
                                 calibration)

    return make


def detect(name: str, config: JSONDict | None) -> str | None:
    """``auto`` when ``config`` is a sequence classifier (a Bradley–Terry head); None otherwise.

    Raises:
        ConfigError: for a sequence classifier with other than one label.
    """
    from brrm.recipes import architectures, num_labels

    if "ForSequenceClassification" not in " ".join(architectures(config)):
        return None
    labels = num_labels(config)
    if labels not in (None, 1):
        raise ConfigError(f"{name!r} is a sequence classifier with {labels} labels; a Bradley–Terry reward model "
                          "has exactly one")
    return "auto"


KIND = KindEntry(
    traits={"pairwise": False, "takes_principle": False, "needs_reference": False, "generates": False},
    options=("brrm.reward_models.bradley_terry:BTConfig", "brrm.compose.options:ScalarOptions"),
    builder=builder, group="scalar models (bt, principle)", recipes="brrm.reward_models.bradley_terry:RECIPES",
    detect="brrm.reward_models.bt_kind:detect")
"""Bradley–Terry: scalar, not generative; a one-label sequence classifier is detected as one."""
