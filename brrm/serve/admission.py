"""Overload answered before the body: a plain ASGI middleware that refuses judging requests with 429 while the
scheduler's queue is full, before a byte of the body is read, parsed or validated.

Under overload the cost of a refusal is then one header read and one small write, independent of the body's
size, so a client gets its ``Retry-After`` in milliseconds rather than after its turn at JSON parsing.

Admission reserves a place: a request let through counts as one judgment waiting (:attr:`ServerState.admitting`)
from the gate until its job is queued (:meth:`ServerState.submit`) or it is answered otherwise, so a burst that
arrives while the queue has one free place is not let through whole, to be parsed, validated and refused late.
A request admitted here can still get 429 when queued if its own cost does not fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from brrm.serve.security import ASGIApp, Receive, Scope, Send, error_body, send_json
from brrm.serve.state import ADMITTED, ServerState


class OverloadMiddleware:
    """429 with ``Retry-After`` for a POST to a judging path while the queue is full (counted as rejected).

    Args:
        app: the wrapped ASGI app.
        state: the server state (its scheduler and metrics).
        paths: the judging paths (their work goes through the scheduler's queue).
    """

    def __init__(self, app: ASGIApp, state: ServerState, paths: Iterable[str]) -> None:
        self.app, self.state, self.paths = app, state, frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") in self.paths):
            await self.app(scope, receive, send)
            return
        state, scheduler = self.state, self.state.scheduler
        if scheduler.full() or scheduler.queue_depth + state.admitting >= scheduler.max_queue:
            state.metrics.rejected.inc()
            message = (f"the queue is full ({scheduler.queue_depth} of {scheduler.max_queue} judgments waiting, "
                       f"{state.admitting} more arriving); retry later")
            await send_json(send, 429, error_body("queue_full", message),
                            [("retry-after", str(scheduler.retry_after()))], close=False)
            return
        state.admitting += 1
        scope[ADMITTED] = True
        try:
            await self.app(scope, receive, send)
        finally:
            state.release(scope)
