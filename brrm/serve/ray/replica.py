"""The judge replica: one whole judge and the single-process server's app around it, on one Ray Serve replica.

Each replica loads the judge once (:meth:`brrm.JudgeSpec.load`) and builds the app ``brrm serve`` runs
(:func:`brrm.serve.app.create_app`): its scheduler and continuous batching, single-flight, ``Idempotency-Key``
store, limits, auth, errors and metrics. Both turns of every judgment run here. A request reaches the app in
process (an ASGI call, no socket) exactly as ``brrm serve`` would get it over HTTP, so its answer is the one the
single-process server gives.

Ray Serve owns the replica's life: it starts it, probes it (:meth:`JudgeReplica.check_health`), restarts it when
it dies and, when scaling it down or redeploying, stops routing to it, waits for the requests it holds
(``graceful_shutdown_timeout_s``, the limits' ``drain_timeout_s``), then calls ``__del__``, which drains the
scheduler and frees the model, as ``brrm serve``'s SIGTERM does. A caller that goes (deadline, disconnect)
cancels its handle call; Serve cancels the call here, and the app drops the request's queued work.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from brrm.serve.ray.wire import Answer, Forwarded, end_to_end

if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI

    from brrm.serve.limits import ServerLimits
    from brrm.types import JudgeSpec

log = logging.getLogger("brrm.serve.ray")

LOCAL_BASE = "http://judge-replica"
"""The base URL of the in-process calls (no socket: httpx's ASGI transport)."""
REPLICA_HEADER = "x-brrm-replica"
"""The reply header naming the judge replica that answered (its Ray Serve replica id), for logs and tests."""


class JudgeReplica:
    """A Ray Serve judge replica (deployed by :func:`brrm.serve.ray.build_app` as ``BrrmJudge``).

    Args:
        spec: what to load (:class:`brrm.JudgeSpec`; its fingerprint is checked against the weights).
        limits: the server's limits (:class:`brrm.serve.ServerLimits`), as ``brrm serve`` takes them.
    """

    async def __init__(self, spec: JudgeSpec, limits: ServerLimits) -> None:  # type: ignore[misc]  # Ray allows it
        import asyncio

        import httpx
        from ray import serve

        from brrm.audit.ray_runner import actor_setup
        from brrm.serve.app import create_app

        actor_setup()
        self.replica: str = serve.get_replica_context().replica_id.unique_id
        judge = await asyncio.to_thread(spec.load)
        self.app: FastAPI = create_app(judge, limits=limits)
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        self._client: httpx.AsyncClient = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app, raise_app_exceptions=False), base_url=LOCAL_BASE,
            timeout=None)  # the app's own deadline answers 504 first
        self._closed = False

    async def forward(self, request: Forwarded, route: str | None = None, replica: str | None = None) -> Answer:
        """Answer one HTTP request with this replica's app.

        Args:
            request: the request as the ingress received it.
            route, replica: what the request was routed by (:mod:`brrm.serve.ray.keys`; read by the router, not
                here).
        """
        url = request.path + (f"?{request.query}" if request.query else "")
        reply = await self._client.request(request.method, url, headers=list(request.headers), content=request.body)
        return Answer(reply.status_code, (*end_to_end(reply.headers.raw), (REPLICA_HEADER, self.replica)),
                      reply.content)

    def ready(self) -> bool:
        """Whether this replica's app is loaded, warm and taking work (its ``/ready``)."""
        state = self.app.state.brrm
        return bool(state.ready and not state.draining and not state.scheduler.unready())

    def check_health(self) -> None:
        """Ray Serve's health probe: a replica whose app has shut down is unhealthy (Serve replaces it).

        Raises:
            RuntimeError: when the app is closed.
        """
        if self._closed:
            raise RuntimeError("the judge replica's app is closed")

    async def __del__(self) -> None:
        """Called by Ray Serve once the replica holds no request: drain the scheduler, free the model."""
        if self._closed:
            return
        self._closed = True
        self.app.state.brrm.draining = True
        await self._client.aclose()
        await self._stack.aclose()
