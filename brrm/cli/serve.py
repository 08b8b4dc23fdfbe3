"""``brrm serve``: serve a judge over HTTP (FastAPI + uvicorn) with the endpoints of :mod:`brrm.serve`.

Every limit is checked, and the port bound, before the model loads (a port in use fails at once, not after
minutes of loading). The server answers ``/health`` from the moment it listens: the model loads beside it
(:mod:`brrm.serve.loading`; ``/ready`` and the judging routes answer 503 ``loading`` until it is loaded, and a
load that fails stops the server with its error). Binds 127.0.0.1 unless ``--host`` says otherwise; ``--api-key``
(or ``BRRM_API_KEY``) makes every endpoint but ``/health`` require ``Authorization: Bearer <key>``. SIGTERM
drains: the listening socket closes (new connections are refused), requests already in flight finish (up to
``--drain-timeout``), then the model is freed and the process exits 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from brrm.backends.registry import BACKEND_REGISTRY
from brrm.cli import common
from brrm.cli.command import Command
from brrm.cli.serve_ray import add_ray_serve_args, ray_sizing, run_on_ray
from brrm.errors import ConfigError, install_extra

if TYPE_CHECKING:
    from collections.abc import Callable

    import uvicorn
    from fastapi import FastAPI

    from brrm.serve.limits import ServerLimits
    from brrm.serve.loading import LoadingApp
    from brrm.types import RewardJudge


def _arguments(p: argparse.ArgumentParser) -> None:
    """``brrm serve``'s flags: the model's, then the server's (:func:`_server_args`, :func:`_limit_args`,
    :func:`_rlhf_args`)."""
    common.add_model_args(p)
    _server_args(p.add_argument_group("server"))
    _limit_args(p.add_argument_group("limits and scheduling"))
    _rlhf_args(p.add_argument_group("RLHF routes"))
    add_ray_serve_args(p)


def _server_args(s: argparse._ArgumentGroup) -> None:
    s.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only; "
                                                       "exposing the server takes an explicit --host)")
    s.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    s.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every endpoint but "
                                                   "/health (default: $BRRM_API_KEY; none: no authentication)")
    s.add_argument("--cors-origin", action="append", default=None, help="allow CORS from this origin "
                                                                        "(repeatable; default: CORS off)")
    s.add_argument("--factory", default=None, metavar="MODULE:FUNCTION",
                   help="advanced: build the judge with a zero-argument function returning a RewardJudge "
                        "(instead of --model)")
    s.add_argument("--no-warmup", action="store_true", help="answer /ready without judging a warm-up pair first")
    s.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn log level (default: info)")
    s.add_argument("--no-access-log", action="store_true", help="do not log each request")


def _limit_args(q: argparse._ArgumentGroup) -> None:
    q.add_argument("--max-body-bytes", type=int, default=8 << 20, help="largest request body (default 8 MiB)")
    q.add_argument("--max-items", type=int, default=512, help="items per request (default 512)")
    q.add_argument("--max-field-chars", type=int, default=200_000, help="longest text field (default 200000)")
    q.add_argument("--max-judgments-per-request", type=int, default=2048,
                   help="most judgments one request may cost: pairs x orders (swap), a group strategy's judgments "
                        "(all_pairs of N: N(N-1)/2), or scored items; over it: 413 naming the cost (default 2048; "
                        "capped by --max-queue)")
    q.add_argument("--max-batch", type=int, default=32, help="items coalesced into one judge call (default 32; "
                                                             "1 = no coalescing)")
    q.add_argument("--max-wait-ms", type=float, default=10.0, help="how long a request waits for others to "
                                                                   "join its batch (default 10)")
    q.add_argument("--max-queue", type=int, default=2048, help="judgments waiting (by cost) before 429 (default 2048)")
    q.add_argument("--deadline", type=float, default=600.0, help="per-request deadline in seconds; then 504 "
                                                                 "(default 600)")
    q.add_argument("--concurrency", default="auto", help="judge calls at once: auto (4 where the judge takes "
                                                         "concurrent calls into one running batch — transformers "
                                                         "with continuous scheduling, vllm, openai — else 1) "
                                                         "or a number (a judge that does not take concurrent "
                                                         "calls runs one at a time whatever it says)")
    q.add_argument("--stall-timeout", type=float, default=30.0,
                   help="seconds a judge call nobody waits for may run on before it is abandoned (default 30)")
    q.add_argument("--max-abandoned", type=int, default=4,
                   help="abandoned judge calls still running at which the server stops taking work (default 4)")
    q.add_argument("--breaker-failures", type=int, default=10,
                   help="consecutive failed judge calls that open the backend's circuit breaker: then requests are "
                        "answered 503 backend_failing with Retry-After, and no call is made until a probe succeeds "
                        "(default 10)")
    q.add_argument("--breaker-cooldown", type=float, default=10.0,
                   help="seconds the circuit breaker stays open before one probe call (default 10)")
    q.add_argument("--drain-timeout", type=float, default=None,
                   help="on SIGTERM, seconds in-flight requests may take (default: --deadline + 60)")


def _rlhf_args(r: argparse._ArgumentGroup) -> None:
    r.add_argument("--failed-reward", default="0.0",
                   help="reward /get_reward and /compare give an item that could not be judged: a number "
                        "(default 0.0; every failed item is also flagged in extra_logs.brrm_failed and statuses; "
                        "null is refused: OpenRLHF and NeMo Gym need numbers)")
    r.add_argument("--get-reward-mode", choices=("auto", "scores", "reference"), default="auto",
                   help="auto: scalar models' rewards, or a pairwise judge's P(response beats label)")
    r.add_argument("--strip-text", action="append", default=None,
                   help="extra policy end-of-turn/pad text to strip from OpenRLHF queries (repeatable)")
    r.add_argument("--compare-strategy", choices=("circular", "all_pairs"), default="circular",
                   help="default /compare strategy (NeMo Gym's names; default circular)")


def limits_from(args: argparse.Namespace, backend: str) -> ServerLimits:
    """The :class:`~brrm.serve.ServerLimits` the flags describe.

    Raises:
        ConfigError: naming the flag.
    """

    failed = args.failed_reward.strip().lower()
    if failed in ("null", "none"):
        from brrm.serve.limits import NULL_FAILED_REWARD

        raise ConfigError(f"--failed-reward {args.failed_reward}: {NULL_FAILED_REWARD}")
    try:
        failed_reward = float(failed)
    except ValueError:
        raise ConfigError(f"--failed-reward {args.failed_reward!r} is not a number or null") from None
    if args.concurrency == "auto":
        concurrency = 4 if BACKEND_REGISTRY[backend].concurrent else 1
    elif args.concurrency.isdigit():
        concurrency = int(args.concurrency)
    else:
        raise ConfigError(f"--concurrency {args.concurrency!r} is not valid; expected auto or a number >= 1")
    api_key = args.api_key or os.environ.get("BRRM_API_KEY") or None
    try:
        return _limits(args, failed_reward, concurrency, api_key)
    except ConfigError as exc:
        if exc.field not in _FIELD_FLAGS:  # the flag has the field's name: the CLI names it by lookup
            raise
        raise ConfigError(exc.naming(lambda field: _FIELD_FLAGS.get(field, field))) from None


_FIELD_FLAGS = {"deadline_s": "--deadline", "stall_timeout_s": "--stall-timeout", "drain_timeout_s": "--drain-timeout",
                "breaker_cooldown_s": "--breaker-cooldown"}
"""The ServerLimits fields whose flags have other names (the rest share the flag's name)."""


def _limits(args: argparse.Namespace, failed_reward: float, concurrency: int,
            api_key: str | None) -> ServerLimits:
    """The limits: each field from its flag (the flag of :data:`_FIELD_FLAGS`, else the field's name), and the values
    the flags only describe (``--concurrency auto``, the API key, the drain timeout's default) as given."""
    from dataclasses import fields

    from brrm.serve.limits import ServerLimits

    given = vars(args)
    flags = {f.name: _FIELD_FLAGS.get(f.name, "--" + f.name)[2:].replace("-", "_") for f in fields(ServerLimits)}
    values: dict[str, Any] = {name: given[dest] for name, dest in flags.items() if dest in given}
    values.update(drain_timeout_s=args.drain_timeout if args.drain_timeout is not None else args.deadline + 60,
                  concurrency=concurrency, api_key=api_key, cors_origins=tuple(args.cors_origin or ()),
                  failed_reward=failed_reward, strip_texts=tuple(args.strip_text or ()), warmup=not args.no_warmup)
    return ServerLimits(**values)


def run(args: argparse.Namespace) -> int:
    """Check the flags, load the judge, serve until SIGTERM / Ctrl-C (on Ray Serve with ``--ray``)."""
    sizing = ray_sizing(args)
    limits, factory = check(args)
    if sizing is not None:
        return run_on_ray(args, limits, sizing)
    sock = bind(args.host, args.port)  # the port too: a port in use fails before minutes of loading
    if args.host not in ("127.0.0.1", "localhost", "::1") and limits.api_key is None:
        print(f"brrm serve: warning: --host {args.host} exposes the server without an API key (set --api-key or "
              "BRRM_API_KEY)", file=sys.stderr)
    from brrm.serve.loading import LoadingApp

    print(f"brrm serve: listening on http://{args.host}:{args.port} (/health answers; loading the model)",
          file=sys.stderr)
    app = LoadingApp(lambda: _build_app(args, limits, factory), api_key=limits.api_key)
    serve(app, host=args.host, port=args.port, drain_timeout_s=limits.drain_timeout_s, log_level=args.log_level,
          access_log=not args.no_access_log, sock=sock)
    return 0


def check(args: argparse.Namespace) -> tuple[ServerLimits, Callable[[], object] | None]:
    """Check every flag before anything binds or loads: the serve extra, the port, the limits, the factory (imported)
    or every judge option's value.

    Returns:
        the limits the flags describe, and the ``--factory`` function (None without one).

    Raises:
        ConfigError: naming the flag.
    """
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"brrm serve needs the serve extra ({exc.name} is missing): {install_extra('serve')}") \
            from None
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is outside 0-65535")
    if args.factory and args.model:
        raise ConfigError("give --model or --factory, not both")
    limits = limits_from(args, args.backend)  # every limit checked before the model loads
    factory = _factory_function(args.factory) if args.factory else None
    if factory is None:
        common.check_judge(args, kind="brrm")  # every judge option's value too: a mistake is named, not the port
    else:
        common.load_options(args)  # the flags are still checked by name
    return limits, factory


def _build_app(args: argparse.Namespace, limits: ServerLimits, factory: Callable[[], object] | None, *,
               out: TextIO | None = None, freeze: bool = True) -> FastAPI:
    """Load the judge and make the server's app (run beside the listening server, in its loading thread).

    Args:
        out: where the start-up messages go (default: stderr).
        freeze: ``gc.freeze()`` the loaded model and libraries (a whole process's heap: only a process that is the
            server, not one that hosts it beside other work, e.g. a test).
    """
    out = out if out is not None else sys.stderr
    judge = _factory(args.factory, factory) if factory else common.load_judge(args, kind="brrm")
    if args.concurrency == "auto":  # concurrent backends share one running batch across judge calls
        from dataclasses import replace

        limits = replace(limits, concurrency=4 if judge.info.concurrent else 1)
    from brrm.serve.app import create_app

    app = create_app(judge, limits=limits)
    if freeze:  # the loaded model, tokenizer and libraries are never rescanned by the cyclic collector: its full
        gc.collect()  # collections over them paused the event loop for hundreds of ms under load (p99 of 429s 0.9 s
        gc.freeze()  # -> 0.25 s)
    info = judge.info
    print(f"brrm serve: {info.model} ({info.describe()}) loaded on "
          f"http://{args.host}:{args.port}; docs at /docs", file=out)
    if app.state.brrm.needs_principle:
        print("brrm serve: no default principle (--principle): every /v1/score item and /compare request names its "
              "own; /v1/judge, /v1/rank and /get_reward, which name none, answer 422", file=out)
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6 as ``host`` resolves), ``SO_REUSEADDR`` as uvicorn
    sets it.

    Raises:
        ConfigError: naming the address and the reason (e.g. the port is in use), before anything loads.
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} does not resolve: {exc.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} (--host/--port): {exc.strerror or exc}; is another "
                          "server using the port?") from None
    return sock


KEEP_ALIVE_S = 75
"""Seconds an idle keep-alive connection stays open (uvicorn's default is 5). A server must keep idle connections
longer than its clients' pools do (httpx 5 s, aiohttp 15 s): otherwise a client can send a POST on a connection
the server is closing at that moment, and a POST is not retried by the client (nginx's default is 75 s)."""


def serve(app: FastAPI | LoadingApp, *, host: str, port: int, drain_timeout_s: float, log_level: str = "info",
          access_log: bool = True, sock: socket.socket | None = None) -> None:
    """Run ``app`` under uvicorn until SIGTERM or Ctrl-C, draining in-flight requests first.

    uvicorn's own signal handling stops the listener and waits for in-flight responses (up to
    ``drain_timeout_s``); the app's lifespan then drains the scheduler and frees the model. Requests that reach
    an open keep-alive connection during the drain get 503. uvicorn re-raises the signal after a graceful stop;
    for SIGTERM that lands on a no-op handler installed here, so the process exits 0 (SIGINT still ends as an
    interrupt). A :class:`~brrm.serve.loading.LoadingApp` stopped before its model loaded exits at once (the load
    thread is not waited for); one whose load failed stops the server and raises the load's error here.
    """
    from brrm.serve.loading import LoadingApp

    loading = app if isinstance(app, LoadingApp) else None
    server = uvicorn_server(app, host=host, port=port, drain_timeout_s=drain_timeout_s, log_level=log_level,
                            access_log=access_log)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)  # what uvicorn re-raises after its graceful stop
    code = 0
    try:
        server.run(sockets=[sock] if sock is not None else None)
    except KeyboardInterrupt:
        if loading is None or loading.loaded:
            raise
        code = 130
    if loading is not None and loading.error is not None:
        raise loading.error
    if loading is not None and not loading.loaded:  # stopped during the load: nothing to drain or free
        print("brrm serve: stopped while the model was loading", file=sys.stderr)
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)  # the load thread (and any pool of the loader's) is not waited for


def uvicorn_server(app: FastAPI | LoadingApp, *, host: str, port: int, drain_timeout_s: float,
                   log_level: str = "info", access_log: bool = True, **config: Any) -> uvicorn.Server:
    """The uvicorn server :func:`serve` runs: a stop (:meth:`uvicorn.Server.handle_exit`) drains ``app`` first, and a
    :class:`~brrm.serve.loading.LoadingApp` whose load fails stops it. ``config``: more :class:`uvicorn.Config`
    keywords (a test hosting servers in its own process passes ``log_config=None``)."""
    import uvicorn

    from brrm.serve.loading import LoadingApp

    loading = app if isinstance(app, LoadingApp) else None
    drain = app.begin_drain if isinstance(app, LoadingApp) else lambda: setattr(app.state.brrm, "draining", True)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            drain()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                                   timeout_graceful_shutdown=max(1, int(drain_timeout_s)), lifespan="on",
                                   timeout_keep_alive=KEEP_ALIVE_S, **config))
    if loading is not None:
        loading.on_failure = lambda _exc: setattr(server, "should_exit", True)
    return server


def _factory_function(spec: str) -> Callable[[], object]:
    """The function ``MODULE:FUNCTION`` names, imported (checked before the port is bound or anything loads).

    Raises:
        ConfigError: when the spec is malformed or the module or function is missing.
    """
    from brrm.registry import resolve

    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise ConfigError(f"--factory {spec!r} is not MODULE:FUNCTION")
    try:
        func = resolve(spec, what="--factory")
    except ImportError as exc:
        raise ConfigError(f"--factory {spec!r}: {exc}") from None
    if not callable(func):
        raise ConfigError(f"--factory {spec!r} is a {type(func).__name__}, not a function")
    return func


def _factory(spec: str, func: Callable[[], object]) -> RewardJudge:
    """Call the ``--factory`` function and return the judge it builds.

    Raises:
        ConfigError: when the result is no judge.
    """
    from brrm.types import RewardJudge

    judge = func()
    if not isinstance(judge, RewardJudge):
        raise ConfigError(f"--factory {spec!r} returned {type(judge).__name__}, not a RewardJudge")
    return judge


COMMAND = Command(
    "serve", arguments=_arguments, run=run,
    help="serve a judge over HTTP (judge, score, rank, OpenRLHF, NeMo Gym routes)",
    description="Serve a judge over HTTP: POST /v1/judge, /v1/score, /v1/rank, /get_reward (OpenRLHF), /compare "
                "(NeMo Gym); GET /health, /ready, /v1/models, /metrics, /docs.")
