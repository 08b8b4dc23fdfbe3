"""``brrm serve --ray [ADDRESS]``: the judge as a Ray Serve application (:mod:`brrm.serve.ray`), and
``--print-config``, the Serve config of the same application for ``serve deploy`` and KubeRay.

Every sizing flag is checked (:func:`ray_sizing`) before Ray starts or a model loads. The app keeps ``brrm serve``'s
HTTP API on ``--host``/``--port`` (Ray Serve's HTTP proxy); Ctrl-C or SIGTERM deletes the application (Ray Serve
drains its replicas first) and stops a Ray instance this command started.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from brrm.cli.flags import judge_spec
from brrm.errors import ConfigError, install_extra

if TYPE_CHECKING:
    from brrm.serve.limits import ServerLimits
    from brrm.serve.ray.sizing import RaySizing
    from brrm.types import JudgeSpec

SIZING_FLAGS = ("--replicas", "--autoscale", "--gpus-per-replica", "--cpus-per-replica", "--ingress-replicas")


def add_ray_serve_args(p: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``, the sizing flags, ``--app-name`` and ``--print-config``."""
    r = p.add_argument_group(f"Ray Serve ({install_extra('ray')})")
    r.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="serve as a Ray Serve application: judge replicas behind Ray Serve's router, health checks "
                        "and autoscaling; ADDRESS is a cluster (auto, ray://head:10001) or none for a local Ray")
    r.add_argument("--replicas", type=int, default=None, help="judge replicas, each a whole judge (default 1)")
    r.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                   help="scale the judge replicas between MIN and MAX on queue length (instead of --replicas)")
    r.add_argument("--gpus-per-replica", type=float, default=None, help="GPUs each judge replica holds (default 0)")
    r.add_argument("--cpus-per-replica", type=float, default=None, help="CPUs each judge replica holds (default 1)")
    r.add_argument("--ingress-replicas", type=int, default=None,
                   help="HTTP ingress replicas (default 1; they hold no model)")
    r.add_argument("--app-name", default=None, help="the Ray Serve application's name (default brrm; "
                                                    "brrm.load('ray://NAME') reaches it)")
    r.add_argument("--print-config", action="store_true",
                   help="write the Serve config (YAML for `serve deploy` and KubeRay's serveConfigV2) and exit; "
                        "starts nothing")


def ray_sizing(args: argparse.Namespace) -> RaySizing | None:
    """The sizing the flags ask for; None when neither ``--ray`` nor ``--print-config`` is given.

    Raises:
        ConfigError: naming the flag: a sizing flag without ``--ray``/``--print-config``, ``--replicas`` with
            ``--autoscale``, a value out of range, or ``--factory`` (a replica loads a model by name).
    """
    given = [f for f in SIZING_FLAGS if getattr(args, f[2:].replace("-", "_")) is not None]
    if args.app_name is not None:
        given.append("--app-name")
    if args.ray is None and not args.print_config:
        if given:
            raise ConfigError(f"{given[0]} applies with --ray (or --print-config)")
        return None
    if args.factory:
        raise ConfigError("--factory does not apply with --ray: each judge replica loads --model itself")
    if args.replicas is not None and args.autoscale is not None:
        raise ConfigError("give --replicas N or --autoscale MIN:MAX, not both")
    from brrm.serve.ray.sizing import RaySizing, parse_autoscale

    values: dict[str, Any] = {"autoscale": parse_autoscale(args.autoscale) if args.autoscale is not None else None}
    for flag in SIZING_FLAGS:
        name = flag[2:].replace("-", "_")
        if name != "autoscale" and getattr(args, name) is not None:
            values[name] = getattr(args, name)
    try:
        return RaySizing(**values)
    except ConfigError as exc:
        message = str(exc)
        for flag in SIZING_FLAGS:
            message = message.replace(flag[2:].replace("-", "_"), flag)
        raise ConfigError(message) from None


def run_on_ray(args: argparse.Namespace, limits: ServerLimits, sizing: RaySizing, *, out: TextIO | None = None) -> int:
    """``--print-config``: write the Serve config to ``out`` (stdout); else deploy and serve until a signal."""
    from brrm.serve.ray.app import APP_NAME

    out = out if out is not None else sys.stdout
    spec, name = judge_spec(args, kind="brrm"), args.app_name or APP_NAME
    if args.print_config:
        import yaml

        from brrm.serve.ray.app import serve_config

        config = serve_config(spec, limits, sizing, name=name, host=args.host, port=args.port)
        if limits.api_key is not None:
            print("# the API key is not written: set BRRM_API_KEY in the application's runtime_env env_vars", file=out)
        yaml.safe_dump(config, out, sort_keys=False)
        return 0
    return _deploy(args, spec, limits, sizing, name)


def _deploy(args: argparse.Namespace, spec: JudgeSpec, limits: ServerLimits, sizing: RaySizing, name: str) -> int:
    """Start (or join) Ray, run the application on ``--host:--port``, wait for Ctrl-C / SIGTERM, delete it."""
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        raise ConfigError(f"--ray needs Ray Serve ({exc.name} is missing): {install_extra('ray')}") from None
    from brrm.serve.ray.app import build_app

    address = None if args.ray == "local" else args.ray
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"--ray {args.ray}: cannot reach the Ray cluster ({type(exc).__name__}: {exc})") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda _sig, _frame: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        print(f"brrm serve: deploying {name!r} on Ray ({args.ray}): each judge replica loads "
              f"{spec.model or 'the embedded demo'}", file=sys.stderr)
        serve.run(build_app(spec, limits=limits, sizing=sizing), name=name, route_prefix="/")
        print(f"brrm serve: {name!r} ready on http://{args.host}:{args.port} (Ray Serve); in-cluster: "
              f"brrm.load('ray://{name}'); Ctrl-C stops it", file=sys.stderr)
        stop.wait()
        print(f"brrm serve: deleting {name!r} (its replicas drain first)", file=sys.stderr)
        serve.delete(name)
    finally:
        if started:
            serve.shutdown()
            ray.shutdown()
    return 0
