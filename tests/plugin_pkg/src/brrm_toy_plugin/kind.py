"""Model kind ``toylen``: a scalar reward of ``toy_scale`` per token of the response (a toy; a real kind's model
reads its backend's model), and its one :class:`~brrm.registry.KindEntry`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from brrm.registry import KindEntry
from brrm.types import JudgeInfo, ScalarReward, Status, check_float
from brrm.types.options import build, option, split_keywords


@dataclass(frozen=True)
class ToyLenConfig:
    """The toy kind's settings."""

    toy_scale: float = option(1.0, help="reward per token of the response, >= 0 (default 1)")

    def __post_init__(self) -> None:
        check_float("toy_scale", self.toy_scale, low=0)

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> ToyLenConfig:
        return cls(float(record["toy_scale"]))  # type: ignore[arg-type]


class ToyLenModel:
    """A :class:`~brrm.types.ScalarRewardModel`: ``toy_scale`` × the response's tokens on the backend's tokenizer."""

    def __init__(self, backend: object, config: ToyLenConfig) -> None:
        self.backend, self.config = backend, config
        info = backend.info  # type: ignore[attr-defined]
        self.info = JudgeInfo(info.model, "toylen", "toylen", info.name, "-", "-", "scores", config=config,
                              record={"toy_scale": config.toy_scale})

    def score(self, conversations: Sequence[object], responses: Sequence[str], /, *, principles: object = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        counts = self.backend.count(list(responses))  # type: ignore[attr-defined]
        return [ScalarReward(self.config.toy_scale * n, Status.OK, id=i, input_tokens=n)
                for n, i in zip(counts, ids or [""] * len(counts), strict=True)]

    def close(self) -> None:
        self.backend.close()  # type: ignore[attr-defined]


def builder(name: str, opts: Mapping[str, object], calibration: object) -> object:
    from brrm.compose import ScalarRewardJudge

    config = build(ToyLenConfig, split_keywords(ToyLenConfig, opts))  # checked before anything loads
    return lambda backend, source: ScalarRewardJudge(ToyLenModel(backend, config))


KIND = KindEntry(traits={"pairwise": False, "takes_principle": False, "needs_reference": False, "generates": False},
                 options=(ToyLenConfig,), builder=builder, group="toy kind (toylen)")
