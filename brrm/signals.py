"""SIGTERM (a scheduler or ``kill`` stopping a job) ending a run as Ctrl-C does.

A long run (``brrm audit``, a record-writing ``brrm judge``/``score``/``rank``) stops on Ctrl-C by unwinding: the
finished work is committed or flushed, files are closed and one line says how to continue. SIGTERM's default action
kills the process without any of that; inside :func:`sigterm_as_interrupt` it raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread instead, so both signals take the same path.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM inside :func:`sigterm_as_interrupt` (exit status 143 by convention)."""


@contextlib.contextmanager
def sigterm_as_interrupt(enabled: bool = True) -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread; the earlier handler is restored after.
    Does nothing outside the main thread (where Python cannot install signal handlers) or when not ``enabled``."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(_signum: int, _frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
