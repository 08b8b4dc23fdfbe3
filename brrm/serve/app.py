"""``create_app(judge)``: the FastAPI app of ``brrm serve`` over any :class:`~brrm.RewardJudge`.

The app owns a :class:`~brrm.serve.scheduler.Scheduler` (model work runs in a worker thread, coalesced across
requests), the body-size, item and field limits, the optional API key and CORS, and the Prometheus metrics.
The routes are ``APIRouter`` s (:data:`ROUTERS`) — the judging and RLHF ones in :mod:`brrm.serve.routes`, the
operational ones (``/health``, ``/ready``, ``/v1/models``, ``/metrics``) in :mod:`brrm.serve.ops` — that reach the
server state through a dependency (:data:`brrm.serve.state.State`) and return their declared response models, so
FastAPI validates every reply. This module includes each with this server's request models
(:mod:`brrm.serve.openapi`: FastAPI emits the server's own schema from them), takes every path list from them,
and maps every error to one JSON shape: ``{"error": {"type", "message", ...}}`` (422 answers also keep FastAPI's
``detail`` list).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Scope

from brrm.errors import ConfigError
from brrm.serve import ops, routes
from brrm.serve.admission import OverloadMiddleware
from brrm.serve.idempotency import IdempotencyMiddleware
from brrm.serve.limits import ServerLimits
from brrm.serve.metrics import Metrics, MetricsMiddleware
from brrm.serve.openapi import request_models, server_router
from brrm.serve.openrlhf import resolve_mode
from brrm.serve.ops import add_offline_docs, warmup
from brrm.serve.security import ApiKeyMiddleware, BodyLimitMiddleware, FieldTooLong, InvalidText, error_body
from brrm.serve.state import ClientGone, ServerState, TooCostly, TooManyItems
from brrm.service.items import Variants, failed_result
from brrm.service.run import make_runner
from brrm.service.scheduler import BatchFailed, Scheduler, SchedulerError
from brrm.types import RewardJudge
from brrm.types.jsonvalue import JSONValue

log = logging.getLogger("brrm.serve")

ROUTERS = (ops.router, *routes.ROUTERS)
"""Every route module's router, included in this order (a new route: its module's router here)."""


class ServeApp(FastAPI):
    """The FastAPI app of ``brrm serve``: overload is refused outside every other layer
    (:class:`~brrm.serve.admission.OverloadMiddleware`), so a 429 costs one header read whatever else the stack
    does.

    Args:
        state: the server state (``app.state.brrm``).
        title, version, description, lifespan: as :class:`fastapi.FastAPI` takes them.
    """

    def __init__(self, state: ServerState, *, title: str, version: str, description: str,
                 lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]]) -> None:
        super().__init__(title=title, version=version, description=description, lifespan=lifespan, docs_url=None,
                         redoc_url=None)  # both served offline by serve.ops.add_offline_docs
        self.state.brrm = state
        self.brrm = state

    def build_middleware_stack(self) -> ASGIApp:
        return OverloadMiddleware(super().build_middleware_stack(), state=self.brrm, paths=judging_paths())


def create_app(judge: RewardJudge, *, limits: ServerLimits | None = None, close_judge: bool = True) -> FastAPI:
    """The ``brrm serve`` app over ``judge``.

    Args:
        judge: any judge :func:`brrm.load` returns (or another :class:`~brrm.RewardJudge`).
        limits: limits and settings (defaults: :class:`ServerLimits`).
        close_judge: close the judge when the app shuts down.

    Returns:
        A FastAPI app; run it with uvicorn (``brrm serve`` does, with graceful SIGTERM drain).

    Raises:
        ConfigError: when a setting does not fit the judge (``get_reward_mode='reference'`` for a scalar model).
    """
    limits = limits or ServerLimits()
    resolve_mode(limits.get_reward_mode, bool(judge.info.pairwise))  # refuses 'reference' for a scalar model
    metrics = Metrics()
    variants = Variants(judge)
    scheduler = Scheduler(make_runner(variants), max_batch=limits.max_batch, max_wait_s=limits.max_wait_ms / 1000,
                          max_queue=limits.max_queue, concurrency=limits.concurrency,
                          stall_timeout_s=limits.stall_timeout_s, max_abandoned=limits.max_abandoned, metrics=metrics,
                          failed=failed_result, split=bool(judge.info.concurrent), breaker=limits.breaker)
    metrics.watch_breaker(lambda: scheduler.breaker.state)
    state = ServerState(judge, limits, scheduler, metrics, variants, ready=False)
    app = ServeApp(state, title="brrm serve", version=_version(), lifespan=_lifespan(state, close_judge),
                   description="Pairwise judgments, scalar rewards and group rankings from a brrm judge "
                               "(BR-RM, Bradley–Terry or principle reward model), with OpenRLHF- and NeMo Gym-"
                               f"compatible routes. A request body over {limits.max_body_bytes} bytes "
                               "(--max-body-bytes) is refused with 413 as it streams in: the schema bounds items and "
                               "text fields, not a body's bytes.")
    _add_error_handlers(app)
    models = request_models(state)
    for router in ROUTERS:
        app.include_router(server_router(router, state, models))
    add_offline_docs(app)
    _add_middleware(app, state)
    return app


def judging_paths() -> tuple[str, ...]:
    """The POST paths of the judging routers (:data:`brrm.serve.routes.ROUTERS`)."""
    return tuple(r.path for router in routes.ROUTERS for r in router.routes if isinstance(r, APIRoute))


def _lifespan(state: ServerState, close_judge: bool) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the scheduler (and the warm-up) with the app; drain it and free the model when the app stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.scheduler.start()
        if state.limits.warmup:
            task = asyncio.create_task(warmup(state))
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)
        else:
            state.ready, state.not_ready = True, ""
        try:
            yield
        finally:
            state.draining = True
            await state.scheduler.drain(state.limits.drain_timeout_s)
            if close_judge:
                state.judge.close()

    return lifespan


def _add_middleware(app: FastAPI, state: ServerState) -> None:
    """``Idempotency-Key`` replies, CORS (only when configured), the API key, the streaming body limit and metrics
    (outermost last); overload is outside them all (:class:`ServeApp`)."""
    limits, metrics = state.limits, state.metrics

    def on_reply(scope: Scope, replayed: bool) -> None:
        metrics.idempotent.labels(endpoint=str(scope["path"]), reply="replayed" if replayed else "executed").inc()

    app.add_middleware(IdempotencyMiddleware, paths=judging_paths(), release=state.release, on_reply=on_reply)
    if limits.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type", "idempotency-key"])
    if limits.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=limits.api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    known = {r.path for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)}
    app.add_middleware(MetricsMiddleware, metrics=metrics, paths=[*known, "/docs", "/openapi.json"])


def _version() -> str:
    from brrm import __version__

    return __version__


def _body_problem(request: Request, exc: RequestValidationError) -> str:
    """What is wrong with the body as a whole, when that is the problem: not sent as JSON (content type), or not
    parseable JSON (what the parser expected, at which line and column); "" otherwise."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        doc, pos = exc.body if isinstance(exc.body, str) else "", first.get("loc", ("body", 0))[-1]
        pos = pos if isinstance(pos, int) else 0
        line = doc.count("\n", 0, pos) + 1
        column = pos - (doc.rfind("\n", 0, pos) + 1) + 1
        what = (first.get("ctx") or {}).get("error", "invalid JSON")
        ending = " (the body ends there: was it cut short?)" if pos >= len(doc.rstrip()) else ""
        return f"body is not valid JSON: {what} at line {line}, column {column} (character {pos}){ending}"
    content_type = request.headers.get("content-type", "")
    if request.method == "POST" and "json" not in content_type.lower() and first.get("loc") in (("body",), ["body"]):
        return (f"body: send the request as JSON with the header 'Content-Type: application/json' (got "
                f"{content_type or 'no Content-Type'})")
    return ""


def _valid_fields(request: Request, error: Any) -> str:
    """For a field the request's model does not have (``extra_forbidden``): the fields it has, e.g. ``; valid
    fields: max_new_tokens, max_total_tokens, decoding, seed`` for ``options.temperature``; "" otherwise."""
    if error.get("type") != "extra_forbidden":
        return ""
    body = getattr(request.scope.get("route"), "body_field", None)
    model = _model_in(getattr(getattr(body, "field_info", None), "annotation", None))
    for key in [k for k in error.get("loc", ()) if k != "body"][:-1]:  # down to the model holding the field
        fields = getattr(model, "model_fields", {})
        if not isinstance(key, int):  # an index: the list's items were unwrapped with the list
            model = _model_in(fields[key].annotation) if key in fields else None
    names = [f.alias or name for name, f in getattr(model, "model_fields", {}).items()]
    return f"; valid fields: {', '.join(names)}" if names else ""


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (itself, or inside ``X | None``, ``list[X]``, ``Annotated``), or None."""
    if hasattr(annotation, "model_fields"):
        return annotation
    return next((m for m in map(_model_in, typing.get_args(annotation)) if m is not None), None)


def _unparsed_body(exc: HTTPException) -> str:
    """What kept a body from being parsed at all, when FastAPI's 400 says only "There was an error parsing the
    body" (its cause: bytes that are not UTF-8, nesting deeper than the parser's recursion limit); "" else."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return ""
    if isinstance(cause, UnicodeDecodeError):
        return f"body is not UTF-8 text, as JSON must be: {cause.reason} at byte {cause.start}"
    if isinstance(cause, RecursionError):
        return "body is not JSON this server parses: its arrays or objects nest deeper than Python's recursion limit"
    return f"body could not be parsed as JSON ({type(cause).__name__}: {cause})"


_FIELDED: dict[type[Exception], tuple[int, str, tuple[str, ...]]] = {
    InvalidText: (422, "invalid_text", ("field", "position")), ConfigError: (422, "invalid_input", ()),
    FieldTooLong: (413, "field_too_long", ("field", "limit")), TooCostly: (413, "too_costly", ("cost", "limit")),
    TooManyItems: (413, "too_many_items", ("field", "limit"))}
"""Request errors answered as ``error_body(kind, message, **the named attributes)``: exception -> (HTTP status, error
type, attributes)."""


def _fielded(status: int, kind: str, fields: tuple[str, ...]) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler answering an exception of :data:`_FIELDED` with ``status`` and its error body."""
    async def handler(_request: Request, exc: Exception) -> Response:
        return JSONResponse(error_body(kind, str(exc), **{f: getattr(exc, f) for f in fields}), status_code=status)

    return handler


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: list[JSONValue] = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                                    "type": str(e.get("type", ""))} for e in exc.errors()]
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
        message = _body_problem(request, exc) or f"{where}: {first.get('msg', '')}" + _valid_fields(request, first)
        body = error_body("validation_error", message, errors=errors)
        return JSONResponse({**body, "detail": errors}, status_code=422)

    for exc_type, (status, kind, fields) in _FIELDED.items():
        app.add_exception_handler(exc_type, _fielded(status, kind, fields))

    @app.exception_handler(SchedulerError)
    async def scheduler(_request: Request, exc: SchedulerError) -> JSONResponse:
        kind = {429: "queue_full", 504: "deadline_exceeded"}.get(exc.status, "unavailable")
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else {}
        if isinstance(exc, BatchFailed):  # failing (every item alone, or the breaker open) or a miscount
            kind = "backend_failing" if exc.failing else "backend_error"
        return JSONResponse(error_body(kind, exc.message), status_code=exc.status, headers=headers)

    @app.exception_handler(ClientGone)
    async def gone(_request: Request, _exc: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(HTTPException)
    async def http(_request: Request, exc: HTTPException) -> JSONResponse:
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        unparsed = _unparsed_body(exc)
        body = error_body("invalid_json", unparsed) if unparsed else \
            error_body(kinds.get(exc.status_code, "http_error"), str(exc.detail))
        return JSONResponse({**body, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
