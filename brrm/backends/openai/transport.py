"""HTTP for the OpenAI-compatible backend: JSON over keep-alive connections with retries and backoff, and a router
that sends a prompt back to the server holding its prefix (standard library only: ``http.client``).

A retry after an answer with ``Retry-After`` (seconds or an HTTP date, RFC 9110 §10.2.3; a 429 or 503 of an
overloaded or failing upstream) waits at least that long, never less: backoff alone would retry an upstream that
asked for time sooner than it asked, and many clients doing so make a retry storm. When the wait asked for is
longer than the request's own timeout, the request fails at once with the upstream's answer instead."""

from __future__ import annotations

import email.utils
import http.client
import itertools
import json
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from urllib.parse import urlsplit

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONValue

RETRY_STATUSES = frozenset({408, 409, 425, 429})
"""Retried besides every 5xx status."""

_MOD = (1 << 61) - 1
_BASE = 1_000_003


class RequestFailed(Exception):
    """A request that failed for good (non-retryable status, or retries exhausted); ``str`` is the reason."""


def normalize_base_url(url: str) -> str:
    """``http(s)://host[:port][/prefix]`` with ``/v1`` appended when the path has no ``/v1`` segment.

    Raises:
        ConfigError: when ``url`` is not an http(s) URL with a host.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"base URL {url!r} is not valid; expected e.g. http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/")
    if "/v1" not in path.split("?")[0]:
        path += "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


class Transport:
    """JSON over HTTP with per-thread keep-alive connections, retries and backoff."""

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        max_backoff_s: float,
        api_key: str | None,
    ) -> None:
        self.base_urls = [normalize_base_url(u) for u in base_urls]
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._local = threading.local()

    def _connection(self, base: str) -> http.client.HTTPConnection:
        conns = self._local.__dict__.setdefault("conns", {})
        if base not in conns:
            parts = urlsplit(base)
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conns[base] = cls(parts.netloc, timeout=self.timeout_s)
        return conns[base]

    def _drop(self, base: str) -> None:
        conn = self._local.__dict__.get("conns", {}).pop(base, None)
        if conn is not None:
            conn.close()

    def once(self, base: str, method: str, path: str, body: object = None) -> tuple[int, dict[str, str], bytes]:
        """One HTTP exchange (``body``: anything :func:`json.dumps` takes, or None for none); raises OSError /
        HTTPException on transport failures."""
        conn = self._connection(base)
        payload = None if body is None else json.dumps(body).encode()
        try:
            conn.request(method, urlsplit(base).path + path, body=payload, headers=self.headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self._drop(base)
            raise
        if resp.getheader("Connection", "").lower() == "close":
            self._drop(base)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def call(self, first: int, method: str, path: str, body: object = None) -> JSONValue:
        """The decoded JSON answer, trying servers ``first``, ``first + 1``, … on retryable failures.

        Raises:
            RequestFailed: on a non-retryable status, an invalid answer, or after ``max_retries`` retries.
        """
        last = ""
        for attempt in range(self.max_retries + 1):
            base = self.base_urls[(first + attempt) % len(self.base_urls)]
            retry_after = None
            try:
                status, headers, data = self.once(base, method, path, body)
            except (OSError, http.client.HTTPException) as exc:  # timeouts, refused/reset connections
                last = f"{base}{path}: {type(exc).__name__}: {exc}"
            else:
                if status == 200:
                    try:
                        answer: JSONValue = json.loads(data)
                        return answer
                    except ValueError as exc:
                        raise RequestFailed(f"{base}{path}: invalid JSON in the answer ({exc})") from exc
                last = f"{base}{path}: HTTP {status}: {_error_text(data)}"
                if status < 500 and status not in RETRY_STATUSES:
                    raise RequestFailed(last)
                retry_after = headers.get("retry-after")
            if attempt < self.max_retries:
                delay = self._delay(attempt, retry_after)
                if delay is None:
                    raise RequestFailed(f"{last} (it asked to retry after {retry_after}, longer than the request's "
                                        f"timeout of {self.timeout_s:g} s: not retried sooner)")
                time.sleep(delay)
        raise RequestFailed(f"{last} (gave up after {self.max_retries + 1} attempts)")

    def _delay(self, attempt: int, retry_after: str | None) -> float | None:
        """Seconds before retry ``attempt`` (0-based): the backoff (``backoff_s`` doubling up to ``max_backoff_s``,
        ±25 % jitter), or the answer's ``Retry-After`` when that is longer; None when ``Retry-After`` asks for
        longer than ``timeout_s`` (the request is not retried)."""
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.75, 1.25)
        asked = retry_after_s(retry_after)
        if asked is None:
            return delay
        return None if asked > self.timeout_s else max(delay, asked)

    def close(self) -> None:
        for base in list(self._local.__dict__.get("conns", {})):
            self._drop(base)


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header value asks for (delay-seconds, or an HTTP date counted from ``now``, Unix
    seconds, default the clock), >= 0; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_text(data: bytes) -> str:
    try:
        err = json.loads(data)
        msg = err.get("error", err) if isinstance(err, dict) else err
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
        return str(msg)[:500]
    except ValueError:
        return data[:500].decode(errors="replace")


class Router:
    """Round-robin over servers, with affinity: a prompt extending a known sequence goes to its server."""

    def __init__(self, n: int, capacity: int = 8192) -> None:
        self.n = n
        self._rr = itertools.count()
        self._known: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    @staticmethod
    def _prefix_hashes(ids: Sequence[int]) -> list[int]:
        h, out = 0, []
        for t in ids:
            h = (h * _BASE + t + 1) % _MOD
            out.append(h)
        return out

    def pick(self, prompt: Sequence[int]) -> int:
        if self.n == 1:
            return 0
        hashes = self._prefix_hashes(prompt)
        with self._lock:
            for length in range(len(hashes), 0, -1):
                server = self._known.get((length, hashes[length - 1]))
                if server is not None:
                    return server
        return next(self._rr) % self.n

    def remember(self, ids: Sequence[int], server: int) -> None:
        if self.n == 1 or not ids:
            return
        key = (len(ids), self._prefix_hashes(ids)[-1])
        with self._lock:
            self._known[key] = server
            self._known.move_to_end(key)
            while len(self._known) > self.capacity:
                self._known.popitem(last=False)
