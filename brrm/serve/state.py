"""The state every route of ``brrm serve`` shares (:class:`ServerState`: the judge, limits, scheduler, metrics)
and the request-level errors it raises; the app (:mod:`brrm.serve.app`), the routes, the operational routes and
the admission middleware all import it from here, so none of them imports another."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Hashable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Protocol

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from brrm.errors import ConfigError
from brrm.serve.idempotency import LINGER
from brrm.serve.limits import ServerLimits
from brrm.serve.metrics import Metrics
from brrm.serve.schemas import JudgeOptions
from brrm.service.items import CallOptions, Variants
from brrm.service.scheduler import Scheduler, SchedulerError
from brrm.service.singleflight import SingleFlight, variant_identity
from brrm.types import Conversation, RewardJudge
from brrm.types.cost import JudgmentCost
from brrm.types.jsonvalue import JSONValue

ADMITTED = "brrm.admitted"
"""Scope key set on a request holding a place the overload gate reserved (:mod:`brrm.serve.admission`; freed by
:meth:`ServerState.release`)."""

NO_DEFAULT_PRINCIPLE = "this principle model has no default principle (brrm serve --principle TEXT gives it one)"
"""Why a principle model served without ``--principle`` refuses a request that names no principle."""


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
        warmup_attempts: warm-up calls tried so far.
        admitting: judging requests let through the overload gate and not yet queued (each reserves one place
            in the queue; :mod:`brrm.serve.admission`).
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
    admitting: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @functools.cached_property
    def flights(self) -> SingleFlight:
        """Where every job is submitted: identical jobs in flight run once (:mod:`brrm.service.singleflight`)."""
        return SingleFlight(self.scheduler, variant_identity(self.variants))

    @functools.cached_property
    def model_block(self) -> dict[str, JSONValue]:
        """The reply-level ``model`` block, built once: :attr:`JudgeInfo.to_dict` with the public model name, as
        plain JSON values (tuples as lists)."""
        import orjson

        from brrm.serve.replies import public_name

        info = self.judge.info.to_dict()
        spec = info.get("spec")
        if isinstance(spec, dict):  # the spec names the weights by fingerprint; its model path stays private
            info["spec"] = {**spec, "model": public_name(str(spec["model"])) if spec.get("model") else None}
        block: dict[str, JSONValue] = orjson.loads(orjson.dumps({**info, "model": public_name(str(info["model"]))}))
        return block

    @property
    def pairwise(self) -> bool:
        return bool(self.judge.info.pairwise)

    def release(self, scope: MutableMapping[str, object]) -> None:
        """Free the queue place the overload gate reserved for this request (:mod:`brrm.serve.admission`), once."""
        if scope.pop(ADMITTED, False):
            self.admitting -= 1

    def mark_ready(self) -> None:
        """The model answered a call: ``/ready`` reports ready (unless draining or stuck)."""
        self.ready, self.not_ready = True, ""

    def check_items(self, n: int, name: str) -> None:
        """Raises :class:`TooManyItems` when ``n`` is over the per-request limit."""
        if n > self.limits.item_limit:
            raise TooManyItems(name, n, self.limits.item_limit)

    def check_cost(self, cost: JudgmentCost, what: str) -> int:
        """``cost.total`` (the judge's count: judgments, samples included; a scalar model's scored sequences) when
        it is within the per-request limit, checked before anything is queued.

        Raises:
            TooCostly: over :attr:`ServerLimits.judgment_limit` (413, naming the cost and the limit).
        """
        if cost.total > self.limits.judgment_limit:
            raise TooCostly(f"{what} ({cost.describe()})", cost.total, self.limits.judgment_limit)
        return cost.total

    @property
    def needs_principle(self) -> bool:
        """Whether every scored response needs a principle from its request: a principle model without a default
        principle (served without ``--principle``)."""
        return bool(self.judge.info.takes_principle) and not self.judge.info.composition.principles

    @property
    def swap(self) -> bool:
        """The judge's default ``swap`` (both presentation orders per pair)."""
        return bool(self.judge.info.composition.swap)

    def options(self, given: JudgeOptions | None) -> CallOptions | None:
        """The per-request options of a body (None when none are set), checked against the judge and limits.

        Raises:
            ConfigError: when the judge takes no options, or a budget exceeds the server's.
        """
        if given is None:
            return None
        options = CallOptions.of(given.model_dump())
        if not options:
            return None
        self.variants.get(options)
        return options

    async def submit(self, request: Request, key: Hashable, items: Sequence[object], *,
                     timeout_s: float | None = None, cost: int | None = None, weights: list[int] | None = None,
                     units: list[int] | None = None) -> list[object]:
        """Run ``items`` through single-flight and the scheduler, dropping them if the client disconnects first.

        Raises:
            SchedulerError: 429 / 503 / 504 (see :mod:`brrm.serve.scheduler`). ConfigError: the judge refused
                the input (422). ClientGone: the client left.
        """
        self.release(request.scope)  # the gate's reserved place becomes the queued job's
        linger_s = float(request.scope.get(LINGER, 0.0))  # a keyed request's job outlives its client
        deadline_s = min(timeout_s or self.limits.deadline_s, self.limits.deadline_s)  # never beyond the server's
        task = asyncio.ensure_future(self.flights.submit(key, items, timeout_s=deadline_s, cost=cost, weights=weights,
                                                         units=units, linger_s=linger_s))
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


    def _returned(self, task: asyncio.Future[list[object]]) -> None:
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


class _Message(Protocol):
    def model_dump(self, *, exclude_none: bool) -> dict[str, object]: ...


class _Context(Protocol):
    """A request part with a context: exactly one of a ``prompt`` and a ``conversation`` (the schemas' rule)."""

    @property
    def prompt(self) -> str | None: ...

    @property
    def conversation(self) -> Sequence[_Message] | None: ...


def conversation(value: _Context, where: str) -> Conversation:
    """A validated :class:`Conversation` from a request's ``conversation`` messages or ``prompt`` string.

    Raises:
        ConfigError: naming ``where``.
    """
    if value.prompt is not None:
        return Conversation.coerce(value.prompt, where=f"{where}.prompt")
    messages = [m.model_dump(exclude_none=True) for m in value.conversation or ()]
    return Conversation.coerce(messages, where=f"{where}.conversation")


def get_state(connection: HTTPConnection) -> ServerState:
    """The app's :class:`ServerState` (the dependency every route declares as :data:`State`)."""
    state: ServerState = connection.app.state.brrm
    return state


State = Annotated[ServerState, Depends(get_state)]
"""A route parameter of this type receives the server state (``state: State``)."""


def _names_a_principle(state: State) -> None:
    """Refuse (422) a request of a route that names no principle when the judge needs one from every request (a
    principle model without a default)."""
    if state.needs_principle:
        raise ConfigError(f"{NO_DEFAULT_PRINCIPLE}, and this route names none: score on a principle with /v1/score "
                          "or /compare")


NAMES_NO_PRINCIPLE = Depends(_names_a_principle)
"""The dependency of a route whose requests name no principle (``dependencies=[NAMES_NO_PRINCIPLE]``): it refuses
them on a principle model without a default, and the served schema leaves the route out there
(:func:`brrm.serve.openapi.server_router`)."""
