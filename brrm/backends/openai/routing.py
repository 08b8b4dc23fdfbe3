"""Which server of several a request goes to: round-robin, except that a prompt extending a sequence already run
on a server goes back to that server (its prefix cache holds the sequence: turn 2 finds turn 1's there)."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence

_MOD = (1 << 61) - 1
_BASE = 1_000_003


class Router:
    """Round-robin over ``n`` servers, with affinity: a prompt extending a known sequence goes to its server.

    Args:
        n: the number of servers, >= 1.
        capacity: sequences remembered (the least recently remembered are forgotten first), >= 1.
    """

    def __init__(self, n: int, capacity: int = 8192) -> None:
        self.n = n
        self._rr = itertools.count()
        self._known: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    @staticmethod
    def _prefix_hashes(ids: Sequence[int]) -> list[int]:
        return list(itertools.accumulate(ids, lambda h, t: (h * _BASE + t + 1) % _MOD, initial=0))[1:]

    def pick(self, prompt: Sequence[int]) -> int:
        """The server index in [0, n) for ``prompt``: the one holding its longest remembered prefix, else the next
        in turn."""
        if self.n == 1:
            return 0
        hashes = self._prefix_hashes(prompt)
        with self._lock:
            for length in range(len(hashes), 0, -1):
                server = self._known.get((length, hashes[length - 1]))
                if server is not None:
                    return server
        return next(self._rr) % self.n

    def remember(self, ids: Sequence[int], server: int) -> None:
        """Note that the sequence ``ids`` ran on ``server``."""
        if self.n == 1 or not ids:
            return
        key = (len(ids), self._prefix_hashes(ids)[-1])
        with self._lock:
            self._known[key] = server
            self._known.move_to_end(key)
            while len(self._known) > self.capacity:
                self._known.popitem(last=False)
