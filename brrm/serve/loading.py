"""Liveness from the first second: ``brrm serve`` listens first and loads the model beside it.

:class:`LoadingApp` is the ASGI app uvicorn runs. From the moment the socket listens it answers ``/health`` (200,
the process is up), ``/ready`` (503, reason ``loading``) and every other route (503, error type ``loading``, with
``Retry-After``), while the judge loads in a daemon thread; once the real app (:func:`brrm.serve.app.create_app`)
is built, its lifespan (scheduler, warm-up) is entered and every request goes to it. A liveness probe therefore
never waits for the load (78 s for the demo model), and SIGTERM during the load stops the server at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from brrm.serve.security import ApiKeyMiddleware, error_body, send_json

if TYPE_CHECKING:
    from fastapi import FastAPI

LOADING = "loading"
"""``/ready``'s reason, and the error type of every other route, while the model loads."""

RETRY_AFTER_S = 5
"""``Retry-After`` (seconds) of a route answered while the model loads."""


class LoadingApp:
    """The ASGI app of ``brrm serve``: answers while ``build`` loads the judge, then is the app ``build`` made.

    Args:
        build: makes the real app (loads the judge and calls :func:`~brrm.serve.app.create_app`); run once, in a
            daemon thread, when the server starts.
        api_key: when set, every loading answer but ``/health`` needs it, as the real app's routes do.
        on_failure: called (in the event loop) with the exception ``build`` raised; ``brrm serve`` stops the server
            and reports it.

    Attributes:
        app: the real app once built and started, else None.
        error: what ``build`` raised, else None.
        draining: the server was asked to stop (SIGTERM / Ctrl-C).
    """

    def __init__(self, build: Callable[[], FastAPI], *, api_key: str | None = None,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self.build, self.on_failure = build, on_failure
        self.app: FastAPI | None = None
        self.error: BaseException | None = None
        self.draining = False
        self._context: AbstractAsyncContextManager[object] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loading = ApiKeyMiddleware(self._answer_loading, api_key) if api_key else self._answer_loading

    @property
    def loaded(self) -> bool:
        """Whether the real app is built and started."""
        return self.app is not None

    def begin_drain(self) -> None:
        """The server was asked to stop: ``/ready`` says so (the real app's state too, once it exists)."""
        self.draining = True
        if self.app is not None:
            self.app.state.brrm.draining = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._loading(scope, receive, send)

    async def _answer_loading(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/health`` 200, ``/ready`` 503 ``loading`` (or the load's failure), anything else 503 ``loading``."""
        path = scope.get("path")
        if path == "/health":
            await send_json(send, 200, {"status": "ok"}, close=False)
            return
        reason = ("shutting down" if self.draining else LOADING if self.error is None
                  else f"the model failed to load: {type(self.error).__name__}: {self.error}")
        if path == "/ready":
            await send_json(send, 503, {"ready": False, "reason": reason, "queue_depth": 0, "running": 0,
                                        "warmup_attempts": 0}, close=False)
            return
        await send_json(send, 503, error_body(LOADING, f"the model is {reason}; retry when /ready answers 200"),
                        [("retry-after", str(RETRY_AFTER_S))], close=False)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Start loading on startup (answered at once); on shutdown stop the real app (drain, free the model)."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.create_task(self._load())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.begin_drain()
                if self._context is not None:
                    await self._context.__aexit__(None, None, None)
                elif self._task is not None:
                    self._task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _load(self) -> None:
        """Run ``build`` in a daemon thread (a stop never waits for it), then start the app it made."""
        done: concurrent.futures.Future[FastAPI] = concurrent.futures.Future()

        def work() -> None:
            try:
                done.set_result(self.build())
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop, reported by brrm serve
                done.set_exception(exc)

        threading.Thread(target=work, name="brrm-load", daemon=True).start()
        try:
            app = await asyncio.wrap_future(done)  # dropped if the server stopped during the load
        except Exception as exc:  # noqa: BLE001 - the load failed: reported on /ready and by brrm serve
            self.error = exc
            if self.on_failure is not None:
                self.on_failure(exc)
            return
        context = app.router.lifespan_context(app)
        await context.__aenter__()
        self._context, self.app = context, app
        if self.draining:
            app.state.brrm.draining = True
