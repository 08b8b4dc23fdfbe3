"""Collects the examples of README.md and docs/ as tests (sybil; ``tests/docs_examples.py`` says how they run)."""

import importlib.util
import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")

# sybil comes with the dev extra; a venv without it (the vLLM tier's) runs its tests without the docs examples,
# and the main tier's tests/test_docs_site.py fails where sybil is missing, so the examples never skip silently
if importlib.util.find_spec("sybil") is not None:
    from tests.docs_examples import pytest_collect_file  # noqa: F401

HEAVIEST_FIRST = (
    "tests/test_continuous.py", "tests/test_serve_schema.py", "tests/test_request_isolation.py",
    "tests/test_service_http.py", "tests/test_invariance_matrix.py", "tests/test_arena_ray.py", "tests/test_arena.py",
    "tests/test_serve_faults.py", "tests/test_single_flight.py", "tests/test_audit_kill.py",
    "tests/test_remote_judge.py", "tests/test_serve_liveness.py", "tests/test_judge_tiny.py", "tests/test_voting.py",
    "tests/test_cli.py", "tests/test_embedded.py", "tests/test_slots_vs_hf.py", "tests/test_service_load_remote.py",
)
"""Test files of 20-80 s each (``pytest --durations=0`` on the 2-core box, summed per file), longest first. The suite
runs on 2 xdist workers a file at a time (``--dist loadfile``); xdist's own order (files with the most tests first)
started the one-test, 60 s schemathesis file last, and the wall time then ran a minute past half the summed time.
Longest first, the small files fill in at the end. A file missing here only runs in its place in the collection."""


def pytest_collection_modifyitems(items):
    """The files of :data:`HEAVIEST_FIRST` first, in that order; the others after them in collection order."""
    rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
