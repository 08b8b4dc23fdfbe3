"""The scheduler's units of work: a queued job (a request's items, their cost and weights, its deadline), the
slice of a job one call runs, and one coalesced call (a batch of slices sharing a key).

A job larger than one call is taken slice by slice; it completes when its last slice has returned. ``cuts``
marks where a slice may end, so runs of items that must share a call (one pair's two presentation orders) are
never split.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from brrm.cancellation import CancelToken
from brrm.errors import ConfigError


@dataclass(eq=False)
class Job:
    """One request's work: ``items`` with per-item ``weights`` (call filling) and ``costs`` (admission), its
    absolute ``deadline`` and ``enqueued`` time (event-loop clock, seconds), the future its results go to, and its
    ``token``, set when the request leaves (its rows in a shared running batch are then retired alone)."""

    key: Hashable
    items: list[object]
    weights: list[int]
    costs: list[int]
    deadline: float
    enqueued: float
    future: asyncio.Future[list[object]]
    results: list[object] = field(default_factory=list)
    cuts: frozenset[int] = frozenset()  # positions a call may end at (None of them: every position)
    next: int = 0  # first item not yet taken
    pending: int = 0  # slices running
    token: CancelToken = field(default_factory=CancelToken)

    def step(self, at: int) -> int:
        """The end of the unit of items starting at ``at`` (units are never split across calls)."""
        end = at + 1
        while self.cuts and end < len(self.items) and end not in self.cuts:
            end += 1
        return end

    @property
    def queued_cost(self) -> int:
        return sum(self.costs[self.next:])


@dataclass(eq=False)
class Slice:
    """Items ``start:end`` of ``job``, run in one call."""

    job: Job
    start: int
    end: int


@dataclass(eq=False)
class Batch:
    """One coalesced call: slices of jobs with the same ``key``; ``abort`` asks the call to stop (set when every
    job of the call has left; a one-slice call shares its job's token, so it stops when that request leaves)."""

    key: Hashable
    slices: list[Slice]
    abort: CancelToken = field(default_factory=CancelToken)

    @classmethod
    def of(cls, key: Hashable, piece: Slice) -> Batch:
        """The call of one slice alone, stopped by its job's token."""
        return cls(key, [piece], piece.job.token)

    @property
    def futures(self) -> list[asyncio.Future[list[object]]]:
        return [s.job.future for s in self.slices]


def spread(total: int, n: int) -> list[int]:
    """``n`` non-negative ints summing to ``total`` (the first ones one larger)."""
    base, extra = divmod(total, n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def cuts(units: Sequence[int] | None, n: int) -> frozenset[int]:
    """The positions a call may end at, from unit sizes (empty: anywhere).

    Raises:
        ConfigError: when the units are not positive or do not sum to ``n``.
    """
    if units is None:
        return frozenset()
    if any(u < 1 for u in units) or sum(units) != n:
        raise ConfigError(f"units {list(units)} must be positive and sum to the {n} items")
    ends, pos = set(), 0
    for u in units:
        pos += u
        ends.add(pos)
    return frozenset(ends)
