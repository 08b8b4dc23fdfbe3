"""The route key of a request and the rendezvous ranking of replicas for it (:mod:`brrm.serve.ray.router` routes by
them; no Ray import here)."""

from __future__ import annotations

import hashlib

ROUTE_KWARG = "route"
"""The keyword of the judge deployment's ``forward`` call that carries the route key."""
REPLICA_KWARG = "replica"
"""The keyword of a ``forward`` call pinned to one replica (its unique id): the application's ``/metrics`` and
``/ready`` ask every replica (:mod:`brrm.serve.ray.fanout`)."""


def route_key(path: str, body: bytes, idempotency_key: str | None) -> str:
    """The key a request is routed by: its route and ``Idempotency-Key`` when it has one (a retry under the same
    key reaches the replica holding the first attempt's reply), else its route and body's SHA-256 (identical
    requests meet on one replica's single-flight)."""
    if idempotency_key:
        return f"key:{path}:{idempotency_key}"
    return f"body:{path}:{hashlib.sha256(body).hexdigest()}"


def ranked(key: str, replica_ids: list[str]) -> list[str]:
    """``replica_ids`` ordered by their rendezvous score for ``key``, best first (deterministic)."""
    return sorted(replica_ids, key=lambda rid: hashlib.sha256(f"{key}|{rid}".encode()).digest(), reverse=True)
