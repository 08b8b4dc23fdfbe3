"""The ``Idempotency-Key`` request header on the judging POST routes (IETF httpapi draft "The Idempotency-Key HTTP
Header Field"): a retry with the same key and the same request is answered the stored reply, without a second
model run.

A plain ASGI middleware (inside the API key and body-limit middlewares, so a replay is authorised and bounded like
any request) keys each request by the header's value, as sent: 1 to :data:`MAX_KEY_CHARS` visible ASCII
characters (a quoted structured-field string as the draft writes it, ``"8e03978e-…"``, or a bare token), else 400.
The request's *fingerprint* is the sha256 of its method, path and body (a JSON body in canonical form, with sorted
keys and no whitespace, so the same JSON sent with another spacing or key order is the same request).

This layer keeps only what is *finished* and checks the key's reuse; work *in flight* is shared one layer down, by
single-flight (:mod:`brrm.service.singleflight`): a retry with the same body is the same job digest.

* **first use** — the request runs as usual; a 2xx reply of at most :data:`MAX_REPLY_BYTES` is kept for
  :data:`TTL_S` seconds, in an LRU store of at most :data:`MAX_ENTRIES` replies and :data:`MAX_STORE_BYTES`
  bytes (the least recently used go first). Any other reply (4xx, 5xx: a failure) is not kept, so a retry runs
  again.
* **retry, same request, reply kept** — the stored reply (status, headers, body), with ``Idempotent-Replayed:
  true``; no model call.
* **retry, same request, first still running** — runs too, and its job joins the first one's in single-flight (no
  second model call); its reply says ``Idempotent-Replayed: true``. A keyed request's job outlives its client by
  :data:`RETRY_GRACE_S` seconds (:data:`LINGER`), so a client that gave up and retries finds its work still running.
* **same key, another request** (another body or route), kept or running — 422 ``idempotency_key_reused`` naming
  the key, nothing run.

The store is in memory and per process: replicas behind a load balancer do not share it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fastapi import Header
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from brrm.serve.security import error_body, send_json

HEADER = "Idempotency-Key"
"""The request header's name (case-insensitive on the wire)."""

MAX_KEY_CHARS = 255
"""Longest key, in characters."""

KEY_PATTERN = r"^[!-~]{1,255}$"
"""A key: 1 to :data:`MAX_KEY_CHARS` visible ASCII characters (the OpenAPI schema's pattern; the server's rule)."""

MAX_ENTRIES = 1024
"""Most replies kept."""

MAX_REPLY_BYTES = 1 << 20
"""Largest reply body kept, in bytes (a larger one is still sent, and to every waiting retry, but not kept)."""

MAX_STORE_BYTES = 64 << 20
"""Most reply bytes kept in all."""

TTL_S = 3600.0
"""How long a reply is kept after it was made, in seconds."""

RETRY_GRACE_S = 30.0
"""How long a keyed request's job runs on after its last client went away, waiting for a retry, seconds."""

LINGER = "brrm.linger_s"
"""Scope key set on a keyed request: how long its job outlives its client (:data:`RETRY_GRACE_S`), read by the
server when it submits to single-flight."""

REPLAYED = (b"idempotent-replayed", b"true")
"""The header on every reply not made for this request itself (stored, or another client's run)."""


@dataclass(frozen=True)
class Reply:
    """A complete HTTP reply: ``status``, ``headers`` (raw ASGI pairs) and ``body``."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @property
    def keepable(self) -> bool:
        """2xx and at most :data:`MAX_REPLY_BYTES`."""
        return 200 <= self.status < 300 and len(self.body) <= MAX_REPLY_BYTES


@dataclass(eq=False)
class Entry:
    """One key's request: its ``fingerprint``, its ``reply`` once kept (None while running), when it expires
    (monotonic seconds), and how many of its runs are in progress."""

    fingerprint: str
    reply: Reply | None = None
    expires: float = float("inf")
    running: int = 1


class IdempotencyStore:
    """Keys → :class:`Entry`: running requests (never evicted) and kept replies (LRU, bounded by count, bytes and
    age). All methods run on the event loop.

    Args:
        max_entries, max_bytes, ttl_s: the bounds (defaults :data:`MAX_ENTRIES`, :data:`MAX_STORE_BYTES`,
            :data:`TTL_S`).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_STORE_BYTES, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_bytes, self.ttl_s, self.clock = max_entries, max_bytes, ttl_s, clock
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def kept_bytes(self) -> int:
        """Body bytes of the kept replies."""
        return self._bytes

    def get(self, key: str) -> Entry | None:
        """The key's entry (an expired reply is dropped first), marked most recently used."""
        entry = self._entries.get(key)
        if entry is not None and entry.reply is not None and entry.expires <= self.clock():
            self._drop(key)
            return None
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def start(self, key: str, fingerprint: str, entry: Entry | None = None) -> Entry:
        """``key``'s running entry: a new one, or one more run of ``entry`` (the same request, still running)."""
        if entry is not None:
            entry.running += 1
            return entry
        entry = Entry(fingerprint)
        self._entries[key] = entry
        return entry

    def finish(self, key: str, entry: Entry, reply: Reply | None) -> None:
        """One run of ``entry`` ended with ``reply`` (None: no reply, e.g. it raised): the first
        :attr:`Reply.keepable` one is kept; the key is forgotten when its last run ends with none kept."""
        entry.running -= 1
        if self._entries.get(key) is not entry or entry.reply is not None:
            return
        if reply is None or not reply.keepable:
            if not entry.running:
                del self._entries[key]
            return
        entry.reply = reply
        entry.expires = self.clock() + self.ttl_s
        self._bytes += len(reply.body)
        self._entries.move_to_end(key)
        self._evict()

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        if entry.reply is not None:
            self._bytes -= len(entry.reply.body)

    def _evict(self) -> None:
        """Drop the least recently used kept replies until within the bounds (running entries stay)."""
        now = self.clock()
        for key in [k for k, e in self._entries.items() if e.reply is not None and e.expires <= now]:
            self._drop(key)
        kept = [k for k, e in self._entries.items() if e.reply is not None]
        while kept and (len(kept) > self.max_entries or self._bytes > self.max_bytes):
            self._drop(kept.pop(0))


def fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 hex of ``method``, ``path`` and ``body`` (a JSON body in canonical form: sorted keys, no spaces)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):
        canonical = body
    h = hashlib.sha256(f"{method} {path}\0".encode())
    h.update(canonical)
    return h.hexdigest()


IDEMPOTENCY = (f"Optional (IETF httpapi draft 'The Idempotency-Key HTTP Header Field'): 1 to 255 visible ASCII "
               f"characters, e.g. a quoted UUID (else 400). A retry with the same key and "
               f"the same body is answered the stored reply (header Idempotent-Replayed: true) without a second model "
               f"run; one arriving while the first runs shares its model run; the same key with another body is "
               f"refused (422, naming the key). 2xx replies up to {MAX_REPLY_BYTES} bytes are kept {TTL_S:g} s, at "
               f"most {MAX_ENTRIES} of them (least recently used dropped first); failures are not kept.")
"""The header's description in the OpenAPI schema."""


def key_header(key: str = Header(None, alias=HEADER, pattern=KEY_PATTERN, description=IDEMPOTENCY)) -> None:
    """The optional header as a parameter of each judging route, so the schema states it (the middleware has
    answered an invalid key 400 before the route runs)."""


def valid_key(value: str) -> bool:
    """Whether ``value`` is a key (:data:`KEY_PATTERN`)."""
    return 0 < len(value) <= MAX_KEY_CHARS and all("!" <= c <= "~" for c in value)


class IdempotencyMiddleware:
    """Honour ``Idempotency-Key`` on POSTs to ``paths`` (see the module docstring).

    Args:
        app: the wrapped ASGI app.
        paths: the routes it applies to.
        store: the reply store (a new bounded one by default).
        grace_s: :data:`RETRY_GRACE_S` (set on each keyed request's scope as :data:`LINGER`).
        release: called with a request's scope before it is answered a stored reply (the server frees the queue
            place its overload gate reserved: this request queues nothing).
        on_reply: called with a request's scope and ``True`` when it is answered another run's reply (stored, or
            shared in flight), ``False`` when its own run answers it (the server's ``/metrics`` counts the two).
    """

    def __init__(self, app: ASGIApp, paths: Iterable[str], store: IdempotencyStore | None = None,
                 grace_s: float = RETRY_GRACE_S, release: Callable[[Scope], None] | None = None,
                 on_reply: Callable[[Scope, bool], None] | None = None) -> None:
        self.app, self.paths, self.grace_s, self.release = app, frozenset(paths), grace_s, release
        self.on_reply = on_reply or (lambda _scope, _replayed: None)
        self.store = store or IdempotencyStore()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = _key_header(scope) if scope["type"] == "http" and scope.get("method") == "POST" and \
            scope.get("path") in self.paths else None
        if raw is None:
            await self.app(scope, receive, send)
            return
        if not valid_key(raw):
            await _read_body(receive)  # read to its end first: a reply before the body is read can meet a reset
            await send_json(send, 400, error_body(
                "invalid_idempotency_key", f"{HEADER} must be 1 to {MAX_KEY_CHARS} visible ASCII characters (no "
                "spaces), e.g. a quoted UUID; got " + repr(raw[:80])), close=False)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client left before its body was read: there is no request to run or answer
        fp = fingerprint(str(scope["method"]), str(scope["path"]), body)
        entry = self.store.get(raw)
        if entry is not None and entry.fingerprint != fp:
            await send_json(send, 422, error_body(
                "idempotency_key_reused", f"{HEADER} {raw!r} was already used for another request (another body "
                "or route); a retry must repeat its request exactly, and a new request needs a new key",
                key=raw), close=False)
        elif entry is not None and entry.reply is not None:
            if self.release is not None:
                self.release(scope)
            self.on_reply(scope, True)
            await _send(send, entry.reply, replayed=True)
        else:  # a first use, or a retry while the first runs: single-flight shares their job
            joined = entry is not None
            reply = await self._run(raw, scope, body, receive, self.store.start(raw, fp, entry))
            if reply is not None:
                self.on_reply(scope, joined)
                await _send(send, reply, replayed=joined)

    async def _run(self, key: str, scope: Scope, body: bytes, receive: Receive, entry: Entry) -> Reply | None:
        """Run the request (its job outlives its client by the grace: :data:`LINGER`); its reply, kept in the
        store when it may be."""
        sent = False
        start: Message = {}
        chunks: list[bytes] = []

        async def replayed_receive() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        reply: Reply | None = None
        scope[LINGER] = self.grace_s
        try:
            await self.app(scope, replayed_receive, capture)
            if start:
                headers = tuple((bytes(k), bytes(v)) for k, v in start.get("headers", ()))
                reply = Reply(int(start["status"]), headers, b"".join(chunks))
        finally:
            self.store.finish(key, entry, reply)
        return reply


def _key_header(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"idempotency-key":
            return bytes(value).decode("latin-1")
    return None


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (the body-limit middleware outside bounds it); None when the client disconnects
    first (a partial body is no request: it must never claim the key)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Send, reply: Reply, *, replayed: bool) -> None:
    headers = [*reply.headers, REPLAYED] if replayed else list(reply.headers)
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
