"""HTTP for the OpenAI-compatible backend: JSON over httpx, one client per backend (its connection pool keeps
connections alive between requests), retries with backoff, and the adaptive concurrency of
:mod:`~brrm.backends.openai.limiter` per server.

A retry after an answer with ``Retry-After`` (seconds or an HTTP date, RFC 9110 §10.2.3; a 429 or 503 of an
overloaded or failing upstream) waits at least that long, never less: backoff alone would retry an upstream that
asked for time sooner than it asked, and many clients doing so make a retry storm. The wait is shared: no call of
the backend sends to that upstream before it ends. When the wait asked for is longer than the request's own
timeout, the request fails at once with the upstream's answer instead."""

from __future__ import annotations

import email.utils
import importlib.util
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from brrm.backends.openai.limiter import AdaptiveLimit, ConcurrencyPolicy, LimitState, Signal
from brrm.errors import BackendUnavailable, ConfigError
from brrm.types.jsonvalue import JSONValue

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({408, 409, 425, 429})
"""Retried besides every 5xx status."""
KEEPALIVE_S = 4.0
"""Seconds an idle connection is kept for reuse: under uvicorn's 5 s keep-alive (``vllm serve``'s server), so the
client never sends on a connection the server is closing."""


class RequestFailed(Exception):
    """A request that failed for good (non-retryable status, or retries exhausted); ``str`` is the reason."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: ``status``, ``headers`` (lower-case names) and the raw ``body``."""

    status: int
    headers: Mapping[str, str]
    body: bytes


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
    """JSON over one pooled httpx client, with retries, backoff and an adaptive concurrency limit per server.

    Args:
        base_urls: the servers (normalized by :func:`normalize_base_url`).
        timeout_s: seconds per request (connect, each read and write, a wait for a pooled connection), > 0.
        max_retries: retries of a retryable failure, >= 0; each goes to the next server.
        backoff_s, max_backoff_s: the first retry's delay and its cap, seconds (doubling, ±25 % jitter).
        api_key: sent as ``Authorization: Bearer`` when set.
        concurrency: each server's AIMD limit (default :class:`ConcurrencyPolicy`'s).
        clock, sleep: monotonic seconds and a wait (injectable for tests).

    Raises:
        ConfigError: on an invalid URL.
        BackendUnavailable: when httpx is not installed.
    """

    def __init__(self, base_urls: Sequence[str], *, timeout_s: float, max_retries: int, backoff_s: float,
                 max_backoff_s: float, api_key: str | None, concurrency: ConcurrencyPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if importlib.util.find_spec("httpx") is None:
            raise BackendUnavailable("the openai backend sends its requests with httpx, which is not installed",
                                     hint="pip install 'httpx>=0.27'")
        self.base_urls = [normalize_base_url(u) for u in base_urls]
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.policy = concurrency or ConcurrencyPolicy()
        self.limits = {u: AdaptiveLimit(u, self.policy, clock=clock, sleep=sleep) for u in self.base_urls}
        self._sleep = sleep
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        """The backend's one client, made at first use: a pool of up to ``maximum`` connections per server."""
        import httpx

        with self._lock:
            if self._client is None:
                size = self.policy.maximum * len(self.limits)
                self._client = httpx.Client(
                    headers=self.headers, timeout=httpx.Timeout(self.timeout_s),
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size,
                                        keepalive_expiry=KEEPALIVE_S))
            return self._client

    def once(self, base: str, method: str, path: str, body: object = None) -> Reply:
        """One HTTP exchange (``body``: anything :func:`json.dumps` takes, or None for none).

        Raises:
            httpx.RequestError: on a transport failure (timeout, refused or dropped connection).
        """
        payload = None if body is None else json.dumps(body).encode()
        resp = self._http().request(method, base + path, content=payload)
        return Reply(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content)

    def call(self, first: int, method: str, path: str, body: object = None) -> JSONValue:
        """The decoded JSON answer, trying servers ``first``, ``first + 1``, … on retryable failures.

        Raises:
            RequestFailed: on a non-retryable status, an invalid answer, or after ``max_retries`` retries.
        """
        last = ""
        for attempt in range(self.max_retries + 1):
            base = self.base_urls[(first + attempt) % len(self.base_urls)]
            reply, last = self._attempt(base, method, path, body)
            retry_after = None
            if reply is not None:
                if reply.status == 200:
                    try:
                        answer: JSONValue = json.loads(reply.body)
                        return answer
                    except ValueError as exc:
                        raise RequestFailed(f"{base}{path}: invalid JSON in the answer ({exc})") from exc
                if reply.status < 500 and reply.status not in RETRY_STATUSES:
                    raise RequestFailed(last)
                retry_after = reply.headers.get("retry-after")
                self._pause(base, reply.status, retry_after)
            if attempt < self.max_retries:
                delay = self._delay(attempt, retry_after)
                if delay is None:
                    raise RequestFailed(f"{last} (it asked to retry after {retry_after}, longer than the request's "
                                        f"timeout of {self.timeout_s:g} s: not retried sooner)")
                self._sleep(delay)
        raise RequestFailed(f"{last} (gave up after {self.max_retries + 1} attempts)")

    def _attempt(self, base: str, method: str, path: str, body: object) -> tuple[Reply | None, str]:
        """One exchange in a slot of ``base``'s limit: (the reply, or None on a transport failure; its reason).
        The slot goes back with the reply's :class:`Signal` (a transport failure: neutral)."""
        import httpx

        limit = self.limits[base]
        ticket, signal = limit.acquire(), Signal.NEUTRAL
        try:
            reply = self.once(base, method, path, body)
        except httpx.RequestError as exc:  # timeouts, refused/reset connections
            return None, f"{base}{path}: {type(exc).__name__}: {exc}"
        else:
            signal = Signal.of_status(reply.status)
            return reply, "" if reply.status == 200 else f"{base}{path}: HTTP {reply.status}: {_error_text(reply.body)}"
        finally:
            limit.release(ticket, signal)

    def _pause(self, base: str, status: int, retry_after: str | None) -> None:
        """Pause every call to ``base`` for the ``Retry-After`` of its 429 or 503, when the retry waits for it (it
        asks for no longer than ``timeout_s``)."""
        asked = retry_after_s(retry_after)
        if Signal.of_status(status) is Signal.OVERLOAD and asked is not None and asked <= self.timeout_s:
            self.limits[base].pause(asked)

    def _delay(self, attempt: int, retry_after: str | None) -> float | None:
        """Seconds before retry ``attempt`` (0-based): the backoff (``backoff_s`` doubling up to ``max_backoff_s``,
        ±25 % jitter), or the answer's ``Retry-After`` when that is longer; None when ``Retry-After`` asks for
        longer than ``timeout_s`` (the request is not retried)."""
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.75, 1.25)
        asked = retry_after_s(retry_after)
        if asked is None:
            return delay
        return None if asked > self.timeout_s else max(delay, asked)

    def concurrency(self) -> tuple[LimitState, ...]:
        """Each server's concurrency limit now, in ``base_urls`` order (a repeated URL once)."""
        return tuple(limit.state() for limit in self.limits.values())

    def close(self) -> None:
        """Close the client and its pooled connections (a later call opens a new client)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


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
