"""``brrm.load(url, backend="serve")`` and ``JudgeSpec(url, backend="serve").load()``: a :class:`RemoteJudge`
over a running ``brrm serve``, with the checks that tell a user which options apply over HTTP.
"""

from __future__ import annotations

import dataclasses
import os

from brrm.errors import ConfigError
from brrm.load_options import request_options
from brrm.service.remote import RemoteJudge
from brrm.types import check_float, check_int

CLIENT_OPTIONS = ("api_key", "timeout_s", "retries", "concurrency")
"""The keywords of ``brrm.load(url, backend="serve", ...)`` that configure the client (see :class:`RemoteJudge`)."""


def load_remote(model: str | None, *, kind: str = "auto", backend: object = "serve", calibration: object = None,
                **options: object) -> RemoteJudge:
    """``brrm.load(url, backend="serve", ...)``: a :class:`RemoteJudge` over the ``brrm serve`` at ``model``.

    Args:
        model: the server's base URL (``http://HOST:PORT``), or ``ray://APP``: a running ``brrm serve --ray``
            application, called through its Ray Serve handle from inside the cluster (no HTTP;
            :class:`~brrm.serve.ray.client.RayJudge`).
        kind: ``auto``, or the kind the server must serve (checked against its declared traits).
        backend: must be ``serve`` (a URL with another backend is refused here, naming the fix).
        calibration: must be None (calibrate on the server: ``brrm serve --calibration``).
        **options: the client's :data:`CLIENT_OPTIONS` (``api_key`` defaults to ``$BRRM_API_KEY``; it is never
            kept in the spec), and ``swap`` and the per-request judge options
            (:func:`brrm.load_options.request_options`), which :meth:`RemoteJudge.with_options` applies.

    Returns:
        The judge; its ``info.spec`` is ``JudgeSpec(model, kind=kind, backend="serve", options=options)``.

    Raises:
        ConfigError: on a model that is not an http(s) URL, a URL without ``backend="serve"``, a kind the
            server does not serve, a calibration, an option that does not apply over HTTP (naming the valid
            ones), or a server that cannot be reached.
    """
    from brrm.types.protocols import KIND_TRAITS, JudgeSpec

    ray_app = isinstance(model, str) and model.startswith("ray://")  # a Ray Serve app, through its handle
    if backend != "serve" and not (ray_app and backend in ("transformers", "ray")):  # transformers: load's default
        raise ConfigError(f"model {model!r} is a URL: backend {backend!r} loads weights, not a server; to "
                          "judge with the brrm serve there from Python, pass backend='serve': "
                          "brrm.load(url, backend='serve')")
    if not isinstance(model, str) or not model.startswith(("http://", "https://", "ray://")):
        raise ConfigError(f"backend='serve' needs the http(s) URL of a running brrm serve (or ray://APP) as model, "
                          f"got {model!r}")
    if calibration is not None:
        raise ConfigError("calibration does not apply to backend='serve' (calibrate on the server: brrm serve "
                          "--calibration)")
    valid = (*CLIENT_OPTIONS, "swap", *(o.keyword for o in request_options()))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"option {unknown[0]!r} does not apply to backend='serve' (the server's own settings "
                          f"rule); valid: {', '.join(valid)}")
    api_key = options.get("api_key", os.environ.get("BRRM_API_KEY") or None)
    if api_key is not None and not isinstance(api_key, str):
        raise ConfigError(f"api_key must be a string, got {type(api_key).__name__}")
    client = {"api_key": api_key, "timeout_s": check_float("timeout_s", options.get("timeout_s", 600.0), low=0,
                                                           low_open=True),
              "retries": check_int("retries", options.get("retries", 3), low=0),
              "concurrency": check_int("concurrency", options.get("concurrency", 8), low=1)}
    judge = _ray_judge(model, client) if ray_app else RemoteJudge(model, **client)  # type: ignore[arg-type]
    if kind != "auto":
        traits = KIND_TRAITS.get(kind)
        served = {t: getattr(judge.info, t) for t in ("pairwise", "takes_principle", "needs_reference")}
        if traits is None or {t: traits[t] for t in served} != served:
            judge.close()
            raise ConfigError(f"kind {kind!r} does not apply: brrm serve at {model} serves a judge with traits "
                              f"{served} ({judge.info.describe()})")
    variant = {k: v for k, v in options.items() if k not in CLIENT_OPTIONS}
    if variant:
        made = judge.with_options(**variant)
        judge.close()
        judge = made
    kept = {k: v for k, v in options.items() if k != "api_key"}  # a secret: never in a spec, a result or a store
    judge.info = dataclasses.replace(judge.info, spec=JudgeSpec(model, kind=kind, backend="serve", options=kept))
    return judge


def _ray_judge(model: str, client: dict[str, object]) -> RemoteJudge:
    """``ray://APP``: the judge of that running Ray Serve application (:mod:`brrm.serve.ray.client`), named by
    reference as the registry names what it builds: the client lives with the app it calls, a layer above."""
    from brrm.registry import resolve

    app_name, ray_judge = resolve(f"{RAY_CLIENT}:app_name"), resolve(f"{RAY_CLIENT}:RayJudge")
    judge: RemoteJudge = ray_judge(app_name(model), **client)
    return judge


RAY_CLIENT = "brrm.serve.ray.client"
"""The module of ``ray://`` judges (:class:`~brrm.serve.ray.client.RayJudge`)."""
