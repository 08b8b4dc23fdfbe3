"""The examples of ``README.md`` and ``docs/*.md``, run by ``pytest -q`` through sybil (the root ``conftest.py``).

Every ````` ```python ````` and ````` ```bash ````` block is an example. Blocks of one page run in order in one
namespace (Python) and one scratch folder (both), which holds a link to the repository's ``examples/`` and is
removed afterwards, so examples write nothing into the checkout. A block that needs a GPU, a hub checkpoint, a
running server or minutes of CPU is preceded by ``<!-- skip: next "why" -->`` and reported as skipped with that
reason; ``<!-- skip: next if(not HAVE_SHARED, reason="…") -->`` skips where ``../shared`` data is absent. Shell
blocks run under ``bash -euo pipefail`` with this interpreter's ``bin/`` first on ``PATH`` and the offline
variables of :func:`brrm.testing.offline` set, each within :data:`SHELL_TIMEOUT_S`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

REPO = Path(__file__).resolve().parents[1]
SHELL_TIMEOUT_S = 300
"""Seconds one shell block may run before it fails (the executed blocks take seconds)."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TORCH_COMPILE_DISABLE": "1"}


def _shared() -> Path:
    return Path(os.environ.get("BRRM_SHARED_DIR", REPO.parent / "shared"))


def _setup(namespace: dict[str, Any]) -> None:
    """A scratch folder per page, made the working directory; ``examples/`` linked into it."""
    scratch = Path(tempfile.mkdtemp(prefix="brrm-docs-"))
    (scratch / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    namespace["_docs_cwd"] = os.getcwd()
    namespace["_docs_scratch"] = scratch
    namespace["HAVE_SHARED"] = (_shared() / "data").is_dir()
    os.chdir(scratch)


def _teardown(namespace: dict[str, Any]) -> None:
    os.chdir(namespace["_docs_cwd"])
    shutil.rmtree(namespace["_docs_scratch"], ignore_errors=True)


def run_shell(example: Example) -> None:
    """Run one bash block in the page's scratch folder; a non-zero exit fails with the block's output."""
    env = {**os.environ, **OFFLINE, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", example.parsed], cwd=example.namespace["_docs_scratch"],
                          env=env, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode} from\n{example.parsed}\nstdout:\n{done.stdout[-4000:]}\n"
                             f"stderr:\n{done.stderr[-4000:]}")


DOCS = Sybil(
    parsers=[SkipParser(), PythonCodeBlockParser(), CodeBlockParser(language="bash", evaluator=run_shell)],
    patterns=["README.md", "docs/*.md"],
    path=str(REPO),
    setup=_setup,
    teardown=_teardown,
    name="docs",
)
pytest_collect_file = DOCS.pytest()
