"""Benchmark fixtures (run with ``pytest benchmarks -s``; figures are printed and kept in extra_info)."""

from __future__ import annotations

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")
# One intra-op thread: on a shared 2-core machine OpenMP spin-waiting makes multi-threaded timings of tiny
# models swing by 20x when anything else runs; ratios measured single-threaded are stable.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny():
    from brrm.testing import build_tiny_qwen3

    return build_tiny_qwen3()


@pytest.fixture(scope="session")
def tiny_exact():
    """Tiny random Qwen3 on the exact Qwen3 tokenizer (151,669-token vocabulary)."""
    from brrm.testing import build_qwen3_tokenizer, build_tiny_qwen3

    return build_tiny_qwen3(build_qwen3_tokenizer())


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Benchmarks run in one process: the suite's ``-n 3`` (pyproject addopts) would disable pytest-benchmark and
    time each figure beside another worker's load."""
    if getattr(config.option, "numprocesses", None):
        config.option.numprocesses = None
        config.option.dist = "no"
