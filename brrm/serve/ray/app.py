"""``build_app``: brrm's judge as a Ray Serve application, and the Serve config (``serve deploy``, KubeRay) of one.

Two deployments: ``BrrmIngress`` (:class:`~brrm.serve.ray.ingress.Ingress`, the HTTP front, no model) and
``BrrmJudge`` (:class:`~brrm.serve.ray.replica.JudgeReplica`, one whole judge each, routed by
:class:`~brrm.serve.ray.router.DigestRouter`). Ray Serve runs the replicas, checks their health, restarts them,
scales them on queue length (``autoscaling_config``) and proxies HTTP; brrm writes none of that.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from brrm.audit.ray_runner import passed_env
from brrm.errors import ConfigError
from brrm.serve.limits import ServerLimits
from brrm.serve.ray.sizing import INGRESS, JUDGE, ROUTER, RaySizing
from brrm.types import JudgeSpec

if TYPE_CHECKING:
    from ray.serve import Application

APP_NAME = "brrm"
"""The default Ray Serve application name (``brrm.load("ray://brrm")``)."""
BUILDER = "brrm.serve.ray.app:from_args"
"""The import path of the application builder a Serve config names (:func:`from_args`)."""
INGRESS_ONGOING = 1024
"""Requests one ingress replica holds at once (it only waits on judge replicas; each judge replica queues and
refuses by its own ``max_queue``)."""


def build_app(spec: JudgeSpec, *, limits: ServerLimits | None = None, replicas: int = 1,
              autoscale: tuple[int, int] | None = None, gpus_per_replica: float = 0.0, cpus_per_replica: float = 1.0,
              ingress_replicas: int = 1, sizing: RaySizing | None = None) -> Application:
    """The Ray Serve application of a judge: run it with ``ray.serve.run(app, name=..., route_prefix="/")``.

    Args:
        spec: what each judge replica loads (:meth:`brrm.JudgeSpec.from_load`).
        limits: the server's limits, as ``brrm serve`` takes them (default :class:`~brrm.serve.ServerLimits`).
        replicas, autoscale, gpus_per_replica, cpus_per_replica, ingress_replicas: the sizing
            (:class:`~brrm.serve.ray.sizing.RaySizing`); ignored when ``sizing`` is given.
        sizing: the whole sizing, autoscaler delays included.

    Returns:
        The application (ingress bound to the judge deployment).

    Raises:
        ConfigError: on an invalid size, naming it.
        ImportError: when Ray Serve is not installed (``pip install -e '.[ray]'`` in the brrm clone).
    """
    from ray import serve

    from brrm.serve.ray.ingress import Ingress
    from brrm.serve.ray.replica import JudgeReplica

    sizing = sizing or RaySizing(replicas=replicas, autoscale=autoscale, gpus_per_replica=gpus_per_replica,
                                 cpus_per_replica=cpus_per_replica, ingress_replicas=ingress_replicas)
    limits = limits or ServerLimits()
    judge = serve.deployment(name=JUDGE, **judge_options(sizing, limits))(JudgeReplica)
    ingress = serve.deployment(name=INGRESS, **ingress_options(sizing, limits))(Ingress)
    return ingress.bind(judge.bind(spec, limits), limits)


def judge_options(sizing: RaySizing, limits: ServerLimits) -> dict[str, Any]:
    """The judge deployment's options: the sizing's, the digest router, room for the replica's own queue
    (``max_ongoing_requests`` = ``max_queue``: the app refuses with 429 itself), the drain time of ``brrm serve``
    (``graceful_shutdown_timeout_s``) and the environment each replica needs (:func:`passed_env`)."""
    options = sizing.judge_options()
    actor = dict(options["ray_actor_options"])
    env = passed_env(cpus_per_actor=sizing.cpus_per_replica)
    if env:
        actor["runtime_env"] = {"env_vars": env}
    return {**options, "ray_actor_options": actor, "max_ongoing_requests": limits.max_queue,
            "graceful_shutdown_timeout_s": limits.drain_timeout_s,
            "request_router_config": {"request_router_class": ROUTER}}


def ingress_options(sizing: RaySizing, limits: ServerLimits) -> dict[str, Any]:
    """The ingress deployment's options: the sizing's, room for many requests at once, and the same drain time as
    the judge replicas (``graceful_shutdown_timeout_s``): an ingress replica holds each request while a judge
    replica works on it, so one replaced or scaled down with Serve's default (20 s) would cut the requests it
    holds, and their clients would get the proxy's bare 500."""
    return {**sizing.ingress_options(), "max_ongoing_requests": INGRESS_ONGOING,
            "graceful_shutdown_timeout_s": limits.drain_timeout_s}


def from_args(args: Mapping[str, Any]) -> Application:
    """Ray Serve application builder (:data:`BUILDER`): the application a Serve config's ``args`` describe,
    ``{"spec": JudgeSpec.to_dict(), "limits": ServerLimits.to_args()}``; sizes come from the config's
    ``deployments:`` entries. The API key is ``$BRRM_API_KEY`` of the application's environment.

    Raises:
        ConfigError: on a missing or invalid spec or limit, naming it.
    """
    unknown = sorted(set(args) - {"spec", "limits"})
    if unknown or "spec" not in args:
        raise ConfigError(f"the brrm Serve application takes args 'spec' (required) and 'limits'; got "
                          f"{sorted(args)}")
    fields = {f.name for f in dataclasses.fields(ServerLimits)}
    given = dict(args.get("limits") or {})
    bad = sorted(set(given) - fields)
    if bad:
        raise ConfigError(f"unknown limit {bad[0]!r}; valid: {', '.join(sorted(fields - {'api_key'}))}")
    limits = ServerLimits(**given, api_key=os.environ.get("BRRM_API_KEY") or None)  # lists become tuples there
    return build_app(JudgeSpec.from_dict(args["spec"]), limits=limits)


def serve_config(spec: JudgeSpec, limits: ServerLimits, sizing: RaySizing, *, name: str = APP_NAME,
                 host: str = "0.0.0.0", port: int = 8000) -> dict[str, Any]:
    """The Serve config (``serve deploy FILE``, KubeRay's ``RayService.spec.serveConfigV2``) of the application
    :func:`build_app` makes: the builder and its args, and each deployment's sizes, editable there.

    Returns:
        The config as JSON values (``yaml.safe_dump`` writes the file).
    """
    judge = {**judge_options(sizing, limits), "ray_actor_options": sizing.judge_options()["ray_actor_options"]}
    # ^ no environment of this machine's
    return {"proxy_location": "EveryNode", "http_options": {"host": host, "port": port},
            "applications": [{"name": name, "route_prefix": "/", "import_path": BUILDER,
                              "args": {"spec": spec.to_dict(), "limits": limits.to_args()},
                              "deployments": [{"name": JUDGE, **judge},
                                              {"name": INGRESS, **ingress_options(sizing, limits)}]}]}
