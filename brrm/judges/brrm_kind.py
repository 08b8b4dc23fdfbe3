"""Model kind ``brrm``: the two-turn BR-RM pairwise judge (nvidia/Qwen3-Nemotron-14B-BRRM and -8B), its one
:class:`~brrm.registry.KindEntry` (:data:`KIND`) and its builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from brrm.errors import ConfigError
from brrm.registry import KindEntry
from brrm.types import SamplingConfig
from brrm.types.options import build, split_keywords

if TYPE_CHECKING:
    from brrm.backends.base import Backend
    from brrm.types import RewardJudge
    from brrm.types.calibration import Calibration


def builder(name: str, opts: Mapping[str, object],
            calibration: Calibration | None) -> Callable[[Backend, str | None], RewardJudge]:
    """Check BR-RM's options (``opts``: its flat :func:`brrm.load` keywords) and return the maker of its judge: a
    :class:`~brrm.compose.PairwiseRewardJudge` (swap, self-consistency voting) over :class:`BRRMJudge`.

    Raises:
        ConfigError: for an invalid option, or voting (``samples`` > 1) under greedy decoding.
    """
    from brrm.compose import PairwiseRewardJudge
    from brrm.compose.calibrated import calibrated_ordered
    from brrm.compose.options import VoteOptions
    from brrm.judges.brrm import BRRMConfig, BRRMJudge

    samples = build(VoteOptions, split_keywords(VoteOptions, opts)).samples  # self-consistency voting
    sampling = build(SamplingConfig, {}).override(opts)
    config = build(BRRMConfig, {**split_keywords(BRRMConfig, opts), "sampling": sampling})
    if samples > 1 and config.sampling.greedy:
        raise ConfigError(f"samples={samples} with temperature 0: greedy decoding gives {samples} identical "
                          "judgments; set temperature > 0 (published: 1.0) or samples=1")
    return lambda backend, source: PairwiseRewardJudge(calibrated_ordered(BRRMJudge(backend, config), calibration),
                                                       swap=config.swap, samples=samples)


KIND = KindEntry(
    traits={"pairwise": True, "takes_principle": False, "needs_reference": True, "generates": True},
    options=("brrm.judges.brrm_config:BRRMConfig", "brrm.types:SamplingConfig", "brrm.compose.options:VoteOptions"),
    builder=builder, group="judge (BR-RM)")
"""BR-RM: pairwise, generative; no recipe keyword (one prompt protocol), known by id only."""
