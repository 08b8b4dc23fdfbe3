"""What stands between a request body and the process: a streaming body-size limit, field-length limits and a
bearer API key compared in constant time.

Both middlewares are plain ASGI (no ``BaseHTTPMiddleware``), so the body limit acts on each chunk as it arrives:
a declared ``Content-Length`` over the limit is refused before a byte of the body is read, and a chunked body is
refused as soon as it grows past the limit — the server never buffers more than the limit plus one chunk.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from brrm.types.jsonvalue import JSONDict, JSONValue

__all__ = ["ASGIApp", "ApiKeyMiddleware", "BodyLimitMiddleware", "FieldTooLong", "InvalidText", "Receive", "Scope",
           "Send", "check_field_lengths", "error_body", "send_json"]

OPEN_PATHS = ("/health",)
"""Paths answered without the API key (liveness probes)."""


class BodyTooLarge(HTTPException):
    """A request body over the limit (HTTP 413). An HTTPException, so FastAPI's body reader passes it through."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes (--max-body-bytes)")


async def send_json(send: Send, status: int, body: JSONDict, headers: Iterable[tuple[str, str]] = (),
                    close: bool = True) -> None:
    """Send a complete JSON response on a raw ASGI ``send`` (with ``Connection: close`` unless ``close`` is
    False: the server then keeps the connection when it can)."""
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
           *([(b"connection", b"close")] if close else []), *((k.encode(), v.encode()) for k, v in headers)]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


def error_body(kind: str, message: str, **extra: JSONValue) -> JSONDict:
    """The JSON error shape of every non-2xx answer brrm makes: ``{"error": {"type", "message", ...}}``."""
    return {"error": {"type": kind, "message": message, **extra}}


class BodyLimitMiddleware:
    """Refuse request bodies larger than ``max_bytes`` with 413, counting bytes as they stream in.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the limit in bytes, >= 1.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await send_json(send, 400, error_body("bad_request", "Content-Length is not a number"))
                return
            if int(declared) > self.max_bytes:
                if int(declared) <= DRAIN_LIMIT:  # read and drop it: a client still sending then reads the 413
                    await _drain(receive)
                await send_json(send, 413, error_body("body_too_large", BodyTooLarge(self.max_bytes).detail,
                                                      limit=self.max_bytes))
                return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await send_json(send, 413, error_body("body_too_large", str(exc.detail), limit=self.max_bytes))


DRAIN_LIMIT = 64 << 20
"""Largest over-limit body (bytes, by its Content-Length) read and dropped before the 413 is sent. A client that
is still sending when the server answers and closes gets a broken connection instead of the 413; a larger body
is refused without being read."""


async def _drain(receive: Receive) -> None:
    """Read the request body to its end, keeping none of it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


class ApiKeyMiddleware:
    """Require ``Authorization: Bearer <key>`` on every path but :data:`OPEN_PATHS` (401 otherwise).

    The key is compared with :func:`hmac.compare_digest`, whose time does not depend on where the strings differ.
    The scheme name is case-insensitive (RFC 9110 §11.1: ``bearer`` and ``BEARER`` are ``Bearer``).

    Args:
        app: the wrapped ASGI app.
        api_key: the expected key (>= 8 characters).
    """

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        valid = hmac.compare_digest(token.strip().encode("latin-1", "replace"), self.expected)
        if not (valid and scheme.lower() == "bearer"):
            await send_json(send, 401, error_body("unauthorized", "missing or wrong API key: send "
                                                  "'Authorization: Bearer <key>'"), [("www-authenticate", "Bearer")])
            return
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1").strip()
    return None


class FieldTooLong(Exception):
    """A text field longer than the per-field limit (HTTP 413); ``field`` is its JSON path."""

    def __init__(self, field: str, length: int, limit: int) -> None:
        super().__init__(f"{field} has {length} characters; the limit is {limit} (--max-field-chars)")
        self.field, self.length, self.limit = field, length, limit


class InvalidText(Exception):
    """A text field that is not valid Unicode text (HTTP 422); ``field`` is its JSON path, ``position`` the index
    of the first bad character."""

    def __init__(self, field: str, position: int, char: str) -> None:
        super().__init__(f"{field} is not valid Unicode text: character {position} is the lone surrogate "
                         f"U+{ord(char):04X} (JSON \\u{ord(char):04x} without its pair), which no tokenizer can "
                         "encode; send the character's full surrogate pair, or remove it")
        self.field, self.position = field, position


def _check_text(path: str, text: str) -> None:
    """Refuse a string a UTF-8 tokenizer cannot take (lone surrogates ``U+D800``-``U+DFFF``); O(len).

    NUL and other control characters are valid text and are tokenized as text (the tokenizers brrm loads take
    them), so they pass.
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidText(path, exc.start, text[exc.start]) from None


def check_field_lengths(value: object, limit: int, where: str = "body") -> None:
    """Walk a parsed JSON value and refuse the first string longer than ``limit`` characters, or one that is not
    valid Unicode text (a lone surrogate); O(size of the value).

    Raises:
        FieldTooLong: naming the field's path (e.g. ``pairs[3].response_a``).
        InvalidText: naming the field's path and the position of the bad character.
    """
    stack: list[tuple[str, object]] = [(where, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if len(node) > limit:
                raise FieldTooLong(path, len(node), limit)
            _check_text(path, node)
        elif isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
