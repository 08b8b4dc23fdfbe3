"""SIGTERM (a scheduler or ``kill`` stopping a job) ending a run as Ctrl-C does, within seconds.

A long run (``brrm audit``, a record-writing ``brrm judge``/``score``/``rank``) stops on Ctrl-C by unwinding: the
finished work is committed or flushed, files are closed and one line says how to continue. SIGTERM's default action
kills the process without any of that; inside :func:`sigterm_as_interrupt` it raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread instead, so both signals take the same path.

Python runs a signal's handler only when the main thread next executes Python code, so a backend call that stays
in native code holding the interpreter (a tokenizer over a 60 MB text: minutes) would hold the signal off for as
long as it runs, and no thread of the process could act meanwhile. Inside :func:`sigterm_as_interrupt` a small
watcher process hears each SIGINT/SIGTERM the moment it arrives (the C-level handler writes it to the
:func:`signal.set_wakeup_fd` pipe, whose other end the watcher reads); when the run has not unwound
:data:`HARD_EXIT_AFTER_S` seconds later, the watcher says so on stderr and kills it (exit status 137). Work already
committed or flushed stays (a line cut mid-write is dropped by ``--resume``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from types import FrameType

HARD_EXIT_AFTER_S = 30.0
"""Seconds a run may take to unwind after SIGINT/SIGTERM before the watchdog ends the process (> 0): a clean stop
finishes the batch being written (an audit's transaction, the decode step in flight), which on a loaded 2-core
machine took over 10 s; a run stuck in native code is ended after this."""


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM inside :func:`sigterm_as_interrupt` (exit status 143 by convention)."""


@contextlib.contextmanager
def sigterm_as_interrupt(enabled: bool = True) -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread, and a signal the run does not act on
    within :data:`HARD_EXIT_AFTER_S` ends the process (see the module docstring); the earlier handler and wakeup fd
    are restored after. Does nothing outside the main thread (where Python cannot install signal handlers) or
    when not ``enabled``."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(_signum: int, _frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        with _watchdog():
            yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_WATCHER = """
import os, select, sys, time
fd, parent, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
while data := os.read(fd, 64):
    if not any(b in (2, 15) for b in data):
        continue
    name = "SIGINT" if 2 in data else "SIGTERM"
    end = time.monotonic() + grace
    while (left := end - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0] and not os.read(fd, 64):
            sys.exit(0)  # the run left its context in time
    sys.stderr.write(f"brrm: {name}: the run did not stop within {grace:g} s (the backend is busy in native code); "
                     "killing it. Finished work is kept: --resume continues.\\n")
    sys.stderr.flush()
    os.kill(parent, 9)
    sys.exit(0)
"""
"""The watcher process's program: argv is (the pipe's read fd, the run's pid, the grace in seconds)."""


@contextlib.contextmanager
def _watchdog() -> Iterator[None]:
    """A watcher process that hears SIGINT/SIGTERM at once (through the wakeup-fd pipe) and kills this process if
    the context is still open :data:`HARD_EXIT_AFTER_S` seconds after one; it ends when the context closes."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread of the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    watcher: subprocess.Popen[bytes] | None = None
    try:  # its own session: a terminal's Ctrl-C (sent to the whole process group) does not reach it
        watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(read_fd), str(os.getpid()),
                          str(HARD_EXIT_AFTER_S)], pass_fds=(read_fd,), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # no watcher (a process limit, say): the signals still land as before
        pass
    finally:
        os.close(read_fd)
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        os.close(write_fd)  # the watcher reads EOF and ends
        if watcher is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                watcher.wait(2)
