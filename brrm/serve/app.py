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
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from brrm.errors import ConfigError
from brrm.serve.admission import OverloadMiddleware
from brrm.serve.calls import (
    CallOptions,
    Variants,
    failed_result,
    make_runner,
)
from brrm.serve.limits import ServerLimits
from brrm.serve.metrics import Metrics, MetricsMiddleware
from brrm.serve.openrlhf import resolve_mode
from brrm.serve.ops import add_ops_routes, warmup
from brrm.serve.security import ApiKeyMiddleware, BodyLimitMiddleware, FieldTooLong, InvalidText, error_body
from brrm.service.scheduler import QueueFull, Scheduler, SchedulerError, Unavailable
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


class TooCostly(Exception):
    """A request whose cost in judgments is over the per-request limit (HTTP 413), known before it is queued."""

    def __init__(self, what: str, cost: int, limit: int) -> None:
        super().__init__(f"{what} costs {cost} judgments; the limit is {limit} per request "
                         "(--max-judgments-per-request, capped by --max-queue); split the request or use a cheaper "
                         "strategy")
        self.cost, self.limit = cost, limit


class ClientGone(Exception):
    """The client disconnected while its request waited; nothing is sent."""


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
    warmup_attempts: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def info(self) -> dict[str, Any]:
        """The judge's info with the model's public name (a hub id, or a local folder's name; never a path)."""
        return self.model_block

    @functools.cached_property
    def model_block(self) -> dict[str, Any]:
        """The reply-level ``model`` block, built once: :attr:`JudgeInfo.to_dict` with the public model name."""
        from brrm.serve.replies import public_name

        info = self.judge.info.to_dict()
        spec = info.get("spec")
        if isinstance(spec, dict):  # the spec names the weights by fingerprint; its model path stays private
            info["spec"] = {**spec, "model": public_name(str(spec["model"])) if spec.get("model") else None}
        return {**info, "model": public_name(str(info["model"]))}

    @property
    def pairwise(self) -> bool:
        return bool(self.judge.info.pairwise)

    def mark_ready(self) -> None:
        """The model answered a call: ``/ready`` reports ready (unless draining or stuck)."""
        self.ready, self.not_ready = True, ""

    def check_items(self, n: int, name: str) -> None:
        """Raises :class:`TooManyItems` when ``n`` is over the per-request limit."""
        if n > self.limits.item_limit:
            raise TooManyItems(name, n, self.limits.item_limit)

    def check_cost(self, cost: int, what: str) -> int:
        """``cost`` (judgments; times the judge's ``samples`` under self-consistency voting) when it is within the
        per-request limit, checked before anything is queued.

        Raises:
            TooCostly: over :attr:`ServerLimits.judgment_limit` (413, naming the cost and the limit).
        """
        samples = int(self.judge.info.options.get("samples", 1) or 1) if self.pairwise else 1
        if samples > 1:
            cost, what = cost * samples, f"{what} x {samples} samples"
        if cost > self.limits.judgment_limit:
            raise TooCostly(what, cost, self.limits.judgment_limit)
        return cost

    @property
    def swap(self) -> bool:
        """The judge's default ``swap`` (both presentation orders per pair)."""
        return bool(self.judge.info.options.get("swap"))

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
                     cost: int | None = None, weights: list[int] | None = None,
                     units: list[int] | None = None) -> list[Any]:
        """Run ``items`` through the scheduler, dropping them if the client disconnects first.

        Raises:
            SchedulerError: 429 / 503 / 504 (see :mod:`brrm.serve.scheduler`). ConfigError: the judge refused
                the input (422). ClientGone: the client left.
        """
        task = asyncio.ensure_future(self.scheduler.submit(key, items, timeout_s=self.timeout(timeout_s), cost=cost,
                                                           weights=weights, units=units))
        task.add_done_callback(self._returned)
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


    def _returned(self, task: asyncio.Future[Any]) -> None:
        """A judge call that returned results proves the model works: mark ready (a failed warm-up is not
        permanent)."""
        if not self.ready and not task.cancelled() and task.exception() is None:
            self.mark_ready()


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
                          stall_timeout_s=limits.stall_timeout_s, max_abandoned=limits.max_abandoned, metrics=metrics,
                          failed=failed_result)
    state = ServerState(judge, limits, scheduler, metrics, variants, ready=False)
    app = FastAPI(title="brrm serve", version=_version(), lifespan=_lifespan(state, close_judge), docs_url=None,
                  description="Pairwise judgments, scalar rewards and group rankings from a brrm judge "
                              "(BR-RM, Bradley–Terry or principle reward model), with OpenRLHF- and NeMo Gym-"
                              "compatible routes.")
    app.state.brrm = state
    _add_error_handlers(app)
    add_ops_routes(app, state)
    add_routes(app, state)
    _add_middleware(app, state)
    return app


def _lifespan(state: ServerState, close_judge: bool) -> Any:
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
    """CORS (only when configured), overload (429 before the body is read), the API key, the streaming body
    limit and metrics (outermost last)."""
    limits, metrics = state.limits, state.metrics
    if limits.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"])
    app.add_middleware(OverloadMiddleware, state=state)
    if limits.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=limits.api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, paths=KNOWN_PATHS)


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


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": e.get("type", "")}
                  for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(x for x in first["loc"] if x != "body") or "body"
        message = _body_problem(request, exc) or f"{where}: {first['msg']}"
        body = error_body("validation_error", message, errors=errors)
        return JSONResponse({**body, "detail": errors}, status_code=422)

    @app.exception_handler(InvalidText)
    async def invalid_text(_request: Request, exc: InvalidText) -> JSONResponse:
        return JSONResponse(error_body("invalid_text", str(exc), field=exc.field, position=exc.position),
                            status_code=422)

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

    @app.exception_handler(TooCostly)
    async def too_costly(_request: Request, exc: TooCostly) -> JSONResponse:
        return JSONResponse(error_body("too_costly", str(exc), cost=exc.cost, limit=exc.limit), status_code=413)

    @app.exception_handler(ClientGone)
    async def gone(_request: Request, _exc: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(HTTPException)
    async def http(_request: Request, exc: HTTPException) -> JSONResponse:
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        body = error_body(kinds.get(exc.status_code, "http_error"), str(exc.detail))
        return JSONResponse({**body, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
