"""One request to the judge deployment through its Ray Serve handle: routed by its key, sent again when its replica
died, cancelled on its replica when the caller goes, and always answered as HTTP (never with a Ray error).

A replica that dies (killed, out of memory, its node lost) fails the calls it held with a Ray actor error; each such
call is sent again (at most :data:`ATTEMPTS` times in all) and Ray Serve's router, which has dropped the dead
replica, picks another by the same key. The new replica judges the request from the start, as it would alone:
results depend on the request, the judge and its seed, not on the replica, so the answer equals the single-process
server's. Errors the judge's app answers itself (4xx, 5xx) are returned as they are; anything else Ray raises
becomes a typed 503 ``unavailable`` (:func:`brrm.serve.ray.wire.unavailable`) whose reason names no actor, replica
or Ray exception.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from brrm.serve.ray.keys import ROUTE_KWARG, route_key
from brrm.serve.ray.wire import Answer, Forwarded, unavailable

log = logging.getLogger("brrm.serve.ray")

ATTEMPTS = 4
"""Tries of one request across replicas (a replica killed, then the node of the next lost, still leaves two)."""
BACKOFF_S = 0.5
"""Seconds before a request is sent again after its replica died (doubled each time; Serve's router learns of the
death from the controller within about that)."""
GRACE_S = 30.0
"""Seconds a forwarded call may run beyond the app's own deadline (which answers 504 first) before it is dropped."""


def key_of(request: Forwarded) -> str | None:
    """The route key of a judging POST (:func:`~brrm.serve.ray.router.route_key`); None for a GET (any replica)."""
    if request.method != "POST":
        return None
    return route_key(request.path, request.body, request.header("idempotency-key"))


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` means the replica went away (or none was free) rather than that the request failed: Ray's
    actor errors and Serve's back-pressure and unavailability errors."""
    import ray.exceptions
    import ray.serve.exceptions as serve_errors

    return isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.ObjectLostError | ray.exceptions.NodeDiedError
                      | serve_errors.BackPressureError | serve_errors.DeploymentUnavailableError
                      | serve_errors.ReplicaUnavailableError)


async def forward(handle: Any, request: Forwarded, *, timeout_s: float) -> Answer:
    """``request`` answered by a judge replica through ``handle`` (the judge deployment's ``DeploymentHandle``).

    Args:
        timeout_s: the request's own deadline in seconds; the call is dropped (and cancelled on its replica) after
            it plus :data:`GRACE_S`.

    Returns:
        The replica app's answer, or a typed 503 when no replica could answer.
    """
    key, delay, why = key_of(request), BACKOFF_S, "no judge replica answered"
    for attempt in range(1, ATTEMPTS + 1):
        response = handle.forward.remote(request, **{ROUTE_KWARG: key})
        try:
            return await asyncio.wait_for(answer_of(response), timeout_s + GRACE_S)
        except (asyncio.CancelledError, TimeoutError):
            response.cancel()  # the caller went, or the replica never answered: stop its work there
            if attempt == ATTEMPTS or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            why = "the judge replica did not answer in time"
        except Exception as exc:
            failed = _failed(exc, attempt)
            if isinstance(failed, Answer):
                return failed
            why = failed
        await asyncio.sleep(delay)
        delay *= 2
    return unavailable(why)


def _failed(exc: Exception, attempt: int) -> Answer | str:
    """A 503 to answer at once (the replica's code failed: sending it again would fail again), or the reason to
    give if the retries run out (the replica went away)."""
    if not retryable(exc):
        log.error("judge replica call failed: %s", exc)  # the server log has Ray's words; the client never does
        return unavailable("the judge replica failed to answer; see the server log")
    log.warning("judge replica lost (attempt %d of %d): %s", attempt, ATTEMPTS, type(exc).__name__)
    return "the judge replicas holding this request stopped; Ray Serve is starting others"


async def answer_of(response: Any) -> Answer:
    """The :class:`Answer` a judge replica's ``forward`` call (a Serve ``DeploymentResponse``) resolves to."""
    answer: Answer = await response
    return answer


def forward_sync(handle: Any, request: Forwarded, *, timeout_s: float) -> Answer:
    """:func:`forward` for a caller outside an event loop (an in-cluster :class:`~brrm.serve.ray.client.RayJudge`,
    whose threads each run it in a loop of their own; Serve routes a driver's handle calls on its own thread).

    Raises:
        RuntimeError: when called from inside a running event loop (use :func:`forward`).
    """
    return asyncio.run(forward(handle, request, timeout_s=timeout_s))
