"""The operational side of ``brrm serve``: ``/health``, ``/ready``, ``/v1/models``, ``/metrics``, offline
``/docs`` (each GET and HEAD), and the warm-up.

``/docs`` (Swagger UI 5, which reads the OpenAPI 3.1 document FastAPI writes) and ``/redoc`` (ReDoc, without web
fonts) are served from the assets the installed ``fastapi-offline`` package ships (under ``/docs/assets``), so
both render without internet access; FastAPI's default pages load them from a CDN.

Warm-up: one tiny judgment through the scheduler, with the smallest token budget the judge takes (BR-RM: 16
tokens per turn), so it costs the model little and coalesces with requests instead of holding the worker in
front of them. A failed warm-up is reported on ``/ready`` (503 with the reason and the attempt) and retried with
backoff (1, 2, 4 … 60 s); any judge call that returns meanwhile also marks the server ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse, Response

from brrm.errors import ConfigError
from brrm.serve.schemas import HealthResponse, ModelsResponse, ReadyResponse
from brrm.serve.state import ServerState, State
from brrm.service.items import CallOptions, PairItem, ScoreCall, ScoreItem, pairs_key
from brrm.types import Conversation

log = logging.getLogger("brrm.serve")

WARMUP_PRINCIPLE = "The response is polite."
"""The principle of the warm-up's scored response when the judge is a principle model without a default one (its
requests name their own)."""
WARMUP_TOKENS = 16
"""Tokens per turn of the BR-RM warm-up judgment (enough to run prefill and decode once; its verdict is unused)."""

WARMUP_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)
"""Seconds between warm-up attempts (the last repeats)."""


router = APIRouter(tags=["operations"])
"""``/health``, ``/ready``, ``/v1/models`` and ``/metrics`` (each GET and HEAD)."""


@router.get("/health", summary="Process up (no API key needed; HEAD too)")
async def health() -> HealthResponse:
    return HealthResponse(status="ok")


@router.get("/ready", summary="Model loaded, warm and taking work (503 otherwise; HEAD too)",
            responses={503: {"model": ReadyResponse, "description": "not ready, with the reason"}})
async def ready(state: State, response: Response) -> ReadyResponse:
    why = "shutting down" if state.draining else state.not_ready if not state.ready else state.scheduler.unready()
    response.status_code = 503 if why else 200
    return ReadyResponse(ready=not why, reason=why, queue_depth=state.scheduler.queue_depth,
                         running=state.scheduler.running, warmup_attempts=state.warmup_attempts)


@router.get("/v1/models", summary="What is served: model, kind, recipe, backend, limits")
async def models(state: State) -> ModelsResponse:
    info = state.model_block
    return ModelsResponse(object="list", data=[{"id": info["model"], "object": "model", "owned_by": "brrm", **info,
                                                "limits": state.limits.public()}])


@router.get("/metrics", summary="Prometheus metrics (text exposition format)", response_class=Response,
            responses={200: {"description": "the metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def metrics(state: State) -> Response:
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)


# HEAD answers as GET: same status and headers, no body (RFC 9110 §9.3.2; the HTTP server drops the body), for
# probes and caches; kept out of the schema, which lists each route once (HEAD is implicit there)
for _path, _endpoint in (("/health", health), ("/ready", ready), ("/v1/models", models), ("/metrics", metrics)):
    router.add_api_route(_path, _endpoint, methods=["HEAD"], include_in_schema=False)


def add_offline_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from the assets of the installed ``fastapi-offline``
    (Swagger UI 5.x, ReDoc 2.x; no CDN, no web fonts), each for GET and HEAD. Without the package (the serve extra
    installs it) ``/docs`` is FastAPI's CDN page and ``/redoc`` is not mounted."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

    try:
        import fastapi_offline
    except ImportError:  # keep a working (online) page without it
        js, css = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js", \
            "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css"
        favicon, redoc_js = "https://fastapi.tiangolo.com/img/favicon.png", None
    else:
        from pathlib import Path

        from starlette.staticfiles import StaticFiles

        assets = Path(fastapi_offline.__file__).parent / "static"
        app.mount("/docs/assets", StaticFiles(directory=assets), name="docs-assets")
        js, css = "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"
        favicon, redoc_js = "/docs/assets/favicon.png", "/docs/assets/redoc.standalone.js"

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="brrm serve - docs", swagger_js_url=js,
                                   swagger_css_url=css, swagger_favicon_url=favicon)

    app.add_api_route("/docs", docs, methods=["GET", "HEAD"], include_in_schema=False)  # HEAD as GET
    if redoc_js is not None:
        async def redoc() -> HTMLResponse:
            return get_redoc_html(openapi_url="/openapi.json", title="brrm serve - ReDoc", redoc_js_url=redoc_js,
                                  redoc_favicon_url=favicon, with_google_fonts=False)

        app.add_api_route("/redoc", redoc, methods=["GET", "HEAD"], include_in_schema=False)


def _warmup_job(state: ServerState) -> tuple[Hashable, list[PairItem] | list[ScoreItem]]:
    """The warm-up's (key, items): one tiny pair with a small token budget, or one scored response."""
    conv = Conversation.coerce("Say hello.")
    if not state.pairwise:
        named = state.needs_principle
        return ScoreCall(False, named), [ScoreItem(conv, "Hello!", WARMUP_PRINCIPLE if named else None)]
    options: CallOptions | None = CallOptions.of({"max_new_tokens": WARMUP_TOKENS})
    try:
        state.variants.get(options)
    except ConfigError:  # a judge without per-call budgets warms up with its own
        options = None
    return pairs_key(None, options=options), [PairItem(conv, "Hello!", "Hi.")]


async def warmup(state: ServerState) -> None:
    """Warm the judge up through the scheduler until one call returns; report each failure on ``/ready``."""
    key, items = _warmup_job(state)
    for attempt in range(1, 1 << 30):
        if state.ready or state.draining:
            return
        state.warmup_attempts = attempt
        try:
            await state.scheduler.submit(key, items, timeout_s=state.limits.deadline_s)
        except Exception as exc:  # noqa: BLE001 - reported on /ready, retried; the server stays up
            delay = WARMUP_BACKOFF_S[min(attempt, len(WARMUP_BACKOFF_S)) - 1]
            state.not_ready = (f"warm-up attempt {attempt} failed: {type(exc).__name__}: {exc}; retrying in "
                               f"{delay:g} s")
            log.error("brrm serve: %s", state.not_ready)
            await asyncio.sleep(delay)
            continue
        state.mark_ready()
        return
