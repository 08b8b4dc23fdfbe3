"""``brrm.load("ray://APP")``: a :class:`~brrm.service.RemoteJudge` whose requests go through the Ray Serve app's
``DeploymentHandle`` instead of HTTP, for callers inside the cluster (an RLHF job on the same Ray cluster).

The judge is :class:`RayJudge`: RemoteJudge's own client — the same requests, typed results, costs, retries under
one ``Idempotency-Key``, ``with_options`` — over an httpx transport (:class:`HandleTransport`) that hands each
request to a judge replica through the handle (:func:`brrm.serve.ray.forward.forward_sync`: routed by its key, sent
again when its replica dies). No ingress, no socket, no proxy on the way; the replica answers it with the same app
the HTTP route reaches, so the results are the HTTP route's.
"""

from __future__ import annotations

from typing import Any

import httpx

from brrm.errors import ConfigError
from brrm.serve.ray.sizing import JUDGE
from brrm.serve.ray.wire import Forwarded, end_to_end
from brrm.service.remote import RemoteJudge

SCHEME = "ray://"
"""The model prefix :func:`brrm.load` reads as a Ray Serve application's name."""


class HandleTransport(httpx.BaseTransport):
    """An httpx transport whose every request is answered by a judge replica through ``handle``.

    Args:
        handle: the judge deployment's ``DeploymentHandle``.
        timeout_s: a request's deadline in seconds (the app's own; the call is dropped a grace period later).
    """

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """The replica's answer to ``request`` (a typed 503 when none could answer)."""
        from brrm.serve.ray.forward import forward_sync

        forwarded = Forwarded(request.method, request.url.path, request.url.query.decode(),
                              end_to_end(request.headers.raw), request.read())
        answer = forward_sync(self.handle, forwarded, timeout_s=self.timeout_s)
        return httpx.Response(answer.status, headers=list(answer.headers), content=answer.body, request=request)


class RayJudge(RemoteJudge):
    """The judge of the running Ray Serve application ``app``, through its handle (see the module).

    Args:
        app: the application's name (``brrm serve --ray --app-name``; default ``brrm``).
        api_key, timeout_s, retries, concurrency: as :class:`~brrm.service.RemoteJudge`.

    Raises:
        ConfigError: when Ray Serve is not installed, Ray cannot be reached, or no such application runs.
    """

    def __init__(self, app: str, *, api_key: str | None = None, timeout_s: float = 600.0, retries: int = 3,
                 concurrency: int = 8) -> None:
        handle = _judge_handle(app)
        super().__init__(f"http://{app}.ray", api_key=api_key, timeout_s=timeout_s, retries=retries,
                         concurrency=concurrency, transport=HandleTransport(handle, timeout_s))
        self.app = app

    def __repr__(self) -> str:
        shape = "pairwise" if self.info.pairwise else "scalar"
        return f"RayJudge({SCHEME + self.app!r}, model={self.info.model!r}, {shape})"


def app_name(model: str) -> str:
    """The application name in ``ray://APP``.

    Raises:
        ConfigError: when there is none, or it has a ``/`` or ``:`` (``ray://head:10001`` is a cluster address:
            connect with ``ray.init`` first, then load ``ray://APP``).
    """
    name = model[len(SCHEME):] if model.startswith(SCHEME) else ""
    if not name or "/" in name or ":" in name:
        raise ConfigError(f"model {model!r}: expected ray://APP, the name of a running brrm Ray Serve application "
                          "(brrm serve --ray --app-name; a cluster address goes to ray.init, not here)")
    return name


def _judge_handle(app: str) -> Any:
    """The judge deployment's handle in application ``app`` (Ray started with ``address="auto"`` if needed)."""
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        from brrm.errors import install_extra

        raise ConfigError(f"ray://{app} needs Ray Serve ({exc.name} is missing): {install_extra('ray')}") from None
    try:
        if not ray.is_initialized():
            ray.init(address="auto", log_to_driver=False)
        statuses = serve.status().applications
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"ray://{app}: no Ray cluster to reach ({type(exc).__name__}: {exc})") from None
    if app not in statuses:
        raise ConfigError(f"ray://{app}: no such Ray Serve application; running: {', '.join(statuses) or 'none'}")
    return serve.get_deployment_handle(JUDGE, app_name=app)
