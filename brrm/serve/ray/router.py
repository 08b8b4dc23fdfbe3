"""The judge deployment's Ray Serve request router: a request goes to the replica its digest names.

Why route, not share a store: single-flight and the ``Idempotency-Key`` store stay where they are in the
single-process server — inside each judge replica's own app (:func:`brrm.serve.app.create_app`) — and every
ingress replica sends a request to the judge replica that its **route key** picks: the ``Idempotency-Key`` (with
the route) when the request has one, else the SHA-256 of its route and body (:func:`route_key`). Identical
requests, and a retry under the same key, then meet on one judge replica whichever ingress replica they reached,
and that replica's own single-flight and idempotency layer answer them with one model call. No store is shared,
so there is no actor every request waits on and nothing to lose beyond one replica's own state.

The pick is rendezvous (highest-random-weight) hashing over the replicas Ray Serve says are running: each replica
scores ``sha256(key | replica id)`` and the highest wins, so a replica that joins or dies moves only the keys it
wins or held. The ranks after the first are the fallbacks Ray Serve uses when the first replica is full
(``max_ongoing_requests``). Health, membership, queue-length probes and back-off stay Ray Serve's.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from brrm.serve.ray.keys import REPLICA_KWARG, ROUTE_KWARG, ranked


class DigestRouter(RequestRouter):
    """Ray Serve request router of the judge deployment: the replica :func:`ranked` puts first for the request's
    route key, the others as fallbacks; a request without a key (``/health``, ``/v1/models``) may go anywhere, and
    Serve picks the least loaded; one pinned to a replica (:data:`~brrm.serve.ray.keys.REPLICA_KWARG`) goes there."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        pinned = pending_request.kwargs.get(REPLICA_KWARG) if pending_request is not None else None
        if pinned is not None:  # one replica's own /metrics or /ready: that replica or none (the caller times out)
            return [[r for r in candidate_replicas if r.replica_id.unique_id == pinned]]
        key = _key_of(pending_request)
        if key is None or len(candidate_replicas) < 2:
            return [candidate_replicas]
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        return [[by_id[rid]] for rid in ranked(key, list(by_id))]


def _key_of(pending: PendingRequest | None) -> str | None:
    value: Any = pending.kwargs.get(ROUTE_KWARG) if pending is not None else None
    return value if isinstance(value, str) and value else None
