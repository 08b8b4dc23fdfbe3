"""Coalescing adapts to the arrival rate (issue 31 item 4): requests that arrive one by one are sent at once (no
hold), requests that arrive fast are held for company and share calls, and the hold never passes ``max_wait_s``."""

from __future__ import annotations

import asyncio
import time

import pytest

from brrm.service.arrivals import PATIENCE, Arrivals
from brrm.service.scheduler import Scheduler

pytestmark = pytest.mark.timeout(60)


def test_the_hold_follows_the_recent_gap_and_never_passes_the_window():
    a = Arrivals(max_wait_s=0.010)
    a.arrived(1.000, company=True)
    assert a.hold_until(1.000) == 1.000  # one arrival tells no rate: no hold
    for k in range(1, 8):
        a.arrived(1.000 + k * 0.001, company=True)  # 1 ms apart, each finding others queued or running
    assert a.gap == pytest.approx(0.001)
    assert a.hold_until(1.007) == pytest.approx(1.007 + PATIENCE * 0.001)
    assert a.hold_until(0.999) == pytest.approx(1.009)  # capped by the first job's window
    assert a.hold_until(1.020) == pytest.approx(1.007 + PATIENCE * 0.001)  # past: send now
    sparse = Arrivals(max_wait_s=0.010)
    for k in range(8):
        sparse.arrived(k * 0.050, company=True)  # 50 ms apart: company never comes within 10 ms
    assert sparse.hold_until(0.350) == 0.350
    alone = Arrivals(max_wait_s=0.200)
    for k in range(8):
        alone.arrived(k * 0.060, company=False)  # one client, one request at a time: nothing to wait for
    assert alone.hold_until(0.420) == 0.420
    assert Arrivals(max_wait_s=0.0).hold_until(5.0) == 5.0
    assert Arrivals(max_wait_s=0.2, adaptive=False).hold_until(5.0) == 5.2  # split: the whole window


WINDOW_S = 5.0
"""The scheduler's longest hold in the test below: far longer than any delay a busy machine adds to a call."""


class Calls:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __call__(self, key, items, progress):
        self.sizes.append(len(items))
        time.sleep(0.002)
        return list(items)


def test_one_by_one_requests_are_not_held_and_a_fast_stream_shares_calls():
    calls = Calls()

    async def main() -> tuple[list[float], list[int]]:
        # a 5 s window: a request held for company would wait seconds, one sent at once waits milliseconds, so the
        # verdict below holds on a machine as busy as it gets (the policy itself is checked on its own clock above)
        s = Scheduler(calls, max_batch=64, max_wait_s=WINDOW_S, max_queue=1000)
        await s.start()
        waits = []
        for k in range(6):  # one at a time, 60 ms apart
            start = time.perf_counter()
            assert await s.submit("k", [k], timeout_s=30) == [k]
            waits.append(time.perf_counter() - start)
            await asyncio.sleep(0.06)
        calls.sizes.clear()

        async def client(c: int) -> None:
            for k in range(10):
                await s.submit("k", [c * 100 + k], timeout_s=30)

        await asyncio.gather(*(client(c) for c in range(16)))  # 16 clients back to back
        await s.drain(2)
        return waits, list(calls.sizes)

    waits, sizes = asyncio.run(main())
    assert max(waits) < WINDOW_S / 2, waits  # never held for the window
    assert sum(sizes) == 160 and len(sizes) < 160 / 2, sizes  # the fast stream shared calls
