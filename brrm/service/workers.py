"""Worker threads that outlive one judge call: a call is handed to an idle worker instead of a new thread.

Starting a thread per call costs the event loop a wait until the new thread runs (``Thread.start`` blocks on
it: ~16 ms each on a loaded 2-core box, measured under 200 clients). Workers wait on a queue instead. A worker
stuck in an abandoned call simply stays busy; the next call finds no idle worker and starts a new one, so a
stuck reentrant backend never blocks the calls that follow (the scheduler bounds how many calls it abandons, and
gives a backend that is not reentrant no next call until the stuck one returns: :mod:`brrm.service.stalls`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Workers:
    """Daemon threads named ``name`` running submitted callables, one at a time each.

    Args:
        name: the threads' name.
    """

    def __init__(self, name: str = "brrm-judge") -> None:
        self.name = name
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = 0
        self._threads = 0
        self._lock = threading.Lock()

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on an idle worker, or on a new one when all are busy (``task`` must not raise)."""
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
            self._threads += spawn
        self._tasks.put(task)
        if spawn:
            threading.Thread(target=self._run, name=self.name, daemon=True).start()

    def close(self) -> None:
        """Let every worker end once it is idle (a worker stuck in an abandoned call ends when the call returns)."""
        with self._lock:
            threads, self._threads, self._idle = self._threads, 0, 0
        for _ in range(threads):
            self._tasks.put(None)

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            task()
            with self._lock:
                self._idle += 1
