"""The service layer through real ``brrm serve`` servers on 127.0.0.1 (issue 18 items 2, 3, 4, 9): in this process
(:func:`tests.serve_helpers.serving_in_process`: the CLI's own flags, app and uvicorn server on a real socket)
where the process is not what a test checks (a scripted stall ends with its test: ``released``); as a process
for a port in use (exit code before the load).

* a tiny real Bradley–Terry model: the poison test (30 good requests and one with a lone surrogate, sent
  concurrently to ``/v1/score``, ``/get_reward`` and ``/v1/judge``), operations (HEAD, bearer scheme, public model
  name, offline docs, JSON errors, labels 1/2, the ``timeout_s`` floor), provenance once per reply;
* scripted judges (``tests.service_helpers``, ``tests.serve_helpers``) for what a real model cannot do on demand:
  a batch that raises because of one item, a failing warm-up, a stall, and fixed timings for cost and overload.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.serve_helpers import REPO, compare_body, free_port, http, read_log, released, serving_in_process

pytestmark = pytest.mark.timeout(240)

KEY = "service-key-0123456789"
CHATML = "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def bt(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("service-bt")
    model = save_tiny_qwen3(tmp / "rm", sequence_classification=True)
    with serving_in_process(["--model", str(model), "--max-items", "64", "--max-wait-ms", "30"], tmp,
                            api_key=KEY) as srv:
        srv.model_dir = model
        yield srv


def _post_all(url: str, path: str, bodies: list[bytes]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=120, headers={"Authorization": f"Bearer {KEY}",
                                                                         "Content-Type": "application/json"}) as c:
            return await asyncio.gather(*(c.post(path, content=b) for b in bodies))

    return asyncio.run(run())


POISON = "caf\ud800e"  # a lone surrogate: valid JSON ("\ud800"), not valid Unicode text


def _poison_bodies(path: str) -> tuple[list[bytes], str]:
    """31 bodies (index 17 carries the lone surrogate) and the field the 422 must name."""
    def body(k: int, text: str) -> dict:
        if path == "/v1/score":
            return {"items": [{"prompt": f"Question {k}?", "response": text}]}
        if path == "/get_reward":
            return {"query": [CHATML.format(q=f"Question {k}?") + text + "<|im_end|>\n"]}
        return {"pairs": [{"prompt": f"Question {k}?", "response_a": text, "response_b": f"Other {k}."}]}

    field = {"/v1/score": "items[0].response", "/get_reward": "query[0]", "/v1/judge": "pairs[0].response_a"}[path]
    bodies = [json.dumps(body(k, POISON if k == 17 else f"Answer number {k}.")).encode() for k in range(31)]
    return bodies, field


def _value(path: str, reply: dict) -> float:
    if path == "/v1/score":
        return reply["rewards"][0]["reward"]
    if path == "/get_reward":
        return reply["rewards"][0]
    return reply["judgments"][0]["p_a"]


@pytest.mark.parametrize("path", ["/v1/score", "/get_reward", "/v1/judge"])
def test_poison_one_lone_surrogate_is_its_own_422_and_30_neighbours_get_their_solo_results(bt, path):
    bodies, field = _poison_bodies(path)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(headers=headers, timeout=60) as client:  # one client: each new one loads an SSL context
        solo = {k: _value(path, client.post(bt.url + path, content=b).json()) for k, b in enumerate(bodies) if k != 17}
    replies = _post_all(bt.url, path, bodies)
    codes = [r.status_code for r in replies]
    assert codes.count(200) == 30 and codes[17] == 422, codes
    error = replies[17].json()["error"]
    text = json.loads(bodies[17])
    text = {"/v1/score": lambda b: b["items"][0]["response"], "/get_reward": lambda b: b["query"][0],
            "/v1/judge": lambda b: b["pairs"][0]["response_a"]}[path](text)
    assert error["type"] == "invalid_text" and error["field"] == field and error["position"] == text.index("\ud800")
    assert field in error["message"] and "U+D800" in error["message"]
    for k, r in enumerate(replies):
        if k != 17:
            # its own solo result (to float32 rounding: bit-identity across batch shapes is issue 19 item 1)
            assert math.isfinite(solo[k]) and _value(path, r.json()) == pytest.approx(solo[k], abs=1e-6), k


def test_ops_head_bearer_scheme_public_name_offline_docs(bt):
    for path in ("/health", "/ready"):
        r = http().head(bt.url + path, headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.content == b"", path
    for scheme in ("bearer", "BEARER", "Bearer"):
        assert http().get(f"{bt.url}/v1/models", headers={"Authorization": f"{scheme} {KEY}"}).status_code == 200
    assert http().get(f"{bt.url}/v1/models", headers={"Authorization": f"Basic {KEY}"}).status_code == 401
    headers = {"Authorization": f"Bearer {KEY}"}
    (model,) = http().get(f"{bt.url}/v1/models", headers=headers).json()["data"]
    assert model["id"] == model["model"] == "rm"
    r = http().post(f"{bt.url}/v1/score", headers=headers, json={"items": [{"prompt": "Hi", "response": "q1"}] * 3})
    assert r.status_code == 200 and str(bt.model_dir.parent) not in r.text and r.json()["model"]["model"] == "rm"
    page = http().get(f"{bt.url}/docs", headers=headers)
    assert page.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in page.text and "cdn" not in page.text
    js = http().get(f"{bt.url}/docs/assets/swagger-ui-bundle.js", headers=headers)
    assert js.status_code == 200 and "SwaggerUIBundle" in js.text


def test_provenance_once_per_reply_items_carry_what_differs(bt):
    headers = {"Authorization": f"Bearer {KEY}"}
    items = [{"prompt": f"Q{k}?", "response": f"A{k}"} for k in range(4)]
    body = http().post(f"{bt.url}/v1/score", headers=headers, json={"items": items}).json()
    shared = body["provenance"]
    assert shared["model"] == "rm" and shared["backend"] == "transformers" and len(shared["template_hash"]) == 16
    assert {"fingerprint", "calibration", "policies", "sampling"} <= set(shared)  # the same for every item
    for reward in body["rewards"]:  # so each item keeps only its own seed (a record's, never lifted)
        assert set(reward["provenance"]) == {"seed"} and isinstance(reward["provenance"]["seed"], int)


def test_json_errors_say_what_and_where_and_content_type(bt):
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    full = json.dumps({"items": [{"prompt": "What is 2+2?", "response": "4"}]}, indent=1)
    r = http().post(f"{bt.url}/v1/score", headers=headers, content=full[:45].encode())
    message = r.json()["error"]["message"]
    assert r.status_code == 422 and re.search(r"line \d+, column \d+", message) and "cut short" in message, message
    assert '"45"' not in message
    r = http().post(f"{bt.url}/v1/score", headers={**headers, "Content-Type": "text/plain"}, content=full.encode())
    assert r.status_code == 422 and "Content-Type: application/json" in r.json()["error"]["message"]
    assert "text/plain" in r.json()["error"]["message"]
    latin = b'{"items": [{"prompt": "\xff\xfe", "response": "a"}]}'
    r = http().post(f"{bt.url}/v1/score", headers=headers, content=latin)
    assert r.status_code == 400 and r.json()["error"] == {
        "type": "invalid_json", "message": "body is not UTF-8 text, as JSON must be: invalid start byte at byte 23"}
    r = http().post(f"{bt.url}/v1/score", headers=headers, content=b"[" * 5000 + b"]" * 5000)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_json"
    assert "nest deeper than Python's recursion limit" in r.json()["error"]["message"]


def test_labels_1_2_and_the_timeout_floor(bt):
    headers = {"Authorization": f"Bearer {KEY}"}
    pairs = [{"prompt": "2+2?", "response_a": "4", "response_b": "5", "label": label} for label in ("1", 2, "A")]
    r = http().post(f"{bt.url}/v1/judge", headers=headers, json={"pairs": pairs})
    assert r.status_code == 200 and [j["label"] for j in r.json()["judgments"]] == ["A", "B", "A"]
    r = http().post(f"{bt.url}/v1/score", headers=headers,
                   json={"items": [{"prompt": "q", "response": "a"}], "timeout_s": 5e-324})
    assert r.status_code == 422 and "timeout_s" in r.json()["error"]["message"] and "0.1" in r.text
    r = http().post(f"{bt.url}/v1/score", headers={**headers, "Content-Type": "application/json"},
                   content=b'{"items": [{"prompt": "q", "response": "a"}], "timeout_s": NaN}')
    assert r.status_code == 422 and r.json()["error"]["message"] == "timeout_s: Input should be a finite number"


def test_a_port_in_use_fails_at_once_before_the_model_loads(tmp_path):
    port = free_port()
    building = tmp_path / "building.jsonl"  # slow_bt notes here that its (60 s) build began
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "BRRM_TEST_FAKE": json.dumps({"log": str(building)})}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        done = subprocess.run([sys.executable, "-m", "brrm", "serve", "--factory", "tests.service_helpers:slow_bt",
                               "--port", str(port)], cwd=REPO, env=env, capture_output=True, text=True, timeout=50)
    assert done.returncode != 0 and not building.exists()  # the model's build never began
    assert f"brrm: error: cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_a_batch_that_raises_is_bisected_onto_the_item_that_causes_it(tmp_path):
    args = ["--factory", "tests.service_helpers:raising_bt", "--max-wait-ms", "100", "--max-batch", "64"]
    with serving_in_process(args, tmp_path) as srv:
        bodies = [json.dumps({"items": [{"prompt": "p", "response": f"BOOM q{k}" if k == 5 else f"q{k}"}]}).encode()
                  for k in range(12)]

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=60,
                                         headers={"Content-Type": "application/json"}) as c:
                return await asyncio.gather(*(c.post("/v1/score", content=b) for b in bodies))

        replies = asyncio.run(run())
        assert [r.status_code for r in replies] == [200] * 12
        rewards = [r.json()["rewards"][0] for r in replies]
        assert [(x["status"], x["reward"]) for k, x in enumerate(rewards) if k != 5] == \
            [("ok", k + 0.5) for k in range(12) if k != 5]
        assert rewards[5]["status"] == "backend_error" and rewards[5]["reward"] is None
        assert "scripted batch failure on BOOM" in rewards[5]["reason"]
        assert re.search(r"^brrm_batch_requests_count (\S+)$", http().get(f"{srv.url}/metrics").text, re.M)


def test_a_failed_warmup_is_reported_and_retried_not_permanent(tmp_path):
    with serving_in_process(["--factory", "tests.service_helpers:flaky_bt"], tmp_path, ready_timeout_s=None) as srv:
        seen: list[str] = []
        end = time.monotonic() + 60  # a bound on a hang only: the loop ends on the first 200
        while time.monotonic() < end:
            try:
                r = http().get(f"{srv.url}/ready", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if r.status_code == 200:
                break
            seen.append(r.json()["reason"])
            time.sleep(0.1)
        assert r.status_code == 200 and r.json()["warmup_attempts"] == 3, r.text
        assert any("warm-up attempt 1 failed: BatchFailed" in s and "retrying in 1 s" in s for s in seen), seen
        assert any("cold-start failure" in s for s in seen)


# ------------------------------------------------------------------------------------------ cost and deadlines
@pytest.fixture(scope="module")
def brrm_fake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("service-fake")
    env = {"BRRM_TEST_FAKE": json.dumps({"log": str(tmp / "calls.jsonl")})}
    args = ["--factory", "tests.serve_helpers:fake_brrm", "--max-batch", "8", "--max-items", "600",
            "--max-judgments-per-request", "6000", "--max-queue", "10000", "--max-wait-ms", "5"]
    with serving_in_process(args, tmp, env=env) as srv:
        srv.calls = tmp / "calls.jsonl"
        yield srv


def _histogram(url: str, name: str) -> dict[str, float]:
    text = http().get(f"{url}/metrics").text
    return {le: float(v) for le, v in re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)}


def test_all_pairs_over_the_judgment_limit_is_413_naming_its_cost(brrm_fake):
    before = len(read_log(brrm_fake.calls))
    texts = [f"answer {k}" for k in range(512)]
    r = http().post(f"{brrm_fake.url}/compare", json={**compare_body(texts), "strategy": "all_pairs"}, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 413 and error["type"] == "too_costly" and error["cost"] == 512 * 511 // 2
    assert error["limit"] == 6000 and "130816 judgments" in error["message"] and "6000" in error["message"]
    assert "--max-judgments-per-request" in error["message"]
    r = http().post(f"{brrm_fake.url}/v1/rank", json={"prompt": "q", "responses": texts, "strategy": "round_robin"},
                   timeout=30)
    error = r.json()["error"]
    assert r.status_code == 413 and error["cost"] == 512 * 511 and f"{512 * 511} judgments" in error["message"]
    assert len(read_log(brrm_fake.calls)) == before  # nothing reached the model


def test_an_all_pairs_within_limits_is_split_into_calls_of_at_most_max_batch(brrm_fake):
    """190 pairs (every pair of 20 responses, within the limits) in calls of at most ``--max-batch`` 8: 23 full calls
    and one of 6."""
    before = _histogram(brrm_fake.url, "brrm_batch_items")
    n = 20
    pairs = n * (n - 1) // 2
    texts = [f"good {k}" if k == 0 else f"answer {k}" for k in range(n)]
    r = http().post(f"{brrm_fake.url}/compare", json={**compare_body(texts), "strategy": "all_pairs"}, timeout=200)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["comparison_results"]) == pairs and body["statuses"] == ["ok"] * n
    assert body["rewards"][0] == max(body["rewards"])  # "good" wins all of its comparisons
    after = _histogram(brrm_fake.url, "brrm_batch_items")
    calls = after["+Inf"] - before["+Inf"]
    assert calls == math.ceil(pairs / 8) and after["8.0"] - before["8.0"] == calls  # every call <= --max-batch


def test_overload_429_comes_before_the_body_is_parsed(tmp_path):
    """One job in the model and two queued (each held there by ``<<STALL>>`` until the test writes the release
    file): the queue is full, so 40 more requests, half of them invalid JSON, are each answered 429 while the held
    work is still there (states are read from ``/metrics``, never guessed from sleeps)."""
    release = tmp_path / "release"
    env = {"BRRM_TEST_FAKE": json.dumps({"release_file": str(release)})}
    args = ["--factory", "tests.serve_helpers:fake_brrm", "--max-batch", "1", "--max-queue", "2", "--max-wait-ms",
            "0", "--no-warmup"]
    pair = {"pairs": [{"prompt": "q", "response_a": "good", "response_b": "b"}]}
    with serving_in_process(args, tmp_path, env=env) as srv:

        async def run() -> tuple[list[httpx.Response], list[float], int, list[bool]]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
                def distinct(k: int) -> dict:  # identical requests in flight would share one job (single-flight)
                    return {"pairs": [{"prompt": f"q{k}", "response_a": "good", "response_b": "b <<STALL>>"}]}

                async def until(name: str, value: float) -> None:  # 60 s bounds a hang, not a speed
                    for _ in range(1200):
                        text = (await c.get("/metrics")).text
                        if re.search(rf"^{name} {value}$", text, re.M):
                            return
                        await asyncio.sleep(0.05)
                    raise AssertionError(f"{name} never reached {value}")

                fill = [asyncio.ensure_future(c.post("/v1/judge", json=distinct(0)))]
                await until("brrm_running_batches", 1.0)
                fill += [asyncio.ensure_future(c.post("/v1/judge", json=distinct(k))) for k in (1, 2)]
                await until("brrm_queue_depth", 2.0)  # one running, two queued: the queue is full

                async def timed(body: bytes) -> tuple[httpx.Response, float, bool]:
                    started = time.perf_counter()
                    r = await c.post("/v1/judge", content=body, headers={"Content-Type": "application/json"})
                    return r, time.perf_counter() - started, all(f.done() for f in fill)

                refused = await asyncio.gather(*(timed(b"{not json" if k % 2 else json.dumps(pair).encode())
                                                 for k in range(40)))
                release.write_text("")  # the held work may now finish
                served = await asyncio.gather(*fill)
                return ([r for r, _, _ in refused], [t for _, t, _ in refused],
                        sum(r.status_code == 200 for r in served), [d for _, _, d in refused])

        refused, seconds, ok, queue_drained = asyncio.run(run())
    assert ok == 3
    assert [r.status_code for r in refused] == [429] * 40  # invalid bodies too: answered before parsing
    assert all(int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["type"] == "queue_full" for r in refused)
    p99 = sorted(seconds)[int(0.99 * len(seconds))]
    print(f"\n429 latency under overload: max {max(seconds) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    assert not any(queue_drained)  # every 429 came while the work it would queue behind was held: none waited


def test_a_stalled_call_past_its_deadline_frees_its_slot_within_a_healthy_jobs_deadline(tmp_path):
    """On a reentrant backend (one that takes concurrent calls) with one call slot, the stalled call is abandoned and
    the healthy request runs beside it (a backend that is not reentrant never does: tests/test_fault_kinds.py)."""
    args = ["--factory", "tests.serve_helpers:fake_brrm", "--max-batch", "1", "--max-wait-ms", "0",
            "--stall-timeout", "30", "--no-warmup", "--concurrency", "1"]
    release = tmp_path / "release"  # the stall ends when the test is done (the judge's thread is this process's)
    env = {"BRRM_TEST_FAKE": json.dumps({"concurrent": True, "release_file": str(release)})}
    with serving_in_process(args, tmp_path, env=env) as srv, released(release):

        async def run() -> tuple[httpx.Response, httpx.Response, float]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
                stalled = asyncio.ensure_future(c.post("/v1/judge", json={"timeout_s": 1, "pairs": [
                    {"prompt": "q", "response_a": "<<STALL>>", "response_b": "b"}]}))
                await asyncio.sleep(0.2)
                started = time.perf_counter()
                healthy = await c.post("/v1/judge", json={"timeout_s": 4, "pairs": [
                    {"prompt": "q", "response_a": "good", "response_b": "b"}]})
                return await stalled, healthy, time.perf_counter() - started

        stalled, healthy, took = asyncio.run(run())
        abandoned = re.search(r"^brrm_abandoned_total (\S+)$", http().get(f"{srv.url}/metrics").text, re.M)
    assert stalled.status_code == 504 and stalled.json()["error"]["type"] == "deadline_exceeded"
    # a 200 is the server's word that it finished within its own deadline (timeout_s 4: else 504)
    assert healthy.status_code == 200 and healthy.json()["judgments"][0]["winner"] == "A", took
    assert abandoned and float(abandoned.group(1)) == 1  # counted
