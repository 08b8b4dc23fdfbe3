"""One ``generate`` / vocabulary-logit call of the vLLM backend: its runs in flight, its engine requests and its
request's cancellation token.

Calls from several threads share one engine (continuous batching across calls). Each call records the engine
request ids it has in flight; when its request's :class:`~brrm.cancellation.CancelToken` is set (its client left,
its deadline passed, its call was abandoned as stalled), the backend aborts exactly those requests before the
engine's next step (``llm_engine.abort_request``), freeing their KV blocks, and the call raises
:class:`~brrm.cancellation.Cancelled` in its own thread; every other call's requests run on untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from brrm.cancellation import CancelToken


class Call:
    """One call's runs in flight: counts the finished ones and signals when all are (or when it was retired).

    Args:
        n: runs of the call, >= 0.
        on_complete: called with a run's index when it finishes.
        token: the request's cancellation token (None: the call cannot be cancelled from outside).

    Attributes:
        rids: the engine request ids of the call now in flight.
        retired: the token's reason once the call's requests were aborted, else ``""``.
    """

    def __init__(self, n: int, on_complete: Callable[[int], None] | None, token: CancelToken | None = None) -> None:
        self.left, self.on_complete, self.token = n, on_complete, token
        self.rids: set[str] = set()
        self.retired = ""
        self.done = threading.Event()
        if n == 0:
            self.done.set()

    @property
    def cancelled(self) -> bool:
        """Whether the call's token is set while it still runs (it is to be retired at the next step)."""
        return self.token is not None and self.token.cancelled and not self.done.is_set()

    def finished(self, index: int) -> None:
        """Run ``index`` is done."""
        self.left -= 1
        if self.on_complete is not None:
            self.on_complete(index)
        if self.left <= 0:
            self.done.set()

    def retire(self) -> None:
        """Mark the call as retired (its requests were aborted) and wake its thread."""
        self.retired = self.token.reason if self.token is not None else "cancelled"
        self.rids.clear()
        self.done.set()
