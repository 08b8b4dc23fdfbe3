"""Collects the examples of README.md and docs/ as tests (sybil; ``tests/docs_examples.py`` says how they run)."""

import importlib.util
import os
import sys

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_name, "1")
# the bytecode of brrm's and the tests' modules is cached (in __pycache__/, which .gitignore covers) even where the
# environment says PYTHONDONTWRITEBYTECODE, for this run and the CLIs, servers and workers it starts: without it every
# one of those ~100 interpreters compiles the modules it imports from source again (collection alone: about 22 s of
# CPU per xdist worker, 11 s with the cache); installed packages are compiled when pip installs them
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# xdist's workers share the machine's CPUs (pyproject.toml: three workers): each one's torch gets its share of them
# for intra-op threads (one each on a 2-core box), not brrm's default of every usable CPU (brrm/threads.py), which
# would put six OpenMP threads on two cores; on the 2-core box that costs a quarter more CPU for the same tests and
# no wall time back. Set before anything imports brrm or torch in this process; the CLIs, servers and Ray workers it
# starts inherit it. A user's own OMP_NUM_THREADS wins; tests/test_threads.py checks brrm's choice in clean
# interpreters, and tests/test_invariance_matrix.py sets 1, 2 and 4 threads itself.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    import brrm.threads  # its import chose for this process; brrm imports no torch

    if brrm.threads.CHOICE.threads_by == "brrm":
        os.environ["OMP_NUM_THREADS"] = str(max(1, brrm.threads.usable_cpus() // _WORKERS))
        os.environ.pop(brrm.threads.MARKER, None)  # the processes the tests start keep it, as a user's choice
        brrm.threads.CHOICE = brrm.threads.choose()  # and this process says so (the CLI prints it)
# every Ray instance the tests and the docs' examples start binds the loopback (Ray's switch, read when Ray is imported
# by each of its processes; tests/ray_support.py says more), never this machine's outward address
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# sybil comes with the dev extra; a venv without it (the vLLM tier's) runs its tests without the docs examples,
# and the main tier's tests/test_docs_site.py fails where sybil is missing, so the examples never skip silently
if importlib.util.find_spec("sybil") is not None:
    from tests.docs_examples import pytest_collect_file, pytest_runtest_makereport  # noqa: F401
