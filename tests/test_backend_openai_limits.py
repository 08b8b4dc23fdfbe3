"""The OpenAI-compatible backend's adaptive concurrency per upstream (AIMD) and its HTTP client, against scripted
local upstreams on 127.0.0.1 (tests/completions_stub.py): a 429 or 503 halves the upstream's limit and its
``Retry-After`` is waited by every call to it, successes raise the limit by one per window, the limit is shared by
every call to one upstream and separate per upstream, no upstream sees more requests at once than its limit, and
connections are reused. Waits go through an injected clock and sleep: nothing here is timed."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from brrm.backends.base import GenerationRequest
from brrm.backends.openai.limiter import AdaptiveLimit, ConcurrencyPolicy, Signal
from brrm.backends.openai.transport import RequestFailed, Transport
from brrm.backends.options import OpenAIOptions
from brrm.errors import ConfigError
from tests.completions_stub import CompletionsServer, Gate, Reply

OK = {"choices": [{"text": "", "token_ids": [5], "finish_reason": "length"}], "usage": {"prompt_tokens": 3}}
BODY = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 1}


class FakeTime:
    """A monotonic clock that only moves when something sleeps; every sleep is recorded."""

    def __init__(self) -> None:
        self.now, self.sleeps, self.lock = 100.0, [], threading.Lock()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)
            self.now += seconds


def _transport(urls, *, initial=8, maximum=8, retries=3, fake=None, timeout_s=5.0):
    fake = fake or FakeTime()
    return Transport(urls, timeout_s=timeout_s, max_retries=retries, backoff_s=0.01, max_backoff_s=0.05,
                     api_key=None, concurrency=ConcurrencyPolicy(initial, maximum), clock=fake.clock,
                     sleep=fake.sleep)


def _script(*replies):
    """An ``answer`` giving ``replies`` in turn, then 200s."""
    queue, lock = list(replies), threading.Lock()

    def answer(body):
        with lock:
            return queue.pop(0) if queue else OK

    return answer


def test_successes_raise_the_limit_by_one_per_window_up_to_the_ceiling():
    limit = AdaptiveLimit("u", ConcurrencyPolicy(2, 4))
    seen = []
    for _ in range(12):
        limit.release(limit.acquire(), Signal.SUCCESS)
        seen.append(limit.state().limit)
    # a window is as many successes as the limit: 2 at 2, 3 at 3, then the ceiling 4
    assert seen == [2, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4]
    assert limit.state().increases == 2


def test_an_overload_halves_the_limit_once_however_many_requests_it_answers():
    limit = AdaptiveLimit("u", ConcurrencyPolicy(8, 16))
    tickets = [limit.acquire() for _ in range(8)]
    assert limit.state().in_flight == 8
    for ticket in tickets:  # eight 429s of one overload: requests sent before the halving
        limit.release(ticket, Signal.OVERLOAD)
    state = limit.state()
    assert (state.limit, state.decreases, state.overloads, state.in_flight) == (4, 1, 8, 0)
    halvings = []
    for _ in range(4):  # each later overload was sent after the last halving: halves again, never below 1
        limit.release(limit.acquire(), Signal.OVERLOAD)
        halvings.append(limit.state().limit)
    assert halvings == [2, 1, 1, 1]
    limit.release(limit.acquire(), Signal.NEUTRAL)  # a 500 or a timeout: neither up nor down
    assert limit.state().limit == 1 and limit.state().increases == 0
    with pytest.raises(RuntimeError, match="never taken"):
        limit.release(0, Signal.SUCCESS)


def test_a_call_waits_for_a_free_slot():
    limit = AdaptiveLimit("u", ConcurrencyPolicy(2, 2))
    first, _ = limit.acquire(), limit.acquire()
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (limit.acquire(), got.set()), daemon=True)
    waiter.start()
    with limit._cond:  # the waiter is inside acquire, blocked on the two slots in use
        assert limit._cond.wait_for(lambda: limit._waiting == 1, timeout=5)
    assert limit.state().in_flight == 2 and not got.is_set()
    limit.release(first, Signal.NEUTRAL)
    assert got.wait(5) and limit.state().in_flight == 2 and limit.state().peak_in_flight == 2
    waiter.join(5)


def test_the_policy_and_the_options_refuse_a_start_above_the_ceiling():
    with pytest.raises(ConfigError, match=r"initial_concurrency \(8\) must be <= max_concurrency \(4\)"):
        ConcurrencyPolicy(8, 4)
    with pytest.raises(ConfigError, match="initial_concurrency must be an int >= 1, got 0"):
        ConcurrencyPolicy(0, 4)
    with pytest.raises(ConfigError, match=r"initial_concurrency \(8\) must be <= max_concurrency \(4\)"):
        OpenAIOptions(initial_concurrency=8, max_concurrency=4)
    with pytest.raises(ConfigError, match="initial_concurrency must be an integer >= 1"):
        OpenAIOptions(initial_concurrency=0)


@pytest.mark.parametrize(("status", "retry_after", "waited"), [(429, "2", 2.0), (503, "1.5", 1.5)])
def test_an_overloaded_upstream_halves_the_limit_and_its_retry_after_is_waited(status, retry_after, waited):
    fake = FakeTime()
    with CompletionsServer(_script(Reply(status, {"error": {"message": "busy"}}, (("Retry-After", retry_after),)))) \
            as up:
        transport = _transport([up.url], fake=fake)
        try:
            assert transport.call(0, "POST", "/completions", BODY) == OK
            state = transport.concurrency()[0]
        finally:
            transport.close()
    assert fake.sleeps == [waited] and len(up.bodies) == 2  # the retry no sooner than it asked, then a 200
    assert (state.limit, state.decreases, state.overloads, state.in_flight) == (4, 1, 1, 0)


def test_retry_after_pauses_every_call_to_that_upstream():
    """A call that gave up on a 429 (no retries left) leaves its upstream paused: the next call waits out the rest of
    the ``Retry-After`` before it sends."""
    fake = FakeTime()
    busy = Reply(429, {"error": {"message": "slow down"}}, (("Retry-After", "3"),))
    with CompletionsServer(_script(busy)) as up:
        transport = _transport([up.url], retries=0, fake=fake)
        try:
            with pytest.raises(RequestFailed, match="HTTP 429: slow down"):
                transport.call(0, "POST", "/completions", BODY)
            assert transport.concurrency()[0].paused_s == 3.0 and fake.sleeps == []
            fake.now += 1.0  # one second of the three passes
            assert transport.call(0, "POST", "/completions", BODY) == OK
        finally:
            transport.close()
    assert fake.sleeps == [2.0] and len(up.bodies) == 2 and transport.concurrency()[0].paused_s == 0.0


def test_successes_raise_an_upstreams_limit_additively():
    with CompletionsServer(lambda body: OK) as up:
        transport = _transport([up.url], initial=2, maximum=5)
        try:
            limits = []
            for _ in range(14):
                transport.call(0, "POST", "/completions", BODY)
                limits.append(transport.concurrency()[0].limit)
        finally:
            transport.close()
    assert limits == [2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5]


def test_limits_are_separate_per_upstream():
    """A 429 from the first upstream halves its limit only; the retry goes to the second, whose limit stays."""
    busy = Reply(429, {"error": {"message": "busy"}})
    with CompletionsServer(_script(*[busy] * 5)) as a, CompletionsServer(lambda body: OK) as b:
        transport = _transport([a.url, b.url], initial=8, maximum=8)
        try:
            assert transport.call(0, "POST", "/completions", BODY) == OK
            sa, sb = transport.concurrency()
        finally:
            transport.close()
    assert (len(a.bodies), len(b.bodies)) == (1, 1)
    assert (sa.url, sa.limit, sa.decreases) == (a.url, 4, 1) and (sb.url, sb.limit, sb.decreases) == (b.url, 8, 0)


def test_one_limit_is_shared_by_concurrent_calls_and_never_exceeded():
    """Twelve calls at once to one upstream with a limit of 3: the upstream holds each request until three are in
    flight, and never sees a fourth."""
    with CompletionsServer(lambda body: OK, gate=Gate(quorum=3, total=12)) as up:
        transport = _transport([up.url], initial=3, maximum=3)
        try:
            with ThreadPoolExecutor(12) as pool:
                answers = list(pool.map(lambda _: transport.call(0, "POST", "/completions", BODY), range(12)))
            state = transport.concurrency()[0]
        finally:
            transport.close()
    assert answers == [OK] * 12 and len(up.bodies) == 12
    assert up.peak == 3 and state.peak_in_flight == 3 and max(up.arrivals) == 3
    assert up.connections <= 3  # kept alive and reused: fewer TCP connections than requests


def test_a_burst_of_429s_halves_the_limit_once_and_the_retries_keep_to_it():
    """Eight calls at once at a limit of 8 all get a 429 (the upstream answers none before all eight arrived): one
    overload, so one halving to 4; the eight retries then never have more in flight than the limit of the moment."""
    fake, burst = FakeTime(), threading.Barrier(8, timeout=5)
    seen: list[tuple[int, int]] = []
    transport: list[Transport] = []

    def answer(body):
        if len(up.bodies) <= 8:  # the first eight (no retry comes before one of them is answered)
            burst.wait()
            return Reply(429, {"error": {"message": "too many"}})
        seen.append((up.in_flight, transport[0].concurrency()[0].limit))
        return OK

    with CompletionsServer(answer) as up:
        transport.append(_transport([up.url], initial=8, maximum=16, fake=fake))
        try:
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda _: transport[0].call(0, "POST", "/completions", BODY), range(8)))
            state = transport[0].concurrency()[0]
        finally:
            transport[0].close()
    assert answers == [OK] * 8 and len(up.bodies) == 16 and len(fake.sleeps) == 8
    assert all(in_flight <= limit <= 5 for in_flight, limit in seen) and len(seen) == 8, seen
    # 8 -> 4 on the overload; 4 successes raise it to 5; 4 more are not yet a window of 5
    assert (state.limit, state.decreases, state.overloads, state.increases) == (5, 1, 8, 1)


def test_two_generate_calls_share_the_backends_limit(tok):
    """Two ``generate`` calls at once (a server's requests) share one limit per upstream: at each arrival the upstream
    has no more requests in flight than the limit allows, and the limit grew by one per window of successes."""
    from brrm.backends.openai import OpenAIBackend

    seen: list[tuple[int, int]] = []
    backend: list[OpenAIBackend] = []

    def answer(body):
        seen.append((up.in_flight, backend[0].concurrency()[0].limit))
        return {"choices": [{"text": "", "token_ids": [5, 6], "finish_reason": "length"}], "usage": {}}

    with CompletionsServer(answer, gate=Gate(quorum=2, total=24)) as up:
        with OpenAIBackend([up.url], "tiny", tok, max_context=64, initial_concurrency=2, max_concurrency=8,
                           http_retries=0) as be:
            backend.append(be)
            assert be.workers == 8 and be.concurrency()[0].limit == 2
            requests = [GenerationRequest((1, 2, i), 2, seed=i) for i in range(12)]
            with ThreadPoolExecutor(2) as callers:
                outs = [f.result() for f in [callers.submit(be.generate, requests, temperature=0) for _ in (1, 2)]]
            state = be.concurrency()[0]
    assert all(c.token_ids == (5, 6) for out in outs for c in out) and len(up.bodies) == 24
    assert all(in_flight <= limit for in_flight, limit in seen), seen
    assert up.peak >= 2 and state.peak_in_flight <= state.limit
    assert state.limit == 2 + state.increases and state.increases >= 2 and state.decreases == 0


def test_sequential_requests_reuse_one_connection():
    with CompletionsServer(lambda body: OK) as up:
        transport = _transport([up.url])
        try:
            for _ in range(10):
                transport.call(0, "POST", "/completions", BODY)
        finally:
            transport.close()
    assert (len(up.bodies), up.connections) == (10, 1)


def test_the_options_reach_each_upstreams_limit(tok, tmp_path):
    from brrm.backends.openai import OpenAIBackend
    from brrm.testing import save_tokenizer

    path = str(save_tokenizer(tok, tmp_path / "tok"))
    with CompletionsServer(lambda body: OK) as a, CompletionsServer(lambda body: OK) as b:
        options = OpenAIOptions(base_url=(a.url, b.url), initial_concurrency=3, max_concurrency=6)
        with OpenAIBackend.from_options(path, options) as be:
            states = be.concurrency()
        with OpenAIBackend.from_options(path, OpenAIOptions(base_url=a.url, max_concurrency=4)) as small, \
                OpenAIBackend.from_options(path, OpenAIOptions(base_url=a.url)) as default:
            starts = [(s.transport.policy.initial, s.transport.policy.maximum) for s in (small, default)]
    assert [(s.url, s.limit) for s in states] == [(a.url, 3), (b.url, 3)] and be.workers == 12
    assert starts == [(4, 4), (16, 64)]  # the start is 16, or the ceiling when that is lower


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


def test_no_http_client_of_the_standard_library_in_brrm():
    import pathlib

    import brrm

    root = pathlib.Path(brrm.__file__).parent
    users = [p for p in root.rglob("*.py") if "import http.client" in p.read_text() or "from http.client" in
             p.read_text()]
    assert users == []
