"""The examples of ``README.md`` and ``docs/*.md``, run by ``pytest -q`` through sybil (the root ``conftest.py``).

Every ````` ```python ````` and ````` ```bash ````` block is an example. Blocks of one page run in order in one
namespace (Python) and one scratch folder (both), which holds a link to the repository's ``examples/`` and is
removed afterwards, so examples write nothing into the checkout. A block that needs a GPU, a hub checkpoint, a
running server or minutes of CPU is preceded by ``<!-- skip: next "why" -->`` and reported as skipped with that
reason; ``<!-- skip: next if(not HAVE_SHARED, reason="…") -->`` skips where ``../shared`` data is absent. Shell
blocks run under ``bash -euo pipefail`` with this interpreter's ``bin/`` first on ``PATH`` and the offline
variables of :func:`brrm.testing.offline` set, each within :data:`SHELL_TIMEOUT_S`; a plain ``brrm …`` line (no
pipe, redirection, list, variable or glob, in a block without a loop, condition or here-document) runs in this
process as ``brrm.cli.main(argv)``, the console script's own function, and must exit 0: what such an example
shows is the command's work, not the process around it, and a fresh interpreter costs seconds of imports.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
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
    """Back to the old working directory, the scratch folder removed; then refuse a page whose examples wrote a
    file or folder that ``.gitignore`` does not cover (a user runs the same commands in a clone)."""
    os.chdir(namespace["_docs_cwd"])
    scratch: Path = namespace["_docs_scratch"]
    made = sorted(p.name + "/" * p.is_dir() for p in scratch.iterdir() if p.name != "examples")
    shutil.rmtree(scratch, ignore_errors=True)
    loose = [name for name in made if not _ignored(name)]
    if loose:
        raise AssertionError(f"the page's examples write {loose}, which .gitignore does not cover: add them there")


def _ignored(name: str) -> bool:
    """Whether ``.gitignore`` covers ``name`` (a folder ends in ``/``) at the repository's root."""
    done = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", "-q", name], check=False)
    return done.returncode == 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, None]:
    """Report a skipped example at its block (``docs/cli.md:41: needs a GPU``), not at the line of pytest's own
    unittest plugin that turned sybil's ``SkipTest`` into a skip (the root ``conftest.py`` imports this hook)."""
    outcome = yield
    report = outcome.get_result()
    example = getattr(item, "example", None)
    if example is not None and report.skipped and isinstance(report.longrepr, tuple):
        where = os.path.relpath(example.path, REPO)
        report.longrepr = (where, example.line, report.longrepr[2])


def run_shell(example: Example) -> None:
    """Run one bash block in the page's scratch folder, its plain ``brrm`` commands in-process (:func:`_in_process`)
    and the other commands, consecutive ones together, under bash; a non-zero exit fails with the command."""
    commands = _commands(example.parsed)
    if "<<" in example.parsed or any(_whole_block(c) for c in commands):
        _bash(example.parsed, example)  # its lines belong together (a loop, a here-document, a cd or an export)
        return
    shell: list[str] = []
    for command in commands:
        argv = _in_process(command)
        if argv is None:
            shell.append(command)
            continue
        if shell:
            _bash("\n".join(shell), example)
            shell = []
        _brrm(argv)
    if shell:
        _bash("\n".join(shell), example)


def _commands(block: str) -> list[str]:
    """The block's commands: its lines with backslash continuations joined, blank and comment-only lines left out."""
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


COMPOUND = frozenset({"for", "while", "until", "if", "case", "select", "function", "{", "("})
"""First words of the shell's compound commands: a block holding one runs whole under bash."""
SHELL_STATE = frozenset({"cd", "pushd", "popd", "export", "unset", "source", ".", "alias", "set", "umask"})
"""First words of commands that change the shell's own state (its folder, variables, options), which the lines after
them depend on: a block holding one runs whole under bash, so an in-process line never misses that state."""


def _whole_block(command: str) -> bool:
    """Whether ``command`` ties its block's lines together: a compound command, a change of the shell's state, or a
    variable assignment (``NAME=value``)."""
    first = command.split(None, 1)[0]
    return (first in COMPOUND or first in SHELL_STATE or command.lstrip()[0] in "({"
            or ("=" in first and first.split("=", 1)[0].isidentifier()))
SHELL_CHARS = frozenset("|&;<>()$`*?[]{}~!")
"""Characters that make a command the shell's: pipes, redirections, lists, subshells, variables, globs, history."""


def _in_process(command: str) -> list[str] | None:
    """``brrm``'s arguments when ``command`` is a plain ``brrm …`` line (a trailing ``#`` comment allowed); None
    for anything the shell must run (any of :data:`SHELL_CHARS` outside the comment, or another program)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    code = command.split(" #", 1)[0]
    if not words or words[0] != "brrm" or SHELL_CHARS & set(code):
        return None
    return words[1:]


def _brrm(argv: list[str]) -> None:
    """``brrm ARGV`` in this process; an exit status other than 0 fails with the command line."""
    from brrm.cli import main

    code = main(argv)
    if code != 0:
        raise AssertionError(f"exit {code} from brrm {shlex.join(argv)} (its output is in the captured streams)")


def _bash(script: str, example: Example) -> None:
    """``script`` under ``bash -euo pipefail`` in the page's scratch folder, within :data:`SHELL_TIMEOUT_S`."""
    env = {**os.environ, **OFFLINE, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=example.namespace["_docs_scratch"],
                          env=env, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode} from\n{script}\nstdout:\n{done.stdout[-4000:]}\n"
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
