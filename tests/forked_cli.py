"""``brrm`` (the console script) in a real child process forked from the test process, for tests where the process is
the point (its exit status, the signals it gets, real pipes on its stdout and stderr) but a fresh interpreter is not:
the child has torch, transformers and brrm imported already, where ``python -m brrm`` spends ~5-8 s of CPU importing
them. ``tests/test_continuous.py`` forks its paused runs the same way.

The child opens fds 1 and 2 as a fresh interpreter opens a pipe (stdout block-buffered, stderr line-buffered), runs
:func:`brrm.cli.console` and ends as an interpreter does after ``sys.exit``: it waits for its non-daemon threads
(multiprocessing's own exit path) and flushes stdout, where a closed pipe is exit 120 and a second error, as CPython's
shutdown reports it. One intra-op thread: the parent's OpenMP pool does not survive the fork.
"""

from __future__ import annotations

import importlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

FORK = multiprocessing.get_context("fork")


def _open_std_streams(stdout_fd: int, stderr_fd: int) -> None:
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)


def _flushed_at_exit(code: object) -> int:
    """The exit status after the interpreter's last flush of stdout: 120 (and the error on stderr) where it fails."""
    status = code if isinstance(code, int) else 0 if code is None else 1
    try:
        sys.stdout.flush()
    except OSError as exc:
        sys.stderr.write(f"Exception ignored in: <_io.TextIOWrapper name='<stdout>'>\n{type(exc).__name__}: {exc}\n")
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing flushes into the closed pipe again
        status = 120
    sys.stderr.flush()
    return status


def _own_progress_lock() -> None:
    """Give this child tqdm's write lock of its own. The test process's is a multiprocessing RLock, a semaphore the
    fork shares, beside a thread RLock: a child that is killed, or ends with ``os._exit``, while a bar of its holds
    the semaphore would leave the test process waiting on it forever at its next bar (seen: a worker stuck in
    ``tqdm.__new__`` after test_rough_edges' SIGTERM test, on a busy machine)."""
    from tqdm.std import TqdmDefaultWriteLock, tqdm

    TqdmDefaultWriteLock.th_lock = threading.RLock()
    TqdmDefaultWriteLock.mp_lock = FORK.RLock()
    tqdm.set_lock(TqdmDefaultWriteLock())


def _console(argv: Sequence[str], stdout_fd: int, stderr_fd: int, readers: Sequence[int],
             env: Mapping[str, str], before: Callable[[], None] | None) -> None:
    """The child (a :data:`FORK` target): ``brrm ARGV`` as the console script runs it, with ``env`` added to its
    environment and ``before`` called just before it starts. ``readers`` are the test's ends of the pipes, closed
    here: a child holding one would be a reader of its own stdout, which then never closes."""
    import torch

    from brrm.cli import console

    _own_progress_lock()
    for fd in readers:
        os.close(fd)
    # the signal dispositions of a fresh interpreter started from a terminal: Ctrl-C raises KeyboardInterrupt (a test
    # runner started in the background has SIGINT ignored, and a fork inherits that), SIGTERM ends the process
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ.update(env)
    torch.set_num_threads(1)
    _open_std_streams(stdout_fd, stderr_fd)
    if before is not None:
        before()
    sys.argv = ["brrm", *argv]
    try:
        console()  # an interrupted run (130, 143) ends here with os._exit, as in a fresh interpreter
    except SystemExit as exc:
        sys.exit(_flushed_at_exit(exc.code))


PRELOAD = ("transformers.models.qwen3.modeling_qwen3", "brrm.backends.transformers", "brrm.cli")
"""What a tiny transformers judge's run imports: :class:`ForkedCLI` imports it in this process before it forks, so
that the child starts with it (in a test session most of it is imported already)."""
SERVE_PRELOAD = ("transformers.tokenization_utils_fast", "brrm.testing", "brrm.cli.serve", "brrm.serve.app")
"""What ``brrm serve`` over a scripted judge (a tiny tokenizer, no model) imports."""


class ForkedCLI:
    """``brrm ARGV`` in a forked child, used as a ``subprocess.Popen``: its stdout and stderr are pipes the test reads
    (``stdout``/``stderr`` True; text, or bytes where ``binary``), both go to the file ``log``, or to /dev/null;
    ``env`` is added to the child's environment; ``before`` runs in the child just before the console script (a test's
    hook: a pause point); the modules named in ``preload`` are imported before the fork."""

    def __init__(self, argv: Sequence[str], *, stdout: bool = False, stderr: bool = False, log: Path | None = None,
                 env: Mapping[str, str] | None = None, preload: Sequence[str] = PRELOAD,
                 before: Callable[[], None] | None = None, binary: bool = False) -> None:
        for module in preload:
            importlib.import_module(module)
        self.args = ["brrm", *argv]
        null = os.open(log if log is not None else os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        pipes = {name: os.pipe() if want else None for name, want in (("out", stdout), ("err", stderr))}
        ends = [pipe[1] if pipe else null for pipe in pipes.values()]
        readers = [pipe[0] for pipe in pipes.values() if pipe]
        self.proc = FORK.Process(target=_console, args=(list(argv), *ends, readers, dict(env or {}), before))
        self.proc.start()
        for fd in {null, *ends}:
            os.close(fd)
        self.pid = self.proc.pid
        mode = {"mode": "rb"} if binary else {"encoding": "utf-8"}
        self.stdout: IO[Any] | None = os.fdopen(pipes["out"][0], **mode) if pipes["out"] else None
        self.stderr: IO[Any] | None = os.fdopen(pipes["err"][0], **mode) if pipes["err"] else None

    @property
    def returncode(self) -> int | None:
        """The exit status as ``subprocess`` reports it (-N for a signal), None while the child runs."""
        return self.proc.exitcode

    def poll(self) -> int | None:
        return self.proc.exitcode

    def send_signal(self, sig: int) -> None:
        assert self.pid is not None
        os.kill(self.pid, sig)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float) -> int:
        """The exit status; ``subprocess.TimeoutExpired`` when the child runs on after ``timeout`` seconds."""
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.proc.exitcode

    def communicate(self, timeout: float) -> tuple[str, str]:
        """What is left of the piped streams, read to their end, once the child has ended; ``timeout`` bounds a hang:
        the child is killed and the test fails."""
        got: dict[str, str] = {}
        readers = [threading.Thread(target=lambda name=name, stream=stream: got.setdefault(name, stream.read()),
                                    daemon=True) for name, stream in (("out", self.stdout), ("err", self.stderr))
                   if stream is not None]
        for reader in readers:
            reader.start()
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.join(5)
            raise AssertionError(f"{' '.join(self.args)} did not end within {timeout} s") from None
        for reader in readers:
            reader.join(timeout)
        return got.get("out", ""), got.get("err", "")
