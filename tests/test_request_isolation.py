"""Every request's fate is its own inside a shared running batch (issue 28, bullets 1 and 2).

On a real tiny BR-RM served by ``brrm serve`` at ``--concurrency auto`` (transformers' continuous batching: calls
join one running batch; the server in this process on a real socket, :func:`tests.serve_helpers.serving_in_process`:
a disconnect is a closed socket all the same), a request cancelled by its deadline and one whose client disconnects
mid-decode leave alone; the other requests get 200 with the bytes they get alone — when the six arrive as one
coalesced burst and when they join an already running batch as separate calls. A stalled item (a scripted backend: a
real model cannot stall on demand) costs only itself, in the server and in verl's ``VerlScorer`` (two rounds, local
and via ``url=``). In process, a cancelled call's rows are retired at the next step (their slots freed).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from brrm import cancellation
from brrm.backends.base import GenerationRequest
from brrm.backends.transformers import TransformersBackend
from brrm.rlhf.verl import TIMEOUT, VerlRewardConfig, VerlScorer
from brrm.service.scheduler import DeadlineExceeded, Scheduler
from brrm.testing import build_tiny_qwen3, save_tiny_qwen3
from tests.serve_helpers import T1, http, is_turn2, ranking, responses_in, serving_in_process

pytestmark = pytest.mark.timeout(600)

TINY = ("--kind", "brrm", "--max-new-tokens", "1500", "--block-token-cap", "32", "--thinking", "off",
        "--concurrency", "auto", "--deadline", "120")
WAIT_S = 0.4
"""The server's --max-wait-ms, in seconds: a request waits this long for company before its batch starts."""
COMPARED = (0, 3, 4, 5)
"""The requests that stay (1 meets its deadline and 2's client leaves mid-decode): each gets the bytes it gets alone."""
PAIRS = [{"prompt": f"Question {k}: what is {k} + {k}?", "response_a": f"{2 * k}", "response_b": f"{2 * k + 1}"}
         for k in range(6)]


def _judgments(reply: dict[str, Any]) -> str:
    return json.dumps(reply["judgments"], sort_keys=True)


# ------------------------------------------------------------------------------------------ in process
def test_a_cancelled_call_leaves_the_running_batch_alone_and_frees_its_rows():
    """Three calls share one continuous batch; one's token is set mid-decode: it raises Cancelled, its rows are
    retired (counted in ``retired_rows``), and the other two get exactly the tokens they get alone."""
    model, tok = build_tiny_qwen3()
    backend = TransformersBackend(model, tok, batch_size=8, scheduling="continuous")

    def requests(k: int) -> list[GenerationRequest]:
        return [GenerationRequest(tuple(range(10 + k, 22 + k)), 60, seed=k),
                GenerationRequest(tuple(range(40 + k, 46 + k)), 50, seed=100 + k)]

    alone = {k: [c.token_ids for c in backend.generate(requests(k), temperature=1.0)] for k in range(3)}
    full_tokens = backend.stats["generated_tokens"]
    assert full_tokens > 0 and backend.stats["retired_rows"] == 0
    tokens = {k: cancellation.CancelToken() for k in range(3)}
    out: dict[int, object] = {}

    def call(k: int) -> None:
        with cancellation.scope(tokens[k]):
            try:
                out[k] = [c.token_ids for c in backend.generate(requests(k), temperature=1.0)]
            except cancellation.Cancelled as exc:
                out[k] = exc

    threads = [threading.Thread(target=call, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    while backend.stats["generated_tokens"] < full_tokens + 20:
        time.sleep(0.001)
    tokens[1].cancel("deadline")
    for t in threads:
        t.join(60)
    assert out[0] == alone[0] and out[2] == alone[2]
    assert isinstance(out[1], cancellation.Cancelled) and out[1].reason == "deadline"
    assert backend.stats["retired_rows"] >= 1
    assert backend.stats["generated_tokens"] - full_tokens < full_tokens  # call 1 stopped short


class TokenRunner:
    """A scripted runner (no model): an item ``"stall"`` blocks until ``release``; ``"slow"`` runs until its
    request's token is set (as a running batch's rows do), recording that it saw the token; ``"boom"`` raises."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.slow_running = threading.Event()
        self.stall_returned = threading.Event()
        self.saw_cancel: list[str] = []

    def __call__(self, key: object, items: list[object], progress: Any) -> list[object]:
        token = cancellation.current()
        for item in items:
            if item == "stall":
                self.release.wait(30)
                self.stall_returned.set()
            if item == "slow":
                self.slow_running.set()
            if item == "boom":
                raise RuntimeError("boom")
            while item == "slow" and token is not None and not token.cancelled:
                time.sleep(0.005)
            if item == "slow" and token is not None:
                self.saw_cancel.append(token.reason)
        return [f"{item}!" for item in items]


def test_split_calls_answer_each_request_alone():
    """One coalesced burst, each request its own call under its own token: a disconnect (task cancelled) reaches
    only its call's token; a stalled request is abandoned alone while its batch-mates are answered at once; a
    request whose item raises alone gets its item's failed result, not the batch's 503."""
    runner = TokenRunner()

    async def burst() -> tuple[list[object], bool, int]:
        s = Scheduler(runner, max_batch=16, max_wait_s=0.05, max_queue=100, concurrency=1, stall_timeout_s=0.2,
                      max_abandoned=2, failed=lambda key, item, status, reason: (status.value, reason), split=True)
        await s.start()
        tasks = [asyncio.create_task(s.submit("k", [item], timeout_s=t))
                 for item, t in (("a", 5), ("slow", 5), ("stall", 1.0), ("boom", 5), ("b", 5))]
        assert await asyncio.to_thread(runner.slow_running.wait, 60)  # an event, not a sleep: "slow" is running
        tasks[1].cancel()  # the client of "slow" goes away
        got = await asyncio.gather(*tasks, return_exceptions=True)
        answered_beside_the_stall = not runner.stall_returned.is_set()
        for _ in range(100):  # the stalled call is abandoned after its request left and stall_timeout_s passed
            if s.abandoned:
                break
            await asyncio.sleep(0.02)
        after = await s.submit("k", ["c"], timeout_s=5)  # the slot is free: new work runs at once
        abandoned = s.abandoned
        runner.release.set()
        await s.drain(2)
        return [*got, after], answered_beside_the_stall, abandoned

    got, answered_beside_the_stall, abandoned = asyncio.run(burst())
    assert got[0] == ["a!"] and got[4] == ["b!"] and got[5] == ["c!"]
    assert isinstance(got[1], asyncio.CancelledError) and runner.saw_cancel == ["disconnect"]
    assert isinstance(got[2], DeadlineExceeded)
    assert got[3] == [("backend_error", "this item failed on its own: RuntimeError: boom")]
    # every request was answered while the stalled call was still inside the runner (an order of events, not a time)
    assert answered_beside_the_stall and abandoned == 1


# ------------------------------------------------------------------------------------------ the real server
@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("isolation")
    model = save_tiny_qwen3(tmp / "tiny")
    with serving_in_process(["--model", str(model), *TINY, "--max-wait-ms", str(int(WAIT_S * 1000))],
                            tmp) as srv:
        srv.alone = {}
        for k in COMPARED:  # 1 and 2 leave mid-decode: what they get alone is never compared
            pair = PAIRS[k]
            t = time.monotonic()
            r = http().post(f"{srv.url}/v1/judge", json={"pairs": [pair]}, timeout=120)
            assert r.status_code == 200, r.text
            srv.alone[k] = (_judgments(r.json()), time.monotonic() - t)
        yield srv


def _disconnecting(url_port: int, pair: dict[str, Any], after_s: float) -> None:
    body = json.dumps({"pairs": [pair]}).encode()
    sock = socket.create_connection(("127.0.0.1", url_port))
    sock.sendall(b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(after_s)
    sock.close()


def _six(server, stagger_s: float, leave_s: float) -> dict[int, httpx.Response]:
    """Requests 0-5 (1: timeout_s=leave_s; 2: its client goes away after leave_s), sent ``stagger_s`` apart."""
    out: dict[int, httpx.Response] = {}

    def send(k: int) -> None:
        body: dict[str, Any] = {"pairs": [PAIRS[k]]}
        if k == 1:
            body["timeout_s"] = leave_s
        if k == 2:
            _disconnecting(server.port, PAIRS[k], leave_s)
            return
        out[k] = http().post(f"{server.url}/v1/judge", json=body, timeout=120)

    threads = []
    for k in range(6):
        threads.append(threading.Thread(target=send, args=(k,)))
        threads[-1].start()
        time.sleep(stagger_s)
    for t in threads:
        t.join(150)
    return out


def _ready(server) -> dict[str, Any]:
    for _ in range(100):
        state = http().get(f"{server.url}/ready").json()
        if state["running"] == 0 and state["queue_depth"] == 0:
            return state
        time.sleep(0.05)
    raise AssertionError(f"the server did not go idle: {state}")


@pytest.mark.parametrize("stagger_s", [0.0, 0.5], ids=["one-burst", "joining-a-running-batch"])
def test_a_deadline_and_a_disconnect_cost_only_their_own_requests(tiny_server, stagger_s):
    decode = min(t for _, t in tiny_server.alone.values()) - WAIT_S  # the fastest request's decoding, alone
    assert decode > 0.3, tiny_server.alone
    leave_s = WAIT_S + decode / 3  # mid-decode: after the batch started, well before any request alone finished
    out = _six(tiny_server, stagger_s, leave_s)  # each leaves leave_s after its own arrival
    assert out[1].status_code == 504 and out[1].json()["error"]["type"] == "deadline_exceeded", \
        (leave_s, tiny_server.alone)
    for k in COMPARED:
        assert out[k].status_code == 200, (k, out[k].text)
        assert _judgments(out[k].json()) == tiny_server.alone[k][0], k
    state = _ready(tiny_server)
    assert state["ready"] is True
    metrics = http().get(f"{tiny_server.url}/metrics").text
    assert 'brrm_cancelled_total{reason="disconnect",stage="running"}' in metrics, (leave_s, tiny_server.alone)


# ------------------------------------------------------------------------------------------ a stalled item
def stalling_brrm() -> Any:
    """A BR-RM judge on a scripted backend that takes concurrent calls (as continuous batching does); a response
    containing ``<<STALL>>`` blocks its call for 600 s; turn 2 prefers the response containing ``good``."""
    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    def script(prompt: str, _request: Any) -> Any:
        first, second = responses_in(prompt)
        if "<<STALL>>" in first or "<<STALL>>" in second:
            time.sleep(600)
        time.sleep(0.05)
        if not is_turn2(prompt):
            return T1
        return ranking(2 if "good" in second and "good" not in first else 1)

    return brrm.load(kind="brrm", backend=FakeBackend(build_tiny_tokenizer(), script, concurrent=True),
                     decoding="faithful")


@pytest.fixture(scope="module")
def stall_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stall")
    args = ["--factory", "tests.test_request_isolation:stalling_brrm", "--concurrency", "auto", "--max-wait-ms",
            "200", "--stall-timeout", "0.5", "--deadline", "30", "--max-abandoned", "8"]
    with serving_in_process(args, tmp) as srv:
        yield srv


def _pair(k: int, stall: bool = False) -> dict[str, Any]:
    return {"prompt": f"Task {k}?", "response_a": f"answer {k}", "response_b": f"good answer {k}" if not stall
            else f"<<STALL>> {k}"}


STALLED_TIMEOUT_S = 6.0
"""The stalled request's own deadline: its 8 neighbours, sent with it, must be answered before it ends (each takes
0.1 s of scripted work; the margin is for a busy machine)."""


def test_a_stalled_item_among_eight_costs_only_itself_in_the_server(stall_server):
    for round_ in range(2):
        out: dict[int, tuple[int, float, dict[str, Any]]] = {}

        def send(k: int, round_: int = round_, out: dict[int, tuple[int, float, dict[str, Any]]] = out) -> None:
            stall = k == 3
            body = {"pairs": [_pair(10 * round_ + k, stall)], **({"timeout_s": STALLED_TIMEOUT_S} if stall else {})}
            t = time.monotonic()
            r = http().post(f"{stall_server.url}/v1/judge", json=body, timeout=60)
            out[k] = (r.status_code, time.monotonic() - t, r.json())

        threads = [threading.Thread(target=send, args=(k,)) for k in range(9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert out[3][0] == 504, out[3]
        for k in (0, 1, 2, 4, 5, 6, 7, 8):  # sent with the stalled one, answered before its deadline ended it:
            code, took, reply = out[k]    # not held behind it (an order of events, not a wall-time bound)
            assert code == 200 and took < out[3][1], (round_, k, code, took, out[3][1])
            assert reply["judgments"][0]["winner"] == "B" and reply["judgments"][0]["status"] == "ok"
        # queued requests are not held behind it: a fresh request right after is served (held behind the 600 s
        # stall, it would end at the server's 30 s deadline with a 504)
        after = http().post(f"{stall_server.url}/v1/judge", json={"pairs": [_pair(99)]}, timeout=60)
        assert after.status_code == 200, after.text
    state = _ready(stall_server)  # the stalled calls were abandoned: nothing counts as running
    assert state["ready"] is True


# ------------------------------------------------------------------------------------------ verl
def _verl_round(scorer: VerlScorer, tag: str) -> list[tuple[dict[str, object], float]]:
    texts = [f"good {tag} {k}" if k != 4 else f"<<STALL>> {tag}" for k in range(9)]

    async def one(text: str) -> tuple[dict[str, object], float]:
        t = time.perf_counter()
        return await scorer.score(text, f"reference {tag}", {"prompt": f"Task {tag}?"}), time.perf_counter() - t

    async def batch() -> list[tuple[dict[str, object], float]]:
        return await asyncio.gather(*[one(t) for t in texts])

    return asyncio.run(batch())


def _check_round(out: list[tuple[dict[str, object], float]], timeout_s: float) -> None:
    """The statuses are the deadline's own word, not a measured time: the stalled sample's is the timeout (its stall
    is 600 s: only its deadline answers it), and every other sample is ok (one held past its deadline would be a
    timeout too)."""
    stalled, _ = out[4]
    assert stalled["ok"] is False and stalled["status"] == TIMEOUT and stalled["reason"], stalled
    assert f"timeout_s={timeout_s:g}" in str(stalled["reason"]), stalled
    for k, (result, _) in enumerate(out):
        if k != 4:
            assert result["ok"] is True and result["status"] == "ok", (k, result)


def test_verl_local_a_stalled_sample_costs_only_itself_two_rounds():
    scorer = VerlScorer(VerlRewardConfig(timeout_s=3.0, max_workers=4), judge=stalling_brrm())
    try:
        for tag in ("first", "second"):
            _check_round(_verl_round(scorer, tag), 3.0)
    finally:
        scorer.close()


def test_verl_remote_a_stalled_sample_costs_only_itself_two_rounds(stall_server):
    scorer = VerlScorer(VerlRewardConfig(url=stall_server.url, kind="brrm", timeout_s=3.0, max_workers=4))
    try:
        for tag in ("remote-first", "remote-second"):
            _check_round(_verl_round(scorer, tag), 3.0)
    finally:
        scorer.close()
