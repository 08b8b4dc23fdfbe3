"""The HTTP ingress of the Ray Serve judge: every request, whatever its route, forwarded to a judge replica.

The ingress holds no model and no request state: it reads the body (refusing one over ``max_body_bytes`` with the
413 ``brrm serve`` gives, before anything is forwarded), and hands the request to the judge deployment through its
handle (:func:`brrm.serve.ray.forward.forward`), routed by the request's key so that identical requests and
``Idempotency-Key`` retries meet on one judge replica from any ingress replica (:mod:`brrm.serve.ray.router`).
Every route, schema, error, header and status is the judge replica's app's, the app ``brrm serve`` runs, so every
client of ``brrm serve`` works unchanged. ``/metrics`` and ``/ready`` answer for all judge replicas at once
(:mod:`brrm.serve.ray.fanout`). Ray Serve's proxy cancels the ingress call when the client disconnects,
which cancels the forwarded call on its replica.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from brrm.serve.ray.fanout import FANOUT_PATHS, ask_all, metrics_answer, ready_answer, replica_ids
from brrm.serve.ray.forward import forward
from brrm.serve.ray.sizing import JUDGE
from brrm.serve.ray.wire import Answer, Forwarded, end_to_end
from brrm.serve.security import error_body

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from brrm.serve.limits import ServerLimits


INGRESS_HEADER = "x-brrm-ingress"
"""The reply header naming the ingress replica that answered (its Ray Serve replica id), for logs and tests."""


class Ingress:
    """Ray Serve HTTP ingress (``BrrmIngress``) in front of the judge deployment.

    Args:
        judge: the judge deployment's ``DeploymentHandle`` (bound by :func:`brrm.serve.ray.build_app`).
        limits: the server's limits (the body limit and the deadline are read here).
    """

    def __init__(self, judge: Any, limits: ServerLimits) -> None:
        from ray import serve

        self.judge, self.limits = judge, limits
        context = serve.get_replica_context()
        self.app_name, self.replica = context.app_name, context.replica_id.unique_id

    async def __call__(self, request: Request) -> Response:
        """Answer one HTTP request with a judge replica's answer."""
        from starlette.responses import Response

        body = await _body(request, self.limits.max_body_bytes)
        if body is None:
            message = f"request body is larger than {self.limits.max_body_bytes} bytes (--max-body-bytes)"
            return Response(json.dumps(error_body("body_too_large", message)), status_code=413,
                            media_type="application/json")
        forwarded = Forwarded(request.method, request.url.path, request.url.query, end_to_end(request.headers.items()),
                              body)
        if request.method in ("GET", "HEAD") and forwarded.path in FANOUT_PATHS:
            answer = await self._whole_app(forwarded)
        else:
            answer = await forward(self.judge, forwarded, timeout_s=self.limits.deadline_s)
        headers = [*((k, v) for k, v in answer.headers if k != "content-type"), (INGRESS_HEADER, self.replica)]
        media = next((v for k, v in answer.headers if k == "content-type"), None)
        response = Response(answer.body, status_code=answer.status, media_type=media)
        for name, value in headers:
            response.headers.append(name, value)
        return response


    async def _whole_app(self, request: Forwarded) -> Answer:
        """``/metrics`` or ``/ready`` of every judge replica, as one answer (:mod:`brrm.serve.ray.fanout`)."""
        import asyncio

        ids = await asyncio.to_thread(replica_ids, self.app_name, JUDGE)
        answers = await ask_all(self.judge, Forwarded("GET", request.path, "", request.headers), ids)
        if request.path == "/ready":
            return ready_answer(answers)
        refused = next((a for a in answers if a is not None and a.status in (401, 403)), None)
        return refused or metrics_answer(answers)  # the API key is each replica's to check


async def _body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is longer than ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
