"""Model kind ``principle``: RLBFF principle-following reward models (nvidia/Qwen3-Nemotron-32B-GenRM-Principle,
nvidia/Llama-3.3-Nemotron-70B-Reward-Principle), its one :class:`~brrm.registry.KindEntry` (:data:`KIND`) and its
builder, which reads the checkpoint's own generation defaults."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.registry import KindEntry
from brrm.types import SamplingConfig, check_choice
from brrm.types.options import build, split_keywords

if TYPE_CHECKING:
    from brrm.backends.base import Backend
    from brrm.types import RewardJudge
    from brrm.types.calibration import Calibration

CARD_BUDGETS = {"max_new_tokens": 16000, "max_total_tokens": 40960}
"""Qwen3-Nemotron-32B-GenRM-Principle's ``card`` decoding: up to 16,000 new tokens (issue 9's reading of the card);
the total is Qwen3-32B's 40,960-token context, cut further to the backend's own context."""

GENERATION_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
"""What transformers' ``generate`` uses for a sampling field a checkpoint's generation config leaves unset
(transformers 5.x ``GenerationConfig._get_default_generation_params``)."""


def generation_config(source: str | None) -> dict[str, object]:
    """Sampling defaults from the checkpoint's ``generation_config.json`` (local dir or HF cache; no network), as
    transformers' ``generate`` reads them: with ``do_sample`` its temperature, top_k and top_p, each unset one
    taking :data:`GENERATION_DEFAULTS` (so ``do_sample`` without a temperature samples at 1.0, never greedy);
    greedy without ``do_sample``; {} when there is none."""
    if source is None:
        return {}
    from brrm.fingerprint import hub_file
    from brrm.recipes import looks_like_hub_id

    path = Path(source) / "generation_config.json"
    if not path.is_file() and looks_like_hub_id(source):
        path = hub_file(source, "generation_config.json") or path
    if not path.is_file():
        return {}
    gen = json.loads(path.read_text())
    if not gen.get("do_sample"):
        return {"temperature": 0.0}
    out = {k: gen[k] if isinstance(gen.get(k), int | float) else v for k, v in GENERATION_DEFAULTS.items()}
    return {"temperature": float(out["temperature"]), "top_p": float(out["top_p"]), "top_k": int(out["top_k"])}


def _sampling(opts: Mapping[str, object], defaults: Mapping[str, object]) -> SamplingConfig:
    """The sampling settings ``opts`` (flat keywords) set over ``defaults`` (by field name)."""
    return build(SamplingConfig, defaults).override(opts)


def builder(name: str, opts: Mapping[str, object],
            calibration: Calibration | None) -> Callable[[Backend, str | None], RewardJudge]:
    """Check a principle model's options and return the maker of its judge: a
    :class:`~brrm.compose.ScalarRewardJudge` (principles, margin) over :class:`PrincipleJudge`, its prompt format
    the known checkpoint's (the embedded demo: ``llama_reward``) unless ``recipe`` is given; greedy by default, the
    card's budgets under ``qwen3_genrm`` with ``decoding="card"``, and the checkpoint's generation config over both.

    Raises:
        ConfigError: for an invalid option or recipe.
    """
    from brrm.compose import ScalarRewardJudge
    from brrm.compose.calibrated import calibrated_scalar
    from brrm.compose.options import PrincipleOptions
    from brrm.embedded import EMBEDDED_MODEL_ID
    from brrm.judges.principle import FORMATS, PrincipleConfig, PrincipleJudge
    from brrm.recipes import known_recipe_of, model_config

    scalar = build(PrincipleOptions, split_keywords(PrincipleOptions, opts))
    default = known_recipe_of(name, model_config(name), "principle")
    if default == "auto" and name == EMBEDDED_MODEL_ID:
        default = "llama_reward"
    fmt = check_choice("recipe", opts.get("recipe", default), ("auto", *FORMATS))
    card = fmt == "qwen3_genrm" and opts.get("decoding", "card") == "card"
    defaults: dict[str, object] = {"temperature": 0.0, **(CARD_BUDGETS if card else {})}
    rest = {**split_keywords(PrincipleConfig, opts), "format": fmt}
    build(PrincipleConfig, {**rest, "sampling": _sampling(opts, defaults)})  # every option checked before loading

    def make(backend: Backend, source: str | None) -> RewardJudge:
        sampling = _sampling(opts, {**defaults, **generation_config(source)})
        config = build(PrincipleConfig, {**rest, "sampling": sampling})
        judge = ScalarRewardJudge(PrincipleJudge(backend, config), principle=scalar.principle, margin=scalar.margin)
        return calibrated_scalar(judge, calibration)

    return make


KIND = KindEntry(
    traits={"pairwise": False, "takes_principle": True, "needs_reference": False, "generates": True},
    options=("brrm.judges.principle:PrincipleConfig", "brrm.types:SamplingConfig",
             "brrm.compose.options:PrincipleOptions"),
    builder=builder, group="scalar models (bt, principle)", recipes="brrm.judges.principle_format:FORMATS")
"""Principle models: scalar, generative, steered by principles; the recipe is the prompt format."""
