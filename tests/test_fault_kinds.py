"""Faults that must stay where they start (issue 47, items 1-3), through the service layer and a real ``brrm serve``.

1. A raise inside one judge call that is not an ``Exception`` (``asyncio.CancelledError`` from a client's or an
   engine's own abort, ``GeneratorExit``, a library's own ``BaseException``) is that call's failure: its batch-mates
   are bisected and answered as they are alone, its own item is a ``backend_error`` naming the type, and nothing
   dies unseen (no thread exception, no "Task exception was never retrieved"). The process's own shutdown
   (``KeyboardInterrupt``, ``SystemExit``) and the request's own cancellation leave a call as they came.
2. A backend that is not reentrant never has two calls inside it: while an abandoned (stalled) call is still in the
   model, queued work waits and new work gets 503 with ``Retry-After`` naming the stall; ``/ready`` says so once the
   call stays past its bound, and serving resumes when it leaves.
3. A failing backend costs each request at most one bisection, whatever the client retries: the 503 says
   ``backend_failing`` with ``Retry-After``, a circuit breaker opens after consecutive failures and probes before
   closing, and a retried request's items are not bisected again.

The judge is a Bradley–Terry model on the scripted classifier of :mod:`brrm.backends.fake` (a real model cannot
raise a given exception, stall or fail every call on demand): a response ``q<k>`` scores ``k + 0.5``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.cancellation import Cancelled
from brrm.service import RemoteJudge
from brrm.service.breaker import BreakerOptions, CircuitBreaker
from brrm.service.isolation import attempt
from brrm.service.scheduler import BatchFailed, BreakerOpen, Scheduler
from brrm.testing import build_tiny_tokenizer
from brrm.types import Status
from tests.serve_helpers import serving_in_process

pytestmark = pytest.mark.timeout(120)

HANG_S = 60.0
"""Bound on waiting for an event (a hang guard, never a speed test)."""


class LibraryAbort(BaseException):
    """A library's own BaseException subclass (as some engines raise on abort)."""


# ------------------------------------------------------------------------------------------ the scripted judge
class Script:
    """What the scripted classifier does, shared with the test (the server runs in this process).

    ``<<GATE>>`` holds its call until ``gate`` is set (``at_gate`` is set on entry); ``<<STALL>>`` holds it until
    ``release`` (``stalled`` set on entry); ``<<CANCEL>>`` raises ``asyncio.CancelledError``; ``<<ERROR>>`` raises
    ``RuntimeError``; with ``failing`` every call raises (an upstream answering 503). ``calls`` counts classify
    calls and ``most_inside`` the most calls ever inside the model at once.
    """

    def __init__(self) -> None:
        self.gate, self.at_gate = threading.Event(), threading.Event()
        self.release, self.stalled = threading.Event(), threading.Event()
        self.failing = False
        self.calls = self.inside = self.most_inside = 0
        self.lock = threading.Lock()

    def score(self, prompt: str) -> float:
        if "<<GATE>>" in prompt:
            self.at_gate.set()
            self.gate.wait(HANG_S)
        if "<<STALL>>" in prompt:
            self.stalled.set()
            self.release.wait(HANG_S)
        if "<<CANCEL>>" in prompt:
            raise asyncio.CancelledError()
        if "<<ERROR>>" in prompt:
            raise RuntimeError("scripted item failure")
        found = re.findall(r"q(\d+)", prompt)
        return int(found[-1]) + 0.5 if found else 0.0


SCRIPT = Script()


def scripted_bt() -> Any:
    """``brrm serve --factory tests.test_fault_kinds:scripted_bt``: a BT judge on :data:`SCRIPT` (not reentrant)."""
    script = SCRIPT

    class Counting(FakeBackend):
        def classify(self, sequences: Any, **kw: Any) -> Any:
            with script.lock:
                script.calls += 1
                script.inside += 1
                script.most_inside = max(script.most_inside, script.inside)
            try:
                if script.failing:
                    raise RuntimeError("upstream answered HTTP 503")
                return super().classify(sequences, **kw)
            finally:
                with script.lock:
                    script.inside -= 1

    return brrm.load(kind="bt", backend=Counting(build_tiny_tokenizer(), score_script=script.score))


@pytest.fixture
def script() -> Any:
    global SCRIPT
    SCRIPT = Script()
    yield SCRIPT
    SCRIPT.gate.set()
    SCRIPT.release.set()


def _args(*extra: str) -> list[str]:
    return ["--factory", f"{__name__}:scripted_bt", "--no-warmup", "--max-wait-ms", "1", "--deadline", "60", *extra]


def _score(url: str, text: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/score", json={"items": [{"prompt": "Pick a number.", "response": text}], **body},
                      timeout=HANG_S)


def _until(check: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + HANG_S
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.02)


def _metric(url: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{url}/metrics", timeout=HANG_S).text, re.M)
    assert found, name
    return float(found.group(1))


def _ready(url: str) -> httpx.Response:
    return httpx.get(f"{url}/ready", timeout=HANG_S)


# ------------------------------------------------------------------------------------------ 1. any raise
def _coalesced(url: str, script: Script, texts: list[str]) -> tuple[list[httpx.Response], int]:
    """Each text its own request, queued behind a call held at the gate, then run as one coalesced call: the
    replies and the classify calls that call took."""
    script.gate.clear()
    script.at_gate.clear()
    gate = threading.Thread(target=_score, args=(url, "<<GATE>> q0"))
    gate.start()
    assert script.at_gate.wait(HANG_S)
    out: dict[int, httpx.Response] = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, _score(url, texts[k]))) for k in
               range(len(texts))]
    for t in threads:
        t.start()
    _until(lambda: _ready(url).json()["queue_depth"] == len(texts), "the requests queued behind the gate")
    before = script.calls
    script.gate.set()
    for t in [gate, *threads]:
        t.join(HANG_S)
    return [out[k] for k in range(len(texts))], script.calls - before


def test_a_cancelled_error_inside_one_call_of_a_coalesced_batch_stays_in_that_call(tmp_path, script, caplog,
                                                                                   monkeypatch):
    thread_errors: list[object] = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    mates = ["q1", "q2", "q3"]
    with caplog.at_level(logging.ERROR), serving_in_process(_args("--max-batch", "8"), tmp_path) as server:
        alone = [_score(server.url, t).json()["rewards"] for t in mates]
        cancelled, cancel_calls = _coalesced(server.url, script, [*mates, "<<CANCEL>> q9"])
        errored, error_calls = _coalesced(server.url, script, [*mates, "<<ERROR>> q8"])
    for replies in (cancelled, errored):
        assert [r.status_code for r in replies] == [200] * 4
        assert [r.json()["rewards"] for r in replies[:3]] == alone  # the mates: as they are alone
    own = cancelled[3].json()["rewards"][0]
    assert own["status"] == "backend_error" and "CancelledError" in own["reason"], own
    assert cancel_calls == error_calls == 1 + 2 + 2  # the bisection of any other error, nothing waited out
    assert thread_errors == [] and "never retrieved" not in caplog.text and "Traceback" not in caplog.text


@pytest.mark.parametrize("raised", [asyncio.CancelledError(), GeneratorExit(), LibraryAbort("engine aborted")],
                         ids=["CancelledError", "GeneratorExit", "library"])
def test_any_base_exception_of_a_backend_is_its_calls_failure(raised, monkeypatch):
    thread_errors: list[object] = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    calls: list[list[object]] = []

    def runner(key: object, items: list[object], progress: Any) -> list[object]:
        calls.append(list(items))
        if "bad" in items:
            raise raised
        return [f"{item}!" for item in items]

    async def main() -> tuple[list[object], list[dict[str, Any]]]:
        loop_errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        s = Scheduler(runner, max_batch=8, max_wait_s=0.05, max_queue=100,
                      failed=lambda key, item, status, reason: (status, reason))
        await s.start()
        got = await asyncio.gather(*(s.submit("k", [i], timeout_s=HANG_S) for i in ("a", "bad", "b", "c")),
                                   return_exceptions=True)
        await s.drain(5)
        return got, loop_errors

    got, loop_errors = asyncio.run(main())
    assert got[0] == ["a!"] and got[2:] == [["b!"], ["c!"]]
    status, reason = got[1][0]  # type: ignore[index]
    assert status is Status.BACKEND_ERROR and type(raised).__name__ in reason
    assert calls[0] == ["a", "bad", "b", "c"] and len(calls) == 5
    assert thread_errors == [] and loop_errors == []


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(1), Cancelled("disconnect")],
                         ids=["KeyboardInterrupt", "SystemExit", "request-cancelled"])
def test_the_processs_shutdown_and_the_requests_own_cancellation_leave_a_call_as_they_came(raised):
    def runner(key: object, items: list[object], progress: Any) -> list[object]:
        if "bad" in items:
            raise raised
        return list(items)

    with pytest.raises(type(raised)):
        attempt(runner, "k", ["a", "bad"], lambda _done: None)


# ------------------------------------------------------------------------------------------ 2. non-reentrant
def test_a_stalled_call_on_a_non_reentrant_backend_never_has_a_second_call_beside_it(tmp_path, script):
    args = _args("--max-batch", "1", "--stall-timeout", "0.3")
    with serving_in_process(args, tmp_path) as server:
        assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["concurrent"] is False
        out: dict[str, httpx.Response] = {}
        stalled = threading.Thread(target=lambda: out.__setitem__("stalled", _score(server.url, "<<STALL>> q1",
                                                                                   timeout_s=2)))
        stalled.start()
        assert script.stalled.wait(HANG_S)
        queued = threading.Thread(target=lambda: out.__setitem__("queued", _score(server.url, "q2")))
        queued.start()
        stalled.join(HANG_S)
        assert out["stalled"].status_code == 504
        _until(lambda: _ready(server.url).status_code == 503, "/ready 503 while the stalled call stays inside")
        assert "stalled judge call" in _ready(server.url).json()["reason"]
        fresh = _score(server.url, "q3")
        assert fresh.status_code == 503 and int(fresh.headers["retry-after"]) >= 1
        assert fresh.json()["error"]["type"] == "unavailable" and "stalled" in fresh.json()["error"]["message"]
        assert script.most_inside == 1 and script.calls == 1  # nothing ran beside the stalled call
        script.release.set()  # the call leaves the model: serving resumes
        _until(lambda: _ready(server.url).status_code == 200, "/ready 200 once the stalled call left")
        queued.join(HANG_S)
        waited = out["queued"]  # queued before the abandonment: it waited; after it: 503 with Retry-After
        assert (waited.status_code == 200 and waited.json()["rewards"][0]["reward"] == 2.5) or \
            (waited.status_code == 503 and int(waited.headers["retry-after"]) >= 1), waited.text
        after = _score(server.url, "q4")
        assert after.status_code == 200 and after.json()["rewards"][0]["reward"] == 4.5
    assert script.most_inside == 1


def test_a_reentrant_backend_keeps_serving_beside_an_abandoned_call():
    release = threading.Event()

    def runner(key: object, items: list[object], progress: Any) -> list[object]:
        if "stall" in items:
            release.wait(HANG_S)
        return list(items)

    async def main() -> tuple[object, list[object], int]:
        s = Scheduler(runner, max_batch=1, max_wait_s=0, max_queue=100, stall_timeout_s=0.1, max_abandoned=4,
                      split=True)
        await s.start()
        late = await asyncio.gather(s.submit("k", ["stall"], timeout_s=0.3), return_exceptions=True)
        while not s.abandoned:
            await asyncio.sleep(0.02)
        after = await s.submit("k", ["ok"], timeout_s=HANG_S)
        abandoned = s.abandoned
        release.set()
        await s.drain(5)
        return late[0], after, abandoned

    late, after, abandoned = asyncio.run(main())
    assert type(late).__name__ == "DeadlineExceeded" and after == ["ok"] and abandoned == 1


# ------------------------------------------------------------------------------------------ 3. retry storms
def test_a_failing_backend_behind_the_server_costs_remote_judge_one_bisection_per_request(tmp_path, script):
    script.failing = True
    args = _args("--max-items", "4", "--max-batch", "16", "--breaker-cooldown", "1")
    with serving_in_process(args, tmp_path) as server:
        with RemoteJudge(server.url, retries=3, timeout_s=HANG_S) as judge:
            rewards = judge.score(["Pick a number."] * 16, [f"q{k}" for k in range(16)])  # 4 requests of 4
        assert [r.status for r in rewards] == [Status.BACKEND_ERROR] * 16
        assert all("backend_failing" in r.reason and "failing" in r.reason for r in rewards), rewards[0].reason
        assert script.calls <= 4 * (2 * 4 - 1), script.calls  # one bisection of 4 items per request, at most
        assert _metric(server.url, "brrm_breaker_open") == 1.0  # 10 failed calls in a row opened it
        breaker = server.app.app.state.brrm.scheduler.breaker
        script.failing = False  # the upstream recovers: the half-open breaker's probe closes it
        _until(lambda: breaker.state != "open", "the breaker's cooldown to pass")
        ok = _score(server.url, "q5")
        assert ok.status_code == 200 and ok.json()["rewards"][0]["reward"] == 5.5 and breaker.state == "closed"
        assert _metric(server.url, "brrm_breaker_open") == 0.0


def test_remote_judges_transport_never_retries_a_failing_backend_at_once(monkeypatch):
    """A 503 ``backend_failing`` is retried after its Retry-After and never sooner than 1 s (even when the header
    says 0), under the same Idempotency-Key; an overloaded queue's 429 is retried after its own Retry-After."""
    from brrm.service import transport

    waits: list[float] = []
    monkeypatch.setattr(transport, "SLEEP", waits.append)
    answers = [(503, "backend_failing", "0"), (503, "backend_failing", "3"), (429, "queue_full", "0"), (200, "", "")]
    keys: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers[transport.HEADER])
        status, kind, retry_after = answers.pop(0)
        if status == 200:
            return httpx.Response(200, json={"rewards": []})
        return httpx.Response(status, json={"error": {"type": kind, "message": "m"}},
                              headers={"Retry-After": retry_after})

    with httpx.Client(base_url="http://brrm.test", transport=httpx.MockTransport(handler)) as client:
        reply = transport.post_json(client, "/v1/score", {"items": []}, retries=3, where="http://brrm.test")
    assert reply == {"rewards": []} and waits == [1.0, 3.0, 0.0] and len(set(keys)) == 1



def test_a_gateways_bare_5xx_is_retried_until_it_ends_and_brrms_own_typed_5xx_is_not(monkeypatch):
    """A 5xx without brrm serve's error body came from what stands in front of it (Ray Serve's proxy after an
    ingress replica died, a load balancer): retried like a dropped connection, and after the last retry a reason;
    brrm's own typed 504 is the server's answer, given at once."""
    from brrm.service import transport

    waits: list[float] = []
    monkeypatch.setattr(transport, "SLEEP", waits.append)
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path == "/v1/score":
            return httpx.Response(502, text="Bad Gateway")
        return httpx.Response(504, json={"error": {"type": "deadline_exceeded", "message": "past its deadline"}})

    with httpx.Client(base_url="http://brrm.test", transport=httpx.MockTransport(handler)) as client:
        gone = transport.post_json(client, "/v1/score", {"items": []}, retries=2, where="http://brrm.test")
        typed = transport.post_json(client, "/v1/judge", {"pairs": []}, retries=2, where="http://brrm.test")
    assert gone == "brrm serve answered /v1/score with HTTP 502: Bad Gateway" and waits == [0.5, 1.0]
    assert typed == "brrm serve answered /v1/judge with HTTP 504 (deadline_exceeded): past its deadline"
    assert paths == ["/v1/score"] * 3 + ["/v1/judge"]  # the gateway's: the first try and 2 retries; brrm's: once

def test_the_breaker_opens_answers_at_once_and_a_retry_is_not_bisected_again():
    calls: list[list[object]] = []

    def runner(key: object, items: list[object], progress: Any) -> list[object]:
        calls.append(list(items))
        raise OSError("upstream answered HTTP 503")

    async def main() -> list[object]:
        s = Scheduler(runner, max_batch=8, max_wait_s=0, max_queue=100, breaker=BreakerOptions(8, 600.0))
        await s.start()
        out: list[object] = []
        for _ in range(3):  # the first attempt is bisected, its retries are one call each, then the breaker opens
            out += await asyncio.gather(s.submit("k", [1, 2, 3, 4], timeout_s=HANG_S), return_exceptions=True)
            out.append(len(calls))
        await s.drain(5)
        return out

    first, after_first, retry, after_retry, refused, after_refused = asyncio.run(main())
    assert isinstance(first, BatchFailed) and first.failing and first.retry_after == 600
    assert after_first == 7  # one bisection: 1 + 2 + 4 calls
    assert isinstance(retry, BatchFailed) and retry.failing and after_retry == 8  # the retry: one call, no bisection
    assert isinstance(refused, BreakerOpen) and after_refused == 8  # 8 failures in a row: open, no call made
    assert "circuit breaker is open" in refused.message and refused.retry_after >= 1


def test_the_breaker_probes_once_when_half_open_and_closes_on_success():
    now = [0.0]
    breaker = CircuitBreaker(BreakerOptions(failures=2, cooldown_s=5.0), clock=lambda: now[0])
    for _ in range(2):
        assert breaker.begin() == "call"
        breaker.end(OSError("down"))
    assert breaker.state == "open" and breaker.begin() is None and breaker.retry_after() == 5
    assert "2 judge calls in a row failed" in (breaker.refusal() or "")
    now[0] = 5.0
    assert breaker.state == "half_open" and breaker.refusal() is None
    assert breaker.begin() == "probe" and breaker.begin() is None  # one probe at a time
    breaker.end(OSError("still down"), probe=True)
    assert breaker.state == "open" and breaker.retry_after() == 5  # a failed probe opens it for another cooldown
    now[0] = 10.0
    assert breaker.begin() == "probe" and breaker.begin() is None
    now[0] = 15.0  # a probe that never returned holds the breaker for one cooldown, not for ever
    assert breaker.begin() == "probe"
    breaker.end(None, probe=True)
    assert breaker.state == "closed" and breaker.begin() == "call"
    breaker.end(ValueError("x"))  # one failure after closing does not open it again
    assert breaker.state == "closed"
