"""Collects the examples of README.md and docs/ as tests (sybil; ``tests/docs_examples.py`` says how they run)."""

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.docs_examples import pytest_collect_file  # noqa: E402, F401
