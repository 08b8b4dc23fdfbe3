"""What the scheduler records, as Protocols over prometheus-client's metric objects (the server's
:class:`brrm.serve.metrics.Metrics` satisfies :class:`Metrics`; the service layer does not import the server)."""

from __future__ import annotations

from typing import Protocol


class Counter(Protocol):
    """A prometheus-client counter (or one of a labelled counter's children)."""

    def inc(self, amount: float = 1) -> None: ...


class LabelledCounter(Protocol):
    """A prometheus-client counter with labels."""

    def labels(self, *values: str, **labels: str) -> Counter: ...


class Gauge(Protocol):
    """A prometheus-client gauge."""

    def set(self, value: float) -> None: ...


class Histogram(Protocol):
    """A prometheus-client histogram."""

    def observe(self, amount: float) -> None: ...


class Metrics(Protocol):
    """Where the scheduler records what it does (:class:`brrm.serve.metrics.Metrics` is the server's; the service
    layer does not import the server): prometheus-client counters, gauges and histograms by these names."""

    @property
    def rejected(self) -> Counter: ...

    @property
    def cancelled(self) -> LabelledCounter: ...

    @property
    def queue_depth(self) -> Gauge: ...

    @property
    def running_batches(self) -> Gauge: ...

    @property
    def abandoned_batches(self) -> Gauge: ...

    @property
    def batch_items(self) -> Histogram: ...

    @property
    def batch_requests(self) -> Histogram: ...

    @property
    def abandoned_total(self) -> Counter: ...

    @property
    def batch_seconds(self) -> Histogram: ...
