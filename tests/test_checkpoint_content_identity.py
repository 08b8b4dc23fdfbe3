"""Checkpoint identity by content (issue 32, item 3): a renamed copy of a known checkpoint runs ``released`` with
its card's recipe and figures once brrm has seen the checkpoint's hub snapshot; an unknown checkpoint's dtype on
GPU is its config's ``torch_dtype``."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from brrm import identity, recipes
from brrm.backends.transformers.backend import resolve_dtype
from brrm.bench import get_benchmark
from brrm.bench.protocol import default_protocol
from brrm.bench.report import published_figure
from brrm.fingerprint import _file_digest, weights_fingerprint
from brrm.recipes import KNOWN
from brrm.testing import save_tiny_qwen3

BRRM_14B = "nvidia/Qwen3-Nemotron-14B-BRRM"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRRM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    """A tiny model standing in for the known checkpoint's hub snapshot."""
    return save_tiny_qwen3(tmp_path_factory.mktemp("snap") / "0123abcd", seed=7)


def test_a_renamed_copy_is_known_by_its_content_once_the_snapshot_was_seen(snapshot, cache, tmp_path, monkeypatch):
    copy = shutil.copytree(snapshot, tmp_path / "my-judge-v2")
    assert default_protocol(str(copy)) == "custom" and identity.learned() == {}
    monkeypatch.setattr(identity, "snapshot_folder", lambda hub_id: snapshot if hub_id == BRRM_14B else None)
    assert identity.learn_from_hub("someone/else", KNOWN) is None and identity.learned() == {}
    fingerprint = identity.learn_from_hub(BRRM_14B, KNOWN)
    assert fingerprint == weights_fingerprint(str(snapshot)) == weights_fingerprint(str(copy))
    assert identity.learned() == {fingerprint: BRRM_14B.lower()}
    assert recipes.known_id(str(copy)) == BRRM_14B.lower()
    assert default_protocol(str(copy)) == "released"
    assert published_figure(get_benchmark("rmbench"), str(copy)) == 85.9  # the 14B card's RM-Bench figure
    assert recipes.detect_kind(str(copy), recipes.model_config(str(copy))) == ("brrm", "brrm")


def test_other_content_is_not_the_known_checkpoint(snapshot, cache, tmp_path):
    identity.remember(BRRM_14B, snapshot, KNOWN)
    edited = shutil.copytree(snapshot, tmp_path / "edited")
    (edited / "tokenizer_config.json").write_text((edited / "tokenizer_config.json").read_text() + " ")
    other = save_tiny_qwen3(tmp_path / "other", seed=8)
    for folder in (edited, other):
        assert recipes.known_id(str(folder)) is None and default_protocol(str(folder)) == "custom"


def test_a_folder_named_like_a_known_checkpoint_teaches_nothing(snapshot, cache, tmp_path):
    named = shutil.copytree(snapshot, tmp_path / "Qwen3-Nemotron-14B-BRRM")
    assert recipes.known_id(str(named)) == BRRM_14B.lower()  # by folder name, as before
    assert identity.remember(str(named), named, KNOWN) is None and identity.learned() == {}


def test_a_hub_cache_blob_is_digested_by_its_name(tmp_path):
    content = b"weights"
    digest = hashlib.sha256(content).hexdigest()
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / digest).write_bytes(content)
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "model.safetensors").symlink_to(tmp_path / "blobs" / digest)
    assert _file_digest(tmp_path / "snap" / "model.safetensors") == digest


@pytest.mark.parametrize(("option", "cuda", "device", "config", "want"), [
    ("auto", True, "auto", {"torch_dtype": "float16"}, "float16"),
    ("auto", True, "cuda", {"dtype": "float16"}, "float16"),  # transformers 5 writes "dtype"
    ("auto", True, "cuda", {"torch_dtype": "bfloat16"}, "bfloat16"),
    ("auto", True, "cuda", {"torch_dtype": "float32"}, "bfloat16"),  # as vLLM's auto casts float32
    ("auto", True, "cuda", {}, "bfloat16"),
    ("auto", True, "cpu", {"torch_dtype": "float16"}, "float32"),
    ("auto", False, "auto", {"torch_dtype": "float16"}, "float32"),
    ("float32", True, "cuda", {"torch_dtype": "float16"}, "float32"),  # the user's dtype wins
])
def test_the_dtype_a_load_resolves_to(option, cuda, device, config, want):
    assert resolve_dtype(option, cuda=cuda, device=device, config=config) == want


def test_an_unknown_float16_checkpoint_loads_float16_on_gpu(tmp_path):
    import json

    import torch

    folder = save_tiny_qwen3(tmp_path / "fp16", dtype=torch.float16)
    config = recipes.model_config(str(folder))
    assert recipes.known_recipe(str(folder), config) is None
    declared = config.get("torch_dtype", config.get("dtype"))
    assert declared == "float16", json.dumps(config)[:200]
    assert resolve_dtype("auto", cuda=True, device="cuda", config=config) == "float16"
