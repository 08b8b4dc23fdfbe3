"""The options of the composition over a model (:mod:`brrm.compose.judges`): voting for pairwise judges, the
tie margin and principles for scalar ones. Frozen, validated dataclasses whose fields are :func:`brrm.load`
keywords and CLI flags (:mod:`brrm.types.options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from brrm.compose.vote import check_samples
from brrm.errors import ConfigError
from brrm.types.config import check_bool, check_float
from brrm.types.options import Flag, option


@dataclass(frozen=True)
class VoteOptions:
    """Self-consistency voting of a pairwise judge (:mod:`brrm.compose.vote`).

    Raises:
        ConfigError: when ``samples`` is not an int >= 1.
    """

    samples: int = option(1, flag=Flag(metavar="K"),
                          help="self-consistency voting: K independent judgments per order, majority verdict, "
                               "int >= 1 (default 1)")

    def __post_init__(self) -> None:
        check_samples(self.samples)


@dataclass(frozen=True)
class ScalarOptions:
    """How a scalar reward model's rewards become pairwise judgments (:class:`~brrm.compose.ScalarRewardJudge`).

    Raises:
        ConfigError: naming the field and its valid range.
    """

    margin: float = option(0.0, help="scalar models: |r_A - r_B| <= margin is a tie, >= 0 (default 0)")
    swap: bool = option(False, flag=Flag(store=True),
                        help="accepted and changes nothing: sigma(r_A - r_B) does not depend on the order")

    def __post_init__(self) -> None:
        object.__setattr__(self, "margin", check_float("margin", self.margin, low=0))
        check_bool("swap", self.swap)


@dataclass(frozen=True)
class PrincipleOptions(ScalarOptions):
    """A principle model's composition: :class:`ScalarOptions` and the default principle(s).

    Raises:
        ConfigError: when ``principle`` is not a non-empty string or a non-empty list of them.
    """

    principle: str | tuple[str, ...] | None = option(
        None, flag=Flag(repeat=True),
        help="principle for a principle model (repeatable: several are averaged when judging pairs)")

    def __post_init__(self) -> None:
        super().__post_init__()
        p = self.principle
        if isinstance(p, list):
            object.__setattr__(self, "principle", p := tuple(p))
        if p is not None and not (isinstance(p, str) and p.strip()) and not (
                isinstance(p, tuple) and p and all(isinstance(x, str) and x.strip() for x in p)):
            raise ConfigError(f"principle must be a non-empty string or a list of them, got {p!r}", field="principle")
