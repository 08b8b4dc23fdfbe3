"""Overload answered before the body: a plain ASGI middleware that refuses judging requests with 429 while the
scheduler's queue is full, before a byte of the body is read, parsed or validated.

Under overload the cost of a refusal is then one header read and one small write, independent of the body's
size, so a client gets its ``Retry-After`` in milliseconds rather than after its turn at JSON parsing. A request
admitted here can still get 429 later if its own cost does not fit the queue (checked when it is queued).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from brrm.serve.security import ASGIApp, Receive, Scope, Send, error_body, send_json

if TYPE_CHECKING:
    from brrm.serve.state import ServerState

JUDGING_PATHS = ("/v1/judge", "/v1/score", "/v1/rank", "/get_reward", "/compare")
"""Paths whose work goes through the scheduler's queue."""


class OverloadMiddleware:
    """429 with ``Retry-After`` for a POST to a judging path while the queue is full (counted as rejected).

    Args:
        app: the wrapped ASGI app.
        state: the server state (its scheduler and metrics).
    """

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scheduler = self.state.scheduler
        if (scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") in JUDGING_PATHS
                and scheduler.full()):
            self.state.metrics.rejected.inc()
            message = (f"the queue is full ({scheduler.queue_depth} of {scheduler.max_queue} judgments waiting); "
                       "retry later")
            await send_json(send, 429, error_body("queue_full", message),
                            [("retry-after", str(scheduler.retry_after()))], close=False)
            return
        await self.app(scope, receive, send)
