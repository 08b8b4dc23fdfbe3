"""Known checkpoints and how to tell a model's kind: the facts :func:`brrm.load` decides from.

Sources: the model cards of the named checkpoints (``DESIGN.md`` §3). A kind is decided from a known id or
from the model's own config (a one-label sequence-classification head is a Bradley–Terry model); anything
else is a :class:`~brrm.errors.ConfigError` listing the kinds — never a silent guess.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from brrm.errors import ConfigError
from brrm.fingerprint import hub_file
from brrm.types import KINDS
from brrm.types.jsonvalue import JSONDict


@dataclass(frozen=True)
class Recipe:
    """How a known checkpoint is run.

    Attributes:
        kind: one of :data:`brrm.KINDS`.
        recipe: the recipe within the kind (``brrm``; ``sequence_classification`` / ``qwen3_nemotron`` /
            ``llama_nemotron``; ``qwen3_genrm`` / ``llama_reward``).
        published: benchmark figures the model card reports (name -> percent), for tables.
        gpu_dtype: the dtype the model card runs it in on GPUs ("" = brrm's default, bfloat16).
    """

    kind: str
    recipe: str
    published: tuple[tuple[str, float], ...] = ()
    gpu_dtype: str = ""


KNOWN: dict[str, Recipe] = {
    "nvidia/qwen3-nemotron-14b-brrm": Recipe("brrm", "brrm", (("RewardBench", 92.1), ("RM-Bench", 85.9),
                                                                ("RMB", 74.7))),
    "nvidia/qwen3-nemotron-8b-brrm": Recipe("brrm", "brrm", (("RewardBench", 91.0), ("RM-Bench", 85.0),
                                                               ("RMB", 71.8))),
    "nvidia/qwen-3-nemotron-32b-reward": Recipe("bt", "qwen3_nemotron", (("RM-Bench", 81.9), ("JudgeBench", 72.3)),
                                                 gpu_dtype="float16"),
    "nvidia/llama-3.1-nemotron-70b-reward-hf": Recipe("bt", "llama_nemotron"),
    "nvidia/llama-3.3-nemotron-70b-reward": Recipe("bt", "llama_nemotron"),
    "nvidia/llama-3.3-nemotron-70b-reward-multilingual": Recipe("bt", "llama_nemotron"),
    "nvidia/qwen3-nemotron-32b-genrm-principle": Recipe("principle", "qwen3_genrm"),
    "nvidia/llama-3.3-nemotron-70b-reward-principle": Recipe("principle", "llama_reward"),
}
"""Checkpoints brrm knows by id (lower-case); reported figures are the model cards' (BR-RM: RewardBench,
RM-Bench, RMB; Qwen-3-Nemotron-32B-Reward: RM-Bench, JudgeBench)."""

IDENTITIES: dict[str, dict[str, object]] = {
    "nvidia/qwen-3-nemotron-32b-reward": {"model_type": "qwen3", "architectures": ("Qwen3ForSequenceClassification",),
                                          "hidden_size": 5120, "num_hidden_layers": 64, "num_labels": 1},
}
"""Known checkpoints recognised by their ``config.json`` (whatever their folder is called): the fields that must
all match. Qwen-3-Nemotron-32B-Reward is a one-label ``AutoModelForSequenceClassification`` head (its card) on
Qwen3-32B, whose sizes are hidden_size 5120 and num_hidden_layers 64 (Qwen/Qwen3-32B ``config.json``); no other
known checkpoint is such a head. The generative checkpoints (BR-RM, the principle models) have their base
model's config, so a config cannot tell them from it: they are known by id or folder name only."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def known_recipe(name: str, config: JSONDict | None = None) -> Recipe | None:
    """The recipe of a known checkpoint (:func:`known_id`); None when nothing matches."""
    key = known_id(name, config)
    return KNOWN[key] if key is not None else None


def known_id(name: str, config: JSONDict | None = None) -> str | None:
    """Which known checkpoint (a key of :data:`KNOWN`) ``name`` is: by id, by the folder name of a local copy, by
    its ``config`` (the parsed ``config.json``) matching an entry of :data:`IDENTITIES`, else by content — a local
    folder whose fingerprint was learned from the known checkpoint's hub snapshot (:mod:`brrm.identity`); None
    when nothing matches."""
    low = name.lower().rstrip("/")
    if low in KNOWN:
        return low
    tail = low.rsplit("/", 1)[-1]
    named = next((key for key in KNOWN if key.split("/", 1)[1] == tail), None)
    if named is not None:
        return named
    if config is not None:
        by_config = next((key for key, fields in IDENTITIES.items() if _matches(config, fields)), None)
        if by_config is not None:
            return by_config
    from brrm.identity import content_identity

    return content_identity(name)


def known_recipe_of(name: str, config: JSONDict | None, kind: str) -> str:
    """The recipe of a known checkpoint (:func:`known_recipe`) when it is of ``kind``, else ``auto``."""
    known = known_recipe(name, config)
    return known.recipe if known is not None and known.kind == kind else "auto"


def architectures(config: JSONDict | None) -> tuple[str, ...]:
    """The ``architectures`` a parsed ``config.json`` names (none when it names none)."""
    found = (config or {}).get("architectures")
    return tuple(str(a) for a in found) if isinstance(found, list) else ()


def num_labels(config: JSONDict | None) -> int | None:
    """The number of labels of a classification head's ``config.json`` (``num_labels`` or ``id2label``), or None."""
    labels = (config or {}).get("num_labels")
    if isinstance(labels, int) and labels:
        return labels
    names = (config or {}).get("id2label")
    return (len(names) or None) if isinstance(names, dict) else None


def _matches(config: JSONDict, fields: dict[str, object]) -> bool:
    """Whether every entry of ``fields`` is ``config``'s (labels and architectures read as the functions above)."""
    read = {"num_labels": num_labels, "architectures": architectures}
    return all((read[key](config) if key in read else config.get(key)) == want for key, want in fields.items())


def card_dtype(name: str, config: JSONDict | None, *, cuda: bool) -> str | None:
    """The dtype a known checkpoint's card runs it in on GPUs (e.g. ``float16`` for Qwen-3-Nemotron-32B-Reward,
    also in a renamed folder: :func:`known_recipe` by identity), or None (off GPU, or no card dtype)."""
    known = known_recipe(name, config)
    return known.gpu_dtype if cuda and known is not None and known.gpu_dtype else None


def looks_like_hub_id(name: str) -> bool:
    """``owner/name`` with no path syntax (``./``, ``/``, ``~``)."""
    return bool(_HUB_ID.match(name)) and not name.startswith((".", "~"))


def model_config(name: str) -> JSONDict | None:
    """The model's ``config.json`` from a local directory or the local Hugging Face cache; None when neither
    has it (never touches the network)."""
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        file = path / "config.json"
        return _json_object(file) if file.is_file() else None
    if not looks_like_hub_id(name):
        return None
    cached = hub_file(name)
    return _json_object(cached) if cached is not None else None


def _json_object(path: Path) -> JSONDict | None:
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def detect_kind(name: str, config: JSONDict | None) -> tuple[str, str]:
    """(kind, recipe) of a model from a known id, or from its config by each kind's ``detect``
    (:class:`~brrm.registry.KindEntry`; a one-label sequence classifier is a Bradley–Terry model).

    Raises:
        ConfigError: when neither tells (listing the kinds and how to pass one).
    """
    from brrm.registry import KIND_REGISTRY, resolve

    known = known_recipe(name, config)
    if known is not None:
        return known.kind, known.recipe
    for kind, entry in KIND_REGISTRY.items():
        recipe = resolve(entry.detect)(name, config) if entry.detect is not None else None
        if recipe is not None:
            return kind, recipe
    archs = " ".join(architectures(config))
    what = f"its config names {archs}" if archs else "its config could not be read"
    raise ConfigError(f"cannot tell the kind of {name!r} ({what}): a causal LM can be a BR-RM judge or a "
                      f"principle model; pass kind= (--kind on the command line) one of {', '.join(KINDS)}")
