"""``create_app(judge)``: the FastAPI app of ``brrm serve`` over any :class:`~brrm.RewardJudge`.

The app owns a :class:`~brrm.serve.scheduler.Scheduler` (model work runs in a worker thread, coalesced across
requests), the body-size, item and field limits, the optional API key and CORS, and the Prometheus metrics.
Judging routes are in :mod:`brrm.serve.routes`; this module adds the operational ones (``/health``, ``/ready``,
``/v1/models``, ``/metrics``) and maps every error to one JSON shape: ``{"error": {"type", "message", ...}}``
(422 answers also keep FastAPI's ``detail`` list).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from brrm.errors import ConfigError
from brrm.serve.calls import CallOptions, PairItem, ScoreItem, Variants, make_runner, pairs_key, score_key
from brrm.serve.limits import ServerLimits
from brrm.serve.metrics import Metrics, MetricsMiddleware
from brrm.serve.openrlhf import resolve_mode
from brrm.serve.scheduler import QueueFull, Scheduler, SchedulerError, Unavailable
from brrm.serve.security import ApiKeyMiddleware, BodyLimitMiddleware, FieldTooLong, error_body
from brrm.types import Conversation, RewardJudge

log = logging.getLogger("brrm.serve")

KNOWN_PATHS = ("/v1/judge", "/v1/score", "/v1/rank", "/get_reward", "/compare", "/health", "/ready", "/v1/models",
               "/metrics", "/docs", "/openapi.json")


class TooManyItems(Exception):
    """A request with more items than the server takes (HTTP 413)."""

    def __init__(self, field: str, n: int, limit: int) -> None:
        super().__init__(f"{field} has {n} items; the limit is {limit} per request (--max-items, capped by "
                         "--max-queue); split the request")
        self.field, self.n, self.limit = field, n, limit


class ClientGone(Exception):
    """The client disconnected while its request waited; nothing is sent."""


def clean(value: Any) -> Any:
    """A JSON-ready copy with non-finite floats as ``None`` (the status beside them says why)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


@dataclass
class ServerState:
    """What the routes share: the judge, limits, scheduler, metrics and readiness.

    Attributes:
        judge: the served judge.
        limits: the server's limits and settings.
        scheduler: coalesces and runs judge calls.
        metrics: Prometheus metrics.
        variants: the judge's per-request variants (decoding options).
        ready: the model answered a warm-up call (or warm-up is off).
        not_ready: why ``/ready`` is 503 ("" when ready).
        draining: SIGTERM received: ``/ready`` answers 503 while in-flight requests finish (uvicorn has closed the
            listener, so no new request arrives).
    """

    judge: RewardJudge
    limits: ServerLimits
    scheduler: Scheduler
    metrics: Metrics
    variants: Variants
    ready: bool = False
    not_ready: str = "warming up"
    draining: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def info(self) -> dict[str, Any]:
        return self.judge.info.to_dict()

    @property
    def pairwise(self) -> bool:
        return bool(self.judge.info.pairwise)

    def check_items(self, n: int, name: str) -> None:
        """Raises :class:`TooManyItems` when ``n`` is over the per-request limit."""
        if n > self.limits.item_limit:
            raise TooManyItems(name, n, self.limits.item_limit)

    def options(self, given: Any) -> CallOptions | None:
        """The per-request options of a body (None when none are set), checked against the judge and limits.

        Raises:
            ConfigError: when the judge takes no options, or a budget exceeds the server's.
        """
        if given is None:
            return None
        options = CallOptions(**given.model_dump())
        if not options:
            return None
        self.variants.get(options)
        return options

    def timeout(self, requested: float | None) -> float:
        return min(requested or self.limits.deadline_s, self.limits.deadline_s)

    async def submit(self, request: Request, key: Any, items: list[Any], *, timeout_s: float | None = None,
                     cost: int | None = None) -> list[Any]:
        """Run ``items`` through the scheduler, dropping them if the client disconnects first.

        Raises:
            SchedulerError: 429 / 503 / 504 (see :mod:`brrm.serve.scheduler`). ConfigError: the judge refused
                the input (422). ClientGone: the client left.
        """
        task = asyncio.ensure_future(self.scheduler.submit(key, items, timeout_s=self.timeout(timeout_s), cost=cost))
        watcher = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, SchedulerError):
                    await task
                raise ClientGone()
        return task.result()


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body has been read, so ``receive`` only reports that)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def conversation(value: Any, where: str) -> Conversation:
    """A validated :class:`Conversation` from a request's ``conversation`` messages or ``prompt`` string.

    Raises:
        ConfigError: naming ``where``.
    """
    if getattr(value, "prompt", None) is not None:
        return Conversation.coerce(value.prompt, where=f"{where}.prompt")
    messages = [m.model_dump(exclude_none=True) for m in value.conversation]
    return Conversation.coerce(messages, where=f"{where}.conversation")


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
    from brrm.serve.routes import add_routes

    limits = limits or ServerLimits()
    resolve_mode(limits.get_reward_mode, bool(judge.info.pairwise))  # refuses 'reference' for a scalar model
    metrics = Metrics()
    variants = Variants(judge)
    scheduler = Scheduler(make_runner(variants), max_batch=limits.max_batch, max_wait_s=limits.max_wait_ms / 1000,
                          max_queue=limits.max_queue, concurrency=limits.concurrency,
                          stall_timeout_s=limits.stall_timeout_s, max_abandoned=limits.max_abandoned, metrics=metrics)
    state = ServerState(judge, limits, scheduler, metrics, variants, ready=False)
    app = FastAPI(title="brrm serve", version=_version(), lifespan=_lifespan(state, close_judge),
                  description="Pairwise judgments, scalar rewards and group rankings from a brrm judge "
                              "(BR-RM, Bradley–Terry or principle reward model), with OpenRLHF- and NeMo Gym-"
                              "compatible routes.")
    app.state.brrm = state
    _add_error_handlers(app)
    _add_ops_routes(app, state)
    add_routes(app, state)
    _add_middleware(app, limits, metrics)
    return app


def _lifespan(state: ServerState, close_judge: bool) -> Any:
    """Start the scheduler (and the warm-up) with the app; drain it and free the model when the app stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.scheduler.start()
        if state.limits.warmup:
            task = asyncio.create_task(_warmup(state))
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


def _add_middleware(app: FastAPI, limits: ServerLimits, metrics: Metrics) -> None:
    """CORS (only when configured), the API key, the streaming body limit and metrics (outermost last)."""
    if limits.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"])
    if limits.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=limits.api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, paths=KNOWN_PATHS)


async def _warmup(state: ServerState) -> None:
    """Judge one tiny pair (or score one response) through the scheduler, then report ready."""
    conv = Conversation.coerce("Say hello.")
    try:
        if state.pairwise:
            await state.scheduler.submit(pairs_key(None), [PairItem(conv, "Hello!", "Hi.")],
                                         timeout_s=state.limits.deadline_s)
        else:
            await state.scheduler.submit(score_key(False, False), [ScoreItem(conv, "Hello!")],
                                         timeout_s=state.limits.deadline_s)
    except Exception as exc:  # noqa: BLE001 - reported on /ready, the server stays up
        state.not_ready = f"warm-up failed: {type(exc).__name__}: {exc}"
        log.error("brrm serve: %s", state.not_ready)
        return
    state.ready, state.not_ready = True, ""


def _version() -> str:
    from brrm import __version__

    return __version__


def _add_ops_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health", tags=["operations"], summary="Process up (no API key needed)")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", tags=["operations"], summary="Model loaded, warm and taking work (503 otherwise)",
             responses={503: {"description": "not ready, with the reason"}})
    async def ready() -> JSONResponse:
        why = ("shutting down" if state.draining else state.not_ready if not state.ready
               else "" if state.scheduler.accepting else "the backend is stuck on abandoned judge calls")
        body = {"ready": not why, "reason": why, "queue_depth": state.scheduler.queue_depth,
                "running": state.scheduler.running}
        return JSONResponse(body, status_code=503 if why else 200)

    @app.get("/v1/models", tags=["operations"], summary="What is served: model, kind, recipe, backend, limits")
    async def models() -> dict[str, Any]:
        info = state.info
        return {"object": "list", "data": [{"id": info["model"], "object": "model", "owned_by": "brrm", **info,
                                             "limits": state.limits.public()}]}

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics (text exposition format)")
    async def metrics() -> Response:
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": e.get("type", "")}
                  for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(x for x in first["loc"] if x != "body") or "body"
        body = error_body("validation_error", f"{where}: {first['msg']}", errors=errors)
        return JSONResponse({**body, "detail": errors}, status_code=422)

    @app.exception_handler(ConfigError)
    async def config(_request: Request, exc: ConfigError) -> JSONResponse:
        return JSONResponse(error_body("invalid_input", str(exc)), status_code=422)

    @app.exception_handler(FieldTooLong)
    async def field_too_long(_request: Request, exc: FieldTooLong) -> JSONResponse:
        return JSONResponse(error_body("field_too_long", str(exc), field=exc.field, limit=exc.limit), status_code=413)

    @app.exception_handler(TooManyItems)
    async def too_many(_request: Request, exc: TooManyItems) -> JSONResponse:
        return JSONResponse(error_body("too_many_items", str(exc), field=exc.field, limit=exc.limit),
                            status_code=413)

    @app.exception_handler(SchedulerError)
    async def scheduler(_request: Request, exc: SchedulerError) -> JSONResponse:
        kind = {429: "queue_full", 504: "deadline_exceeded"}.get(exc.status, "unavailable")
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, QueueFull) else {}
        if exc.status == 503 and not isinstance(exc, Unavailable):
            kind = "backend_error"
        return JSONResponse(error_body(kind, exc.message), status_code=exc.status, headers=headers)

    @app.exception_handler(ClientGone)
    async def gone(_request: Request, _exc: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(HTTPException)
    async def http(_request: Request, exc: HTTPException) -> JSONResponse:
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        body = error_body(kinds.get(exc.status_code, "http_error"), str(exc.detail))
        return JSONResponse({**body, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
