"""A closed pipe ends a command quietly (issue 49): ``brrm judge … | head -1`` exits 141 (128 + SIGPIPE, as ``cat``
or ``seq`` would) with no traceback, and the lines of ``--output`` written before it stay whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from brrm.cli import PIPE_CLOSED, main
from brrm.testing import save_tiny_qwen3
from tests.conftest import REPO
from tests.forked_cli import ForkedCLI

TINY = ("--kind", "brrm", "--max-new-tokens", "60", "--block-token-cap", "8", "--thinking", "off", "--no-progress")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def test_a_reader_that_leaves_after_one_line_ends_the_run_quietly(tmp_path, tiny_dir):
    """A real process and a real pipe: the reader takes the first verdict line and closes its end, as ``head``
    does. The process is the console script forked from this one (:mod:`tests.forked_cli`: the imports done, the
    interpreter's exit and its last flush of stdout as a fresh one's)."""
    out, src = tmp_path / "out.jsonl", tmp_path / "in.jsonl"
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()]
    src.write_text("".join(json.dumps({**row, "id": f"{row['id']}-{k}"}) + "\n" for k in range(4) for row in rows))
    argv = ["judge", "--input", str(src), "--model", tiny_dir, *TINY, "--batch-size", "1", "--output", str(out)]
    proc = ForkedCLI(argv, stdout=True, stderr=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # the header line
    while first and "winner=" not in first:
        first = proc.stdout.readline()
    proc.stdout.close()  # the reader is gone after the first verdict: the next line meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == PIPE_CLOSED, err
    assert "winner=" in first and "Traceback" not in err and "BrokenPipeError" not in err, err
    lines = out.read_text().splitlines()  # in input order: those before the first unfinished record, each whole
    assert len(lines) < len(rows) * 4 and [json.loads(line)["id"] for line in lines] == [
        f"{row['id']}-{k}" for k in range(4) for row in rows][:len(lines)]


class ClosedAfterOneLine:
    """A stdout whose reader leaves after the first line (no file descriptor: an in-process caller's stream)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        if self.lines and self.lines[-1].endswith("\n"):
            raise BrokenPipeError(32, "Broken pipe")
        self.lines.append(text) if not self.lines else self.lines.__setitem__(-1, self.lines[-1] + text)
        return len(text)

    def flush(self) -> None:
        pass


def test_main_returns_the_pipe_status_for_every_verb_that_prints(monkeypatch, capsys, tiny_dir, tmp_path):
    """``brrm score`` in-process: the same handling is in ``main``, not in one verb."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"q{k}", "response": f"a{k}"}) + "\n" for k in range(4)))
    bt = save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)
    stream = ClosedAfterOneLine()
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["score", "--input", str(pairs), "--model", str(bt), "--no-progress"]) == PIPE_CLOSED
    assert len(stream.lines) == 1 and "Traceback" not in capsys.readouterr().err


def test_an_interrupted_run_ends_at_once_beside_a_thread_still_inside_the_judge():
    """``brrm`` (the console entry, :func:`brrm.cli.console`) after Ctrl-C: the run has unwound and says so; a judging
    thread still inside native code neither holds the process (an interpreter exit waits for it) nor sees the
    native libraries torn down around it (an abort, exit 134, after Ctrl-C on an audit): exit 130 at once."""
    code = ("import threading, brrm.cli as cli\n"
            "threading.Thread(target=threading.Event().wait, name='judge').start()  # never returns\n"
            "cli.main = lambda argv=None: 130\n"
            "cli.console()\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)  # a hang guard: without the fix it hangs
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr


def _die_inside_a_progress_bar() -> None:
    """A child's pause point: it takes tqdm's write lock, as a bar being drawn does, and is killed holding it."""
    from tqdm import tqdm

    tqdm.get_lock().acquire()
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_forked_run_killed_inside_a_progress_bar_leaves_this_process_its_bars():
    """tests/forked_cli.py gives each child tqdm's write lock of its own: the test process's is a semaphore the fork
    shares, and a child killed while holding it left an xdist worker waiting in its next ``tqdm()`` for good."""
    from tqdm import tqdm
    from tqdm.std import TqdmDefaultWriteLock

    tqdm.get_lock()  # this process's lock exists before the fork, as it does after any bar
    proc = ForkedCLI(["--help"], before=_die_inside_a_progress_bar)
    assert proc.wait(60) == -signal.SIGKILL
    assert TqdmDefaultWriteLock.mp_lock.acquire(timeout=10), "the dead child holds this process's progress lock"
    TqdmDefaultWriteLock.mp_lock.release()
