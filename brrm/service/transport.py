"""One logical POST to ``brrm serve``, retried without a second model run: the transport of
:class:`~brrm.service.RemoteJudge`.

Every logical request gets its own ``Idempotency-Key`` (a random UUID4 hex, 32 characters), sent on the first
attempt and on each of its retries, never on another request. A retry goes out after an overloaded answer
(429/503, after its ``Retry-After``) and after a transport failure (a timeout, a dropped connection; after a
backoff of 0.5 s, doubling, at most 5 s), which includes a gateway's failure: a 500, 502 or 504 without brrm
serve's error body (:data:`GATEWAY`). Because the key and the body are the same, the server
(:mod:`brrm.serve.idempotency`) answers a retry whose first attempt is still running with that run's reply, and
one whose first attempt finished with the stored reply: a client that gave up on its own timeout never makes the
server judge the same request twice. A failed first run (4xx/5xx) is not stored, so its retry runs again.

A 503 of type :data:`FAILING` (``backend_failing``: every item failed alone, or the server's circuit breaker is
open) is never retried at once: only after its ``Retry-After`` (at least 1 s). The server makes such a retry cheap
(no second bisection of the same items, no call at all while the breaker is open: :mod:`brrm.service.breaker`).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict, JSONValue

if TYPE_CHECKING:
    import httpx

__all__ = ["CALLER_ERRORS", "FAILING", "GATEWAY", "HEADER", "RETRIED", "new_key", "post_json"]

CALLER_ERRORS = (400, 401, 403, 404, 413, 422)
"""Statuses that mean the request itself is wrong (raised as ConfigError with the server's message)."""
RETRIED = (429, 503)
"""Statuses that mean "not now": retried after ``Retry-After``."""
GATEWAY = (500, 502, 504)
"""Statuses that, without brrm serve's error body (``{"error": {"type": ...}}``), were answered by what stands in
front of it, not by brrm: Ray Serve's HTTP proxy answers a bare 500 when the ingress replica holding the request
dies (:mod:`brrm.serve.ray`), a load balancer a 502 or 504. Retried as a transport failure; brrm's own 5xx replies
carry their type and are not."""
FAILING = "backend_failing"
"""The error type of a 503 that means "the backend is failing" (not an overloaded queue, which is a 429)."""
SLEEP = time.sleep
"""How a retry waits (seconds); tests replace it to see the waits without spending them."""
HEADER = "Idempotency-Key"
"""The request header that makes a retry safe (the server's :data:`brrm.serve.idempotency.HEADER`)."""


def new_key() -> str:
    """A fresh idempotency key: 32 lowercase hex characters (UUID4), unique per logical request."""
    return uuid.uuid4().hex


def post_json(client: httpx.Client, path: str, body: JSONDict, *, retries: int, where: str) -> JSONDict | str:
    """POST ``body`` to ``path`` under one idempotency key, retried up to ``retries`` times.

    Args:
        client: the HTTP client (base URL and auth set).
        path: the route, e.g. ``/v1/score``.
        body: the JSON body (the same on every attempt).
        retries: retries after 429/503, a transport failure or a gateway's (:data:`GATEWAY`), >= 0.
        where: the server's URL, for reasons.

    Returns:
        The reply's JSON object, or a reason (a transport or server failure, at most 500 characters).

    Raises:
        ConfigError: the server refused the request as the caller's mistake (400/401/403/404/413/422), with its
            message.
    """
    import httpx

    headers = {HEADER: new_key()}
    for attempt in range(retries + 1):
        try:
            resp = client.post(path, json=body, headers=headers)
        except httpx.TransportError as exc:
            if attempt < retries:
                SLEEP(_backoff(attempt))
                continue
            return f"brrm serve at {where}{path}: {type(exc).__name__}: {exc}"[:500]
        if resp.status_code in GATEWAY and not _type(resp) and attempt < retries:
            SLEEP(_backoff(attempt))
            continue
        if resp.status_code in RETRIED and attempt < retries:
            wait = _retry_after(resp.headers.get("retry-after"))
            SLEEP(max(wait, 1.0) if _type(resp) == FAILING else wait)
            continue
        if resp.status_code == 200:
            reply: JSONValue = resp.json()
            return reply if isinstance(reply, dict) else f"brrm serve answered {path} with a non-object"
        message = _message(resp)
        if resp.status_code in CALLER_ERRORS:
            raise ConfigError(f"brrm serve refused {path} (HTTP {resp.status_code}): {message}")
        kind = _type(resp)
        return f"brrm serve answered {path} with HTTP {resp.status_code}{f' ({kind})' if kind else ''}: {message}"[:500]
    return f"brrm serve at {where}{path} stayed busy after {retries} retries"


def _backoff(attempt: int) -> float:
    """Seconds before retry ``attempt + 1`` after a transport or gateway failure: 0.5, doubling, at most 5."""
    return min(0.5 * 2 ** attempt, 5.0)


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (0 to 30; 1 when absent or not a number)."""
    try:
        return min(max(float(value or 1.0), 0.0), 30.0)
    except ValueError:
        return 1.0


def _type(resp: httpx.Response) -> str:
    """The error type of a brrm serve reply (``error.type``), else ""."""
    try:
        body = resp.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("type", "")) if isinstance(error, dict) else ""


def _message(resp: httpx.Response) -> str:
    """The error message of a brrm serve reply (``error.message``), else its text (at most 500 characters)."""
    try:
        body = resp.json()
    except ValueError:
        return str(resp.text[:300])
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message") if isinstance(error, dict) else body)[:500]
