"""Card dtype and recipe by checkpoint identity (issue 20, item 7): a local copy of Qwen-3-Nemotron-32B-Reward in a
renamed folder is still known by its ``config.json``; other checkpoints are not mistaken for it."""

from __future__ import annotations

import importlib
import json

import pytest

import brrm
from brrm import recipes
from brrm.testing import save_tiny_qwen3

load_module = importlib.import_module("brrm.load")  # the module (brrm.load is also the function's name)

NEMOTRON_32B = recipes.KNOWN["nvidia/qwen-3-nemotron-32b-reward"]


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("renamed") / "my-reward-copy", sequence_classification=True)


def _mimic(folder, tmp_path, **sizes):
    """A folder holding the tiny classifier's config.json with ``sizes`` written over it."""
    config = {**json.loads((folder / "config.json").read_text()), **sizes}
    out = tmp_path / "weights-v2"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_renamed_copy_gets_the_card_dtype_by_its_config(tiny_classifier, tmp_path, monkeypatch):
    copy = _mimic(tiny_classifier, tmp_path, hidden_size=5120, num_hidden_layers=64)
    config = recipes.model_config(str(copy))
    assert recipes.known_recipe(str(copy)) is None  # the folder name tells nothing
    assert recipes.known_recipe(str(copy), config) is NEMOTRON_32B
    assert recipes.detect_kind(str(copy), config) == ("bt", "qwen3_nemotron")
    assert recipes.card_dtype(str(copy), config, cuda=True) == "float16"
    assert recipes.card_dtype(str(copy), config, cuda=False) is None
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    opts: dict = {}
    load_module._card_dtype(str(copy), str(copy), opts)
    assert opts == {"dtype": "float16"}
    chosen = {"dtype": "bfloat16"}
    load_module._card_dtype(str(copy), str(copy), chosen)
    assert chosen == {"dtype": "bfloat16"}  # the user's dtype wins


@pytest.mark.parametrize("sizes", [{}, {"hidden_size": 5120, "num_hidden_layers": 40},
                                   {"hidden_size": 5120, "num_hidden_layers": 64, "id2label": {"0": "a", "1": "b"}},
                                   {"hidden_size": 5120, "num_hidden_layers": 64,
                                    "architectures": ["Qwen3ForCausalLM"]}])
def test_other_checkpoints_are_not_mistaken_for_it(tiny_classifier, tmp_path, sizes):
    other = _mimic(tiny_classifier, tmp_path, **sizes)
    config = recipes.model_config(str(other))
    assert recipes.known_recipe(str(other), config) is None
    assert recipes.card_dtype(str(other), config, cuda=True) is None


def test_load_picks_the_recipe_by_identity(tiny_classifier, monkeypatch):
    """Through ``brrm.load``: with the identity rule set to the tiny model's sizes, the renamed folder runs the
    card's recipe (``/nothink`` and the empty think block), not the generic one."""
    assert brrm.load(str(tiny_classifier)).info.recipe == "sequence_classification"
    rule = {**recipes.IDENTITIES["nvidia/qwen-3-nemotron-32b-reward"], "hidden_size": 64, "num_hidden_layers": 2}
    monkeypatch.setitem(recipes.IDENTITIES, "nvidia/qwen-3-nemotron-32b-reward", rule)
    judge = brrm.load(str(tiny_classifier))
    assert judge.info.kind == "bt" and judge.info.recipe == "qwen3_nemotron"
