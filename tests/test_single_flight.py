"""Work done once (issue 28 item 4): identical jobs in flight run once, and ``Idempotency-Key`` retries are answered
the stored reply — through real ``brrm serve`` servers on 127.0.0.1 (in this process:
:func:`tests.serve_helpers.serving_in_process`) whose backends count their calls (a scripted
classifier that takes 0.6 s per call and raises on ``BOOM``: :mod:`tests.flight_helpers`; and the scripted BR-RM
judge of :mod:`tests.serve_helpers`, logging every prompt), plus the store's bounds and the deadline rule of
:class:`~brrm.service.singleflight.SingleFlight` in process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from brrm.serve.idempotency import IdempotencyStore, Reply
from tests.serve_helpers import compare_body, http, read_log, serving_in_process

pytestmark = pytest.mark.timeout(120)

CALL_S = 0.6
BT = ["--factory", "tests.flight_helpers:counting_bt", "--max-wait-ms", "5", "--deadline", "20"]


@pytest.fixture(scope="module")
def bt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flight-bt")
    log = tmp / "calls.jsonl"
    env = {"BRRM_TEST_FAKE": json.dumps({"classify_s": CALL_S, "log": str(log), "gate": str(tmp / "gate")})}
    with serving_in_process(BT, tmp, env=env) as srv:
        srv.calls, srv.gate = log, tmp / "gate"
        yield srv


def calls(server, token: str) -> int:
    """Backend calls (``classify``) whose texts hold ``token``."""
    return sum(any(token in t for t in line["texts"]) for line in read_log(server.calls))


def score_body(token: str, *, n: int = 2, **extra) -> dict:
    return {"items": [{"prompt": f"prompt {token}", "response": f"q{k} {token}"} for k in range(n)], **extra}


def joined(server) -> int:
    """Requests that joined a job already in flight on the in-process server (single-flight's own count)."""
    return server.app.app.state.brrm.flights.joined


def held(server, *posts: Callable[[], httpx.Response], leave: int | None = None, joiners: int | None = None) -> list:
    """Run the posts on threads, the first one's backend call held in flight (the server's gate file) until every
    later post has joined it, and, with ``leave=k``, until post ``k`` has ended (its client gave up or its
    deadline passed) too; then the call goes on. Events, not sleeps: the verdict does not depend on how fast a busy
    machine starts threads. ``joiners``: how many of the later posts join (default all). Returns each post's
    response (or the exception it raised), in order."""
    server.gate.touch()
    base = joined(server)
    try:
        threads, out = _start(posts[:1])
        _until(lambda: server.app.app.state.brrm.flights.in_flight == 1, "the first request's job")
        more, out[1:] = _start(posts[1:])
        threads += more
        want = len(posts) - 1 if joiners is None else joiners
        _until(lambda: joined(server) - base >= want, "the later requests joining it")
        if leave is not None:
            threads[leave].join(60)
    finally:
        server.gate.unlink(missing_ok=True)
    for t in threads:
        t.join(60)
    return [box[0] for box in out]


def _start(posts: Sequence[Callable[[], httpx.Response]]) -> tuple[list[threading.Thread], list[list]]:
    out: list[list] = [[None] for _ in posts]

    def one(k: int) -> None:
        try:
            out[k][0] = posts[k]()
        except Exception as exc:  # noqa: BLE001 - a client's timeout is an outcome here
            out[k][0] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(posts))]
    for t in threads:
        t.start()
    return threads, out


def _until(check: Callable[[], bool], what: str, bound_s: float = 60) -> None:
    end = time.monotonic() + bound_s
    while not check():
        assert time.monotonic() < end, f"waited {bound_s:g} s for {what}"
        time.sleep(0.01)


def together(*posts: Callable[[], httpx.Response], stagger_s: float = 0.15) -> list:
    """Run the posts on threads, each ``stagger_s`` after the previous; their responses (or the exception each
    raised), in order."""
    out: list = [None] * len(posts)

    def one(k: int) -> None:
        try:
            out[k] = posts[k]()
        except Exception as exc:  # noqa: BLE001 - a client's timeout is an outcome here
            out[k] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(posts))]
    for t in threads:
        t.start()
        time.sleep(stagger_s)
    for t in threads:
        t.join(60)
    return out


def post(server, path: str, body: dict, *, key: str | None = None, timeout: float | httpx.Timeout = 30):
    headers = {"Idempotency-Key": key} if key else {}
    return lambda: http().post(f"{server.url}{path}", json=body, headers=headers, timeout=timeout)


# ------------------------------------------------------------------------------------------ single-flight
def test_two_identical_concurrent_requests_make_one_backend_call(bt):
    token = uuid.uuid4().hex
    a, b = held(bt, post(bt, "/v1/score", score_body(token)), post(bt, "/v1/score", score_body(token)))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert a.json() == b.json()
    assert [r["reward"] for r in a.json()["rewards"]] == [0.5, 1.5]
    assert calls(bt, token) == 1
    # the same two requests, one differing in one response: both run (the count is of real calls)
    other = uuid.uuid4().hex
    c, d = together(post(bt, "/v1/score", score_body(other)), post(bt, "/v1/score", score_body(other, n=3)))
    assert c.status_code == d.status_code == 200
    assert calls(bt, other) == 2


def test_a_failing_shared_job_reaches_both_waiters_and_is_not_cached(bt):
    token = f"BOOM {uuid.uuid4().hex}"
    a, b = held(bt, post(bt, "/v1/score", score_body(token, n=1)), post(bt, "/v1/score", score_body(token, n=1)))
    assert a.status_code == b.status_code == 503, (a.text, b.text)
    assert a.json() == b.json() and "BOOM" in a.json()["error"]["message"]
    shared = calls(bt, token)
    assert shared >= 1  # the one job's calls (the failing one, bisected)
    again = http().post(f"{bt.url}/v1/score", json=score_body(token, n=1), timeout=30)
    assert again.status_code == 503
    assert calls(bt, token) == 2 * shared  # run again, exactly as the shared run did: nothing was kept


def test_a_waiter_whose_client_gives_up_does_not_cancel_the_others_result(bt):
    token = uuid.uuid4().hex
    kept, gone = held(bt, post(bt, "/v1/score", score_body(token)),
                      post(bt, "/v1/score", score_body(token), timeout=httpx.Timeout(30, read=0.3)), leave=1)
    assert isinstance(gone, httpx.TimeoutException)
    assert kept.status_code == 200 and [r["reward"] for r in kept.json()["rewards"]] == [0.5, 1.5]
    assert calls(bt, token) == 1


def test_a_waiter_whose_own_deadline_passes_does_not_cancel_the_others_result(bt):
    token = uuid.uuid4().hex
    kept, late = held(bt, post(bt, "/v1/score", score_body(token)),
                      post(bt, "/v1/score", score_body(token, timeout_s=0.5)), leave=1)
    assert late.status_code == 504, late.text
    assert kept.status_code == 200 and [r["reward"] for r in kept.json()["rewards"]] == [0.5, 1.5]
    assert calls(bt, token) == 1
    # alone, the same short deadline still ends its own work (and frees its slot)
    alone = http().post(f"{bt.url}/v1/score", json=score_body(uuid.uuid4().hex, timeout_s=0.3), timeout=30)
    assert alone.status_code == 504


# ------------------------------------------------------------------------------------------ Idempotency-Key
def replies(server, reply: str) -> float:
    """``/metrics``: replies to Idempotency-Key requests on /v1/score that were ``executed`` or ``replayed``."""
    for line in http().get(f"{server.url}/metrics", timeout=30).text.splitlines():
        if line.startswith(f'brrm_idempotent_replies_total{{endpoint="/v1/score",reply="{reply}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_an_idempotent_retry_makes_no_backend_call_and_returns_the_same_body(bt):
    token, key = uuid.uuid4().hex, f'"{uuid.uuid4()}"'
    executed, replayed = replies(bt, "executed"), replies(bt, "replayed")
    first = post(bt, "/v1/score", score_body(token), key=key)()
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    retry = post(bt, "/v1/score", score_body(token), key=key)()
    assert retry.status_code == 200 and retry.content == first.content
    assert retry.headers["idempotent-replayed"] == "true"
    assert calls(bt, token) == 1
    # /metrics tells the replay from the execution (both were 200s on /v1/score to the request counter)
    assert (replies(bt, "executed"), replies(bt, "replayed")) == (executed + 1, replayed + 1)
    # the same body without the key is a new request: it runs again (single-flight keeps no results)
    assert post(bt, "/v1/score", score_body(token))().json() == first.json()
    assert calls(bt, token) == 2


def test_the_same_key_with_another_body_is_refused_naming_the_key(bt):
    token, key = uuid.uuid4().hex, f"retry-{uuid.uuid4()}"
    assert post(bt, "/v1/score", score_body(token), key=key)().status_code == 200
    other = post(bt, "/v1/score", score_body(token, n=3), key=key)()
    assert other.status_code == 422
    assert other.json()["error"]["type"] == "idempotency_key_reused" and key in other.json()["error"]["message"]
    elsewhere = post(bt, "/v1/rank", {"prompt": "p", "responses": ["q1", "q2"]}, key=key)()
    assert elsewhere.status_code == 422 and key in elsewhere.json()["error"]["message"]
    assert calls(bt, token) == 1
    bad = post(bt, "/v1/score", score_body(token), key="has space")()
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]


def test_a_retry_while_the_first_runs_waits_for_it(bt):
    token, key = uuid.uuid4().hex, uuid.uuid4().hex
    body = score_body(token)
    first, retry, other = held(bt, post(bt, "/v1/score", body, key=key), post(bt, "/v1/score", body, key=key),
                               post(bt, "/v1/score", score_body(token, n=1), key=key), joiners=1, leave=2)
    assert first.status_code == retry.status_code == 200 and retry.content == first.content
    assert retry.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422 and key in other.json()["error"]["message"]  # another body, while running
    assert calls(bt, token) == 1


def test_a_retry_after_the_clients_own_timeout_finds_its_work_still_running(bt):
    token, key = uuid.uuid4().hex, uuid.uuid4().hex
    body = score_body(token)
    with pytest.raises(httpx.TimeoutException):
        post(bt, "/v1/score", body, key=key, timeout=0.2)()
    time.sleep(0.2)  # the first client is gone; its run goes on for a retry
    retry = post(bt, "/v1/score", body, key=key)()
    assert retry.status_code == 200 and [r["reward"] for r in retry.json()["rewards"]] == [0.5, 1.5]
    assert calls(bt, token) == 1


class _LosingProxy(BaseHTTPRequestHandler):
    """Forwards to ``target``, recording (method, path, Idempotency-Key); the reply to the first POST is lost: held
    past the client's own HTTP timeout, then the connection is dropped (the server did its work)."""

    target, hold_s = "", 0.0
    seen: list[tuple[str, str, str | None]] = []

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers["Content-Length"])))

    def _forward(self, body: bytes | None) -> None:
        key = self.headers.get("Idempotency-Key")
        self.seen.append((self.command, self.path, key))
        headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
        reply = httpx.request(self.command, f"{self.target}{self.path}", content=body, headers=headers, timeout=30)
        if self.command == "POST" and [s[0] for s in self.seen].count("POST") == 1:
            time.sleep(self.hold_s)
            self.close_connection = True
            return
        self.send_response(reply.status_code)
        for name in ("content-type", "idempotent-replayed"):
            if name in reply.headers:
                self.send_header(name, reply.headers[name])
        self.send_header("Content-Length", str(len(reply.content)))
        self.end_headers()
        self.wfile.write(reply.content)

    def log_message(self, *args: object) -> None:
        pass


def test_remote_judge_retries_after_its_own_timeout_under_one_key_and_the_server_runs_once(bt):
    """RemoteJudge sends one Idempotency-Key per logical request and reuses it on its retry after a timeout: the
    server answers the retry with the stored reply (no second backend call); the next request has its own key."""
    from brrm.service import RemoteJudge

    _LosingProxy.target, _LosingProxy.seen = bt.url, []
    judge_timeout = 2.0  # the server judges well within it (0.6 s); RemoteJudge's HTTP timeout is timeout_s + 5 s
    _LosingProxy.hold_s = judge_timeout + 5 + 1.5
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _LosingProxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    token = uuid.uuid4().hex
    try:
        with RemoteJudge(f"http://127.0.0.1:{proxy.server_port}", timeout_s=judge_timeout, retries=2) as judge:
            first = judge.score([f"prompt {token}"] * 2, [f"q{k} {token}" for k in range(2)])
            assert [(r.status.value, r.reward) for r in first] == [("ok", 0.5), ("ok", 1.5)], first
            assert calls(bt, token) == 1  # the retry was answered the first run's stored reply
            again = judge.score([f"prompt {token}"] * 2, [f"q{k} {token}" for k in range(2)])
            assert [r.reward for r in again] == [0.5, 1.5] and calls(bt, token) == 2  # a new request runs
    finally:
        proxy.shutdown()
        proxy.server_close()
    keys = [key for method, path, key in _LosingProxy.seen if method == "POST"]
    assert len(keys) == 3 and keys[0] == keys[1] and keys[2] != keys[0] and len(keys[0] or "") == 32, keys
    assert all(key is None for method, _, key in _LosingProxy.seen if method == "GET")


def test_the_openapi_schema_documents_the_header_on_every_post_route(bt):
    schema = http().get(f"{bt.url}/openapi.json").json()
    posts = {path: ops["post"] for path, ops in schema["paths"].items() if "post" in ops}
    assert sorted(posts) == ["/compare", "/get_reward", "/v1/judge", "/v1/rank", "/v1/score"]
    for path, operation in posts.items():
        (header,) = [p for p in operation.get("parameters", []) if p["in"] == "header"]
        assert header["name"] == "Idempotency-Key" and header["required"] is False, path
        assert header["schema"]["pattern"] == "^[!-~]{1,255}$" and "422" in header["description"], path


# ------------------------------------------------------------------------------------------ BR-RM pairs
def test_identical_brrm_judge_and_compare_requests_are_judged_once(tmp_path):
    log = tmp_path / "prompts.jsonl"
    env = {"BRRM_TEST_FAKE": json.dumps({"log": str(log), "gate": str(tmp_path / "gate")})}
    args = ["--factory", "tests.serve_helpers:fake_brrm", "--max-wait-ms", "5", "--deadline", "20"]
    with serving_in_process(args, tmp_path, env=env) as srv:
        srv.gate = tmp_path / "gate"
        token = uuid.uuid4().hex
        pair = {"pairs": [{"prompt": "2+2?", "response_a": f"4 good {token}", "response_b": f"5 {token}"}],
                "swap": True, "options": {"seed": 3}}
        a, b = held(srv, post(srv, "/v1/judge", pair), post(srv, "/v1/judge", pair))
        assert a.status_code == b.status_code == 200 and a.json() == b.json()
        assert a.json()["judgments"][0]["winner"] == "A"
        prompts = [r for r in read_log(log) if any(token in x for x in r["responses"])]
        assert len(prompts) == 4  # one pair, both orders, two turns: once
        texts = [f"17 good {token}", f"19 {token}", f"21 {token}"]
        n0 = len(read_log(log))
        c, d = held(srv, post(srv, "/compare", compare_body(texts)), post(srv, "/compare", compare_body(texts)))
        assert c.status_code == d.status_code == 200 and c.json() == d.json()
        n1 = len(read_log(log))
        alone = post(srv, "/compare", compare_body(texts))()  # the same once more, alone: it runs again
        assert alone.status_code == 200 and alone.json() == c.json()
        assert n1 - n0 == len(read_log(log)) - n1 > 0  # the two concurrent requests cost what one alone does


# ------------------------------------------------------------------------------------------ in process
def test_store_bounds_ttl_count_and_size():
    now = [0.0]
    store = IdempotencyStore(max_entries=2, max_bytes=100, ttl_s=10, clock=lambda: now[0])

    def keep(key: str, body: bytes, status: int = 200) -> None:
        store.finish(key, store.start(key, "fp"), Reply(status, (), body))

    keep("a", b"x" * 10)
    keep("b", b"y" * 10)
    assert store.get("a") is not None  # a is now the most recently used
    keep("c", b"z" * 10)
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None  # LRU went
    keep("d", b"w" * 95)
    assert store.kept_bytes <= 100 and store.get("d") is not None
    keep("e", b"error", status=503)
    assert store.get("e") is None  # a failure is not kept
    keep("f", b"v" * ((1 << 20) + 1))
    assert store.get("f") is None  # over the largest reply kept
    now[0] = 10.0
    assert store.get("d") is None and len(store) == 0  # expired


def test_a_joiner_extends_the_shared_deadline_and_the_early_waiter_leaves_alone():
    from brrm.service.scheduler import DeadlineExceeded, Scheduler
    from brrm.service.singleflight import SingleFlight

    ran: list[list[object]] = []

    release = threading.Event()  # the run lasts until the early waiter's deadline has passed: an event

    def runner(_key, items, _progress):
        ran.append(list(items))
        release.wait(30)
        return [f"result {i}" for i in items]

    async def main() -> tuple[object, object]:
        scheduler = Scheduler(runner, max_batch=8, max_wait_s=0.0, max_queue=8)
        await scheduler.start()
        flights = SingleFlight(scheduler, lambda _key: "judge")
        early = asyncio.ensure_future(flights.submit("k", ["x", "y"], timeout_s=1.0))
        await asyncio.sleep(0)  # the late one joins at the next turn of the loop, long before the early deadline
        late = asyncio.ensure_future(flights.submit("k", ["x", "y"], timeout_s=30))
        await asyncio.wait([early])
        release.set()
        outcomes = await asyncio.gather(early, late, return_exceptions=True)
        assert flights.in_flight == 0 and flights.joined == 1
        await scheduler.drain(1)
        return outcomes[0], outcomes[1]

    early, late = asyncio.run(main())
    assert isinstance(early, DeadlineExceeded)
    assert late == ["result x", "result y"]
    assert ran == [["x", "y"]]


GRACE_S = 1.0
"""The grace of the test below: 20 times the gaps it leaves inside it, so the verdict does not depend on load."""


def test_a_lingering_job_ends_once_its_clients_stay_away_past_the_grace():
    """A job submitted with ``linger_s`` (a keyed request's) outlives its last waiter by the grace: a waiter that
    comes back within it keeps the job, and it is cancelled only the whole grace after the last one left."""
    from brrm.service.scheduler import Scheduler
    from brrm.service.singleflight import SingleFlight

    release = threading.Event()

    def runner(_key, items, _progress):
        release.wait(30)
        return list(items)

    async def main() -> tuple[bool, float, int]:
        loop = asyncio.get_running_loop()
        scheduler = Scheduler(runner, max_batch=8, max_wait_s=0.0, max_queue=8)
        await scheduler.start()
        flights = SingleFlight(scheduler, lambda _key: "judge")

        def waiter() -> asyncio.Future[list[object]]:
            return asyncio.ensure_future(flights.submit("k", ["x"], timeout_s=60, linger_s=GRACE_S))

        first = waiter()
        await asyncio.sleep(0.05)
        first.cancel()  # the client left
        await asyncio.sleep(0.05)
        again = waiter()  # a retry came back within the grace (a twentieth of it: room for a busy machine's delays)
        await asyncio.sleep(GRACE_S * 1.2)  # past the grace: still kept, since a client is back
        kept = flights.in_flight == 1 and not again.done()
        again.cancel()
        left = loop.time()
        while flights.in_flight:
            await asyncio.sleep(0.01)
        waited = loop.time() - left
        release.set()
        await scheduler.drain(5)
        return kept, waited, flights.joined

    kept, waited, joined = asyncio.run(main())
    assert kept and joined == 1 and 0.99 * GRACE_S <= waited < 10 * GRACE_S  # the whole grace, then the end
