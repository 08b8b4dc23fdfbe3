"""Prometheus metrics of one server (``GET /metrics``, text exposition format via ``prometheus-client``).

Each app gets its own :class:`prometheus_client.CollectorRegistry`, so several apps in one process (tests)
never share counters.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds; from a forward pass of a small reward model to a long two-turn BR-RM judgment."""

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

TOKEN_BUCKETS = tuple(2 ** k for k in range(6, 18))
"""Tokens per judgment, 64 to 131,072: a scalar reward's one input to a swapped two-turn BR-RM judgment at the
published budgets (8,192 new tokens per turn, 16,384 per order)."""

RATE_WINDOW_S = 60.0
"""Seconds over which ``brrm_judgments_per_second`` counts the results served."""


class Metrics:
    """The server's counters, gauges and histograms (names prefixed ``brrm_``).

    Attributes:
        queue_depth: items waiting in the scheduler's queue.
        running_batches: judge calls in flight.
        abandoned_batches: abandoned judge calls whose threads still run.
        in_flight: HTTP requests being served.
        requests: finished HTTP requests by endpoint and status code.
        latency: request latency in seconds by endpoint.
        batch_items, batch_requests: items and requests per judge call.
        batch_seconds: duration of judge calls in seconds.
        results: per-item result statuses (``ok``, ``parse_failure``, ``truncated``, ``backend_error``, ...).
        rejected: requests refused with 429 because the queue was full.
        cancelled: jobs dropped by reason (``deadline``, ``disconnect``) and stage (``queued``, ``running``).
        abandoned_total: judge calls abandoned after their requests left.
        breaker_open: 1 while the backend's circuit breaker is not closed (open: no call is made; half-open: one
            probe runs), else 0 (read when scraped: :meth:`watch_breaker`).
        idempotent: replies to requests with an ``Idempotency-Key`` by endpoint and ``reply``: ``executed`` (its
            own run answered it) or ``replayed`` (another run's reply, stored or awaited: no model call of its own).
        judgments: results served (judgments, rewards); ``rate(brrm_judgments_total[1m])`` is judgments per second.
        judgments_per_second: results served over the last :data:`RATE_WINDOW_S` seconds, per second (read when
            scraped).
        judgment_tokens: tokens per result by ``part`` (``prompt``, ``cached``, ``generated``, ``total``; every turn,
            order and cascade stage behind it: :mod:`brrm.types.usage`); mean = ``_sum / _count``, p95 by
            ``histogram_quantile(0.95, ...)``. ``cached`` is observed only where the backend reports it.
        cache_not_reported: results whose backend did not say what it served from its prefix cache.
        cascade_decided: a cascade's results by the ``stage`` that decided them (``first``, ``second``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_depth = Gauge("brrm_queue_depth", "Items waiting in the scheduler queue", registry=r)
        self.running_batches = Gauge("brrm_running_batches", "Judge calls in flight", registry=r)
        self.abandoned_batches = Gauge("brrm_abandoned_batches", "Abandoned judge calls still running", registry=r)
        self.in_flight = Gauge("brrm_in_flight_requests", "HTTP requests being served", registry=r)
        self.requests = Counter("brrm_requests", "Finished HTTP requests", ["endpoint", "code"], registry=r)
        self.latency = Histogram("brrm_request_latency_seconds", "Request latency", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch_items = Histogram("brrm_batch_items", "Items per judge call", buckets=BATCH_BUCKETS, registry=r)
        self.batch_requests = Histogram("brrm_batch_requests", "Requests coalesced per judge call",
                                        buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("brrm_batch_seconds", "Judge call duration", buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.results = Counter("brrm_results", "Per-item result statuses", ["status"], registry=r)
        self.rejected = Counter("brrm_rejected", "Requests refused with 429 (queue full)", registry=r)
        self.cancelled = Counter("brrm_cancelled", "Jobs dropped before their results were served",
                                 ["reason", "stage"], registry=r)
        self.abandoned_total = Counter("brrm_abandoned", "Judge calls abandoned after their requests left",
                                       registry=r)
        self.breaker_open = Gauge("brrm_breaker_open", "1 while the backend's circuit breaker is open or half-open",
                                  registry=r)
        self.idempotent = Counter("brrm_idempotent_replies", "Replies to requests with an Idempotency-Key, executed "
                                  "by their own run or replayed from another's", ["endpoint", "reply"], registry=r)
        self.judgments = Counter("brrm_judgments", "Results served (judgments and rewards)", registry=r)
        self.judgment_tokens = Histogram("brrm_judgment_tokens", "Tokens per result (all turns, orders and stages)",
                                         ["part"], buckets=TOKEN_BUCKETS, registry=r)
        self.cache_not_reported = Counter("brrm_judgment_cache_not_reported", "Results whose backend did not report "
                                          "the prompt tokens it served from cache", registry=r)
        self.cascade_decided = Counter("brrm_cascade_decided", "Cascade results by the stage that decided them",
                                       ["stage"], registry=r)
        self.judgments_per_second = Gauge("brrm_judgments_per_second", "Results served per second over the last "
                                          f"{RATE_WINDOW_S:g} s", registry=r)
        self._clock, self._served, self._lock = clock, collections.deque[tuple[float, int]](), threading.Lock()
        self.judgments_per_second.set_function(self._rate)

    def watch_breaker(self, state: Callable[[], str]) -> None:
        """Read ``breaker_open`` from ``state()`` (``closed``, ``open`` or ``half_open``) at each scrape."""
        self.breaker_open.set_function(lambda: float(state() != "closed"))

    def count_statuses(self, statuses: Iterable[object]) -> None:
        """Count per-item statuses (``Status`` members or strings)."""
        for status in statuses:
            self.results.labels(status=str(getattr(status, "value", status))).inc()

    def count_costs(self, results: Iterable[object]) -> None:
        """Count served results, their tokens (:func:`brrm.types.usage.tokens_of`) and a cascade's deciding stage."""
        from brrm.types.usage import tokens_of

        results = list(results)
        for result in results:
            tokens = tokens_of(result)  # type: ignore[arg-type]
            if tokens is not None:
                for part, value in (("prompt", tokens.prompt), ("generated", tokens.generated),
                                    ("total", tokens.total), ("cached", tokens.cached)):
                    if value is not None:
                        self.judgment_tokens.labels(part=part).observe(value)
                if tokens.cached is None:
                    self.cache_not_reported.inc()
            if (decision := getattr(result, "cascade", None)) is not None:
                self.cascade_decided.labels(stage=decision.stage.value).inc()
        self.judgments.inc(len(results))
        with self._lock:
            self._served.append((self._clock(), len(results)))

    def _rate(self) -> float:
        """Results served per second over the last :data:`RATE_WINDOW_S` seconds."""
        now = self._clock()
        with self._lock:
            while self._served and self._served[0][0] < now - RATE_WINDOW_S:
                self._served.popleft()
            return sum(n for _, n in self._served) / RATE_WINDOW_S

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of the exposition."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """ASGI middleware: in-flight gauge, latency histogram and status-code counter per known endpoint (any other
    path is counted as ``other``, so random paths cannot grow the label set).

    Args:
        app: the wrapped ASGI app.
        metrics: where to record.
        paths: the endpoints counted under their own path.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: Iterable[str]) -> None:
        self.app, self.metrics, self.paths = app, metrics, frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope.get("path", "") if scope.get("path", "") in self.paths else "other"
        code = 500
        started = time.perf_counter()

        async def recording_send(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)
            self.metrics.requests.labels(endpoint=endpoint, code=str(code)).inc()
