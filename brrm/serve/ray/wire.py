"""What travels between an ingress (or an in-cluster :class:`~brrm.serve.ray.client.RayJudge`) and a judge replica:
one HTTP request as plain values (:class:`Forwarded`) and its reply (:class:`Answer`), and the typed answer a
client gets when no replica could make one (:func:`unavailable`): Ray's own errors never reach a client."""

from __future__ import annotations

import json
from dataclasses import dataclass

from brrm.serve.security import error_body

Headers = tuple[tuple[str, str], ...]

HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"})
"""Headers of one connection (RFC 9110 §7.6.1), not forwarded: each hop sets its own."""


@dataclass(frozen=True)
class Forwarded:
    """One HTTP request as the judge replica's app gets it.

    Attributes:
        method: ``GET`` or ``POST`` (any method the app answers).
        path: the route, e.g. ``/v1/judge``.
        query: the raw query string ("" without one).
        headers: the end-to-end headers (lower-case names; :data:`HOP_HEADERS` left out).
        body: the body's bytes.
    """

    method: str
    path: str
    query: str = ""
    headers: Headers = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        return next((v for k, v in self.headers if k == name), None)


@dataclass(frozen=True)
class Answer:
    """A judge replica's reply: ``status``, end-to-end ``headers`` and ``body``."""

    status: int
    headers: Headers
    body: bytes

    def json(self) -> object:
        """The body parsed as JSON."""
        return json.loads(self.body)


RETRY_AFTER_S = 1
"""The ``Retry-After`` (seconds) of a 503 made when no judge replica answered (Ray Serve is replacing it)."""


def unavailable(reason: str) -> Answer:
    """503 ``unavailable`` with ``reason`` and ``Retry-After``: what a client gets when no judge replica answered
    (every attempt's replica died, or none is running); ``reason`` is brrm's words, never Ray's message."""
    body = json.dumps(error_body("unavailable", reason)).encode()
    return Answer(503, (("content-type", "application/json"), ("retry-after", str(RETRY_AFTER_S))), body)


def end_to_end(headers: object) -> Headers:
    """``(name, value)`` pairs (str or bytes; any iterable of pairs) lower-cased, without :data:`HOP_HEADERS`."""
    out: list[tuple[str, str]] = []
    for name, value in headers:  # type: ignore[attr-defined]
        k = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        v = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if k.lower() not in HOP_HEADERS:
            out.append((k.lower(), v))
    return tuple(out)
