"""``brrm serve`` under faults, on a real uvicorn process (the console script forked from the test process,
:mod:`tests.forked_cli`: its own exit status, signals and memory, without a fresh interpreter's imports) whose BR-RM
judge runs on a scripted backend with fixed timings (a real model cannot stall, fail one item or miscount on demand):
stalls and deadlines (N06), client disconnects (N10), oversized bodies (N11), overload (N12), miscounted backend
results (N19), per-item backend errors, and SIGTERM during load.

The scripted backend sleeps 0.25 s per turn-1 call and 0.25 s per turn-2 call (a batch takes 0.5 s), prefers the
response containing ``good``, stalls on ``<<STALL>>`` (600 s, or until the test writes its release file) and fails
an item on ``<<ERROR>>``. It declares no concurrent calls: a backend that is not reentrant.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.forked_cli import SERVE_PRELOAD, ForkedCLI
from tests.serve_helpers import READY_HANG_S, Server, compare_body, free_port, http, read_log

pytestmark = pytest.mark.timeout(120)

CHATML = "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
ARGS = ["--factory", "tests.serve_helpers:fake_brrm", "--max-batch", "1", "--max-queue", "6", "--deadline", "5",
        "--stall-timeout", "0.5", "--max-wait-ms", "5"]


@contextlib.contextmanager
def forked_server(args: list[str], tmp: Path, env: dict[str, str]) -> Iterator[Server]:
    """``brrm serve ARGS`` as :func:`tests.serve_helpers.running_server` starts it, forked instead of a new
    interpreter; stopped (SIGTERM, then SIGKILL) afterwards."""
    port = free_port()
    log_path = tmp / f"server-{port}.log"
    proc = ForkedCLI(["serve", *args, "--port", str(port), "--log-level", "warning", "--no-access-log"],
                     log=log_path, env=env, preload=SERVE_PRELOAD)
    server = Server(proc, port, log_path, None)  # type: ignore[arg-type]  # a Popen in all it uses
    try:
        server.wait_ready(READY_HANG_S)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-fake")
    log, mode, release = tmp / "calls.jsonl", tmp / "mode", tmp / "release"
    mode.write_text("")
    env = {"BRRM_TEST_FAKE": json.dumps({"turn1_s": 0.25, "turn2_s": 0.25, "log": str(log), "mode_file": str(mode),
                                         "release_file": str(release)})}
    with forked_server(ARGS, tmp, env=env) as srv:
        srv.calls, srv.mode, srv.release = log, mode, release
        yield srv


def metric(server, name: str) -> float:
    text = http().get(f"{server.url}/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _until(check, hang_s: float = 60.0) -> None:
    """Wait for ``check()`` (``hang_s`` bounds a hang, not a speed)."""
    end = time.monotonic() + hang_s
    while not check():
        assert time.monotonic() < end, "the awaited state never came"
        time.sleep(0.05)


def idle(server) -> dict:
    state = http().get(f"{server.url}/ready").json()
    assert state["queue_depth"] == 0 and state["running"] == 0, state
    return state


def test_one_failing_item_is_its_status_in_a_200(fake):
    pairs = [{"prompt": "q", "response_a": a, "response_b": "good b"} for a in ("a", "<<ERROR>> a", "c")]
    r = http().post(f"{fake.url}/v1/judge", json={"pairs": pairs, "swap": False}, timeout=30)
    assert r.status_code == 200
    assert [(j["status"], j["winner"]) for j in r.json()["judgments"]] == [("ok", "B"), ("backend_error", "none"),
                                                                          ("ok", "B")]
    assert "scripted backend failure" in r.json()["judgments"][1]["reason"]


def test_per_request_options_stay_within_the_servers_limits(fake):
    pair = {"prompt": "q", "response_a": "good", "response_b": "b"}
    ok = http().post(f"{fake.url}/v1/judge", json={"pairs": [pair], "options": {"seed": 7, "max_new_tokens": 64}})
    assert ok.status_code == 200 and ok.json()["judgments"][0]["winner"] == "A"
    body = ok.json()
    assert {**body["provenance"], **body["judgments"][0]["provenance"]}["sampling"]["max_new_tokens_per_turn"] == 64
    over = http().post(f"{fake.url}/v1/judge", json={"pairs": [pair], "options": {"max_new_tokens": 10**6}})
    assert over.status_code == 422 and "exceeds the server's limit of 8192" in over.json()["error"]["message"]
    bad = http().post(f"{fake.url}/v1/rank", json={"prompt": "q", "responses": ["a", "b"],
                                                  "options": {"decoding": "constrained"}})
    assert bad.status_code == 422 and "cannot run constraint programs" in bad.json()["error"]["message"]


def test_n06_a_stalled_comparison_times_out_alone_and_frees_its_slot(fake):
    # the server's own deadline (--deadline 5) bounds the wait: the 504 says it fired (the stall is 600 s)
    r = http().post(f"{fake.url}/compare", json=compare_body(["11", "13", "12", "<<STALL>>"]), timeout=30)
    assert r.status_code == 504 and r.json()["error"]["type"] == "deadline_exceeded"
    # the stalled call is abandoned (its request left), but the backend is not reentrant: no call runs beside it, and
    # new work is told so at once (503, Retry-After, the reason) instead of waiting out its deadline
    _until(lambda: metric(fake, "brrm_abandoned_total") == 1)
    refused = http().post(f"{fake.url}/compare", json=compare_body(["good 11", "12"]), timeout=30)
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert "stalled judge call" in refused.json()["error"]["message"]
    try:
        fake.release.write_text("")  # the stalled call returns: the model is free again
        _until(lambda: http().get(f"{fake.url}/ready").status_code == 200
               and metric(fake, "brrm_abandoned_batches") == 0)
    finally:
        fake.release.unlink()
    fresh = http().post(f"{fake.url}/compare", json=compare_body(["good 11", "12"]), timeout=30)
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["rewards"] == [1.0, 0.0] and fresh.json()["statuses"] == ["ok", "ok"]
    idle(fake)
    assert metric(fake, "brrm_abandoned_total") == 1 and metric(fake, "brrm_queue_depth") == 0


def test_n10_a_disconnected_request_stops_costing_model_time(fake):
    """X's client leaves while X's turn 1 is inside the model (held there by ``<<STALL>>`` until the server has seen
    the disconnect: events, not a race between a sleep and a turn's length); X never reaches turn 2, and the server
    serves the next requests."""
    before = len(read_log(fake.calls))
    body = json.dumps(compare_body(["X-answer-1 <<STALL>>", "X-answer-2"], "Explain TCP slow start.")).encode()
    disconnects = 'brrm_cancelled_total{reason="disconnect",stage="running"}'
    seen = metric(fake, disconnects)
    sock = socket.create_connection(("127.0.0.1", fake.port))
    try:
        sock.sendall(b"POST /compare HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        _until(lambda: any("X-answer-1 <<STALL>>" in c["responses"] for c in read_log(fake.calls)[before:]))
        sock.close()  # X goes away while its turn 1 is inside the model
        _until(lambda: metric(fake, disconnects) >= seen + 1)
    finally:
        sock.close()
        fake.release.write_text("")  # turn 1 returns
    try:
        _until(lambda: http().get(f"{fake.url}/ready").status_code == 200 and metric(fake, "brrm_running_batches") == 0
               and metric(fake, "brrm_abandoned_batches") == 0)
    finally:
        fake.release.unlink()
    results: list[int] = []

    def y(k: int) -> None:
        results.append(http().post(f"{fake.url}/compare", json=compare_body([f"good Y{k}", f"Y{k}"]),
                                  timeout=30).status_code)

    threads = [threading.Thread(target=y, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [200, 200, 200], results
    calls = read_log(fake.calls)[before:]
    x_turns = {c["turn"] for c in calls if "X-answer-1 <<STALL>>" in c["responses"]}
    assert x_turns == {1}, "X's judgment went on to turn 2 after its client left"
    idle(fake)


def test_n11_oversized_bodies_are_refused_before_buffering(fake):
    before, rss = len(read_log(fake.calls)), fake.rss_kib()
    with socket.create_connection(("127.0.0.1", fake.port)) as s:  # (1) declared 256 MiB
        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 268435456\r\n\r\n{\"query\": [\"")
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
    with socket.create_connection(("127.0.0.1", fake.port)) as s:  # (2) chunked 64 MiB, no Content-Length
        answer: list[bytes] = []
        reader = threading.Thread(target=lambda: answer.append(s.recv(4096)))
        reader.start()  # read while sending: the 413 comes as soon as the limit is passed
        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
        with contextlib.suppress(OSError):  # the server may close the connection before all 64 MiB are sent
            for _ in range(64):
                s.sendall(chunk)
        reader.join(10)
        assert answer and answer[0].startswith(b"HTTP/1.1 413"), answer
    grown_mib = (fake.rss_kib() - rss) / 1024
    assert grown_mib < 2 * 8, grown_mib
    many = {"query": ["x"] * 100_000}  # (3) ~600 KB, under the byte limit, over the item limit
    r = http().post(f"{fake.url}/get_reward", json=many, timeout=30)
    assert r.status_code == 413 and "--max-items" in r.json()["error"]["message"]
    bad = http().post(f"{fake.url}/get_reward", content=b"{nope", headers={"content-type": "application/json"})
    assert bad.status_code == 422
    assert len(read_log(fake.calls)) == before and idle(fake)["queue_depth"] == 0
    ok = http().post(f"{fake.url}/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "good", "response_b": "b"}]},
                    timeout=30)
    assert ok.status_code == 200 and ok.json()["judgments"][0]["winner"] == "A"


def test_n12_overload_answers_429_fast_and_served_results_stay_correct(fake):
    before, rss = len(read_log(fake.calls)), fake.rss_kib()

    def body(k: int) -> dict:
        answer = f"good answer {k}" if k % 2 == 0 else f"meh answer {k}"
        return {"query": [CHATML.format(q=f"N12 question {k}?") + answer + "<|im_end|>\n<|endoftext|>"],
                "prompts": [CHATML.format(q=f"N12 question {k}?")],
                "labels": [f"{'plain' if k % 2 == 0 else 'good'} reference {k}"]}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=fake.url, timeout=30) as c:
            return await asyncio.gather(*(c.post("/get_reward", json=body(k)) for k in range(20)))

    responses = asyncio.run(burst())
    codes = [r.status_code for r in responses]
    # admitted requests run one after another (0.5 s of scripted work each, 7 at most, within --deadline 5); on a very
    # busy machine the last ones may pass their deadline: a typed 504 then, never a wrong or missing result
    assert set(codes) <= {200, 429, 504} and 1 <= codes.count(200) + codes.count(504) <= 6 + 1, codes
    assert codes.count(200) >= 1, codes  # the first admitted runs at once
    for k, r in enumerate(responses):
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["type"] == "queue_full"
        elif r.status_code == 504:
            assert r.json()["error"]["type"] == "deadline_exceeded", r.text
        else:  # the judge prefers the answer containing "good" over the reference
            assert r.json()["rewards"] == [1.0 if k % 2 == 0 else 0.0] and r.json()["statuses"] == ["ok"]
    judged = {c["responses"][0] for c in read_log(fake.calls)[before:] if c["turn"] == 1}
    assert len(judged) <= codes.count(200) + codes.count(504)  # a rejected request is never judged
    assert fake.rss_kib() - rss < 50 * 1024
    time.sleep(3)
    assert http().post(f"{fake.url}/get_reward", json=body(0), timeout=30).status_code == 200
    assert metric(fake, "brrm_rejected_total") == codes.count(429)


@pytest.mark.parametrize("mode", ["drop_last", "extra"])
def test_n19_a_miscounting_backend_fails_the_batch_never_shifts_rewards(fake, mode):
    fake.mode.write_text(mode)
    try:
        body = {"query": [CHATML.format(q="p") + f"good q{k}<|im_end|>" for k in range(3)],
                "prompts": [CHATML.format(q="p")] * 3, "labels": ["ref"] * 3}
        r = http().post(f"{fake.url}/get_reward", json=body, timeout=30)
        # every item fails alone (the judge's own length check): the backend is failing, and the 503 says so
        assert r.status_code == 503 and r.json()["error"]["type"] == "backend_failing" and r.headers["retry-after"]
        assert "zip()" in r.json()["error"]["message"]  # the judge's strict length check names the mismatch
    finally:
        fake.mode.write_text("")
    assert http().post(f"{fake.url}/get_reward", json=body, timeout=30).json()["rewards"] == [1.0, 1.0, 1.0]


def test_openrlhf_own_client_code_against_get_reward(fake, monkeypatch):
    """OpenRLHF's own executor (``openrlhf.utils.agent.SingleTurnAgentExecutor``, importable on CPU with
    ``pip install --no-deps openrlhf pylatexenc`` and aiohttp) builds the query from policy token ids exactly as
    in training, posts it to ``/get_reward`` (or calls brrm's reward_func file) and stores the reward. Only the
    policy's generation is a stand-in."""
    from brrm.testing import build_tiny_tokenizer
    from tests.openrlhf_support import openrlhf_execute
    from tests.serve_helpers import REPO

    tok = build_tiny_tokenizer()
    monkeypatch.setenv("BRRM_URL", fake.url)
    for endpoint in (f"{fake.url}/get_reward", str(REPO / "examples" / "openrlhf_reward_func.py")):
        out = openrlhf_execute(endpoint, tok, "good 4")  # the policy answers "good 4": the scripted judge prefers it
        assert out["reward"] == [1.0] and out["scores"] == [1.0], (endpoint, out)
        assert out["extra_logs"] == {"brrm_failed": [0.0]}


def test_sigterm_during_load_drains_and_exits_0(fake):
    """Last in this module: it stops the module's server. In-flight requests (one running, five queued) finish,
    new connections are refused, the process exits 0."""
    clients = [httpx.Client(base_url=fake.url, timeout=30) for _ in range(6)]
    results: list[tuple[int, str]] = []

    def client(k: int) -> None:
        r = clients[k].post("/v1/judge", json={"pairs": [{"prompt": f"q{k}", "response_a": "good",
                                                          "response_b": "b"}]})
        results.append((r.status_code, r.json()["judgments"][0]["winner"] if r.status_code == 200 else r.text))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    end = time.monotonic() + 10
    while metric(fake, "brrm_in_flight_requests") < 6 + 1 and time.monotonic() < end:  # + the /metrics call
        time.sleep(0.01)
    fake.proc.send_signal(15)
    time.sleep(0.3)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{fake.url}/health", timeout=5)
    for t in threads:
        t.join(30)
    assert fake.proc.wait(30) == 0, fake.output()[-2000:]
    assert results == [(200, "A")] * 6
    for c in clients:
        c.close()
