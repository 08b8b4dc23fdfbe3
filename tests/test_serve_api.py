"""``brrm serve`` over a tiny real Bradley–Terry model: every endpoint through httpx and through the served
OpenAPI schema (schemathesis), authentication, validation errors, OpenRLHF's contract (N07, C23, C24) and a load
test of 200 concurrent clients. One real uvicorn server on 127.0.0.1, in this process
(:func:`tests.serve_helpers.serving_in_process`), serves the whole module.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import statistics
import time

import httpx
import pytest

from tests.serve_helpers import REPO, compare_body, http, serving_in_process

KEY = "test-key-0123456789"
CHATML_PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("serve-bt")
    model = save_tiny_qwen3(tmp / "rm", sequence_classification=True)
    with serving_in_process(["--model", str(model), "--max-items", "64"], tmp, api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
        yield c


def test_operational_endpoints(server, client):
    assert http().get(f"{server.url}/health").json() == {"status": "ok"}  # no key needed
    assert client.get("/ready").json()["ready"] is True
    (model,) = client.get("/v1/models").json()["data"]
    assert model["kind"] == "bt" and model["backend"] == "transformers" and model["recipe"]
    assert model["limits"]["auth"] is True and "api_key" not in model["limits"] and KEY not in json.dumps(model)
    assert model["limits"]["item_limit"] == 64 and model["limits"]["max_batch"] == 32
    assert "text/html" in client.get("/docs").headers["content-type"]
    schema = client.get("/openapi.json").json()
    for path in ("/v1/judge", "/v1/score", "/v1/rank", "/get_reward", "/compare"):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        ref = body["$ref"].rsplit("/", 1)[-1]
        assert schema["components"]["schemas"][ref]["examples"], path


def test_judge_score_rank_compare_results(client):
    pairs = [{"id": "p1", "prompt": "What is 2+2?", "response_a": "4", "response_b": "5", "label": "A"},
             {"id": "p2", "conversation": [{"role": "user", "content": "Name a colour."}], "response_a": "Red.",
              "response_b": "Red."}]
    r = client.post("/v1/judge", json={"pairs": pairs})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"]["kind"] == "bt"
    j1, j2 = body["judgments"]
    assert [j1["id"], j2["id"]] == ["p1", "p2"] and j1["status"] == j2["status"] == "ok"
    assert 0 <= j1["p_a"] <= 1 and j1["winner"] == ("A" if j1["p_a"] > 0.5 else "B" if j1["p_a"] < 0.5 else "tie")
    assert j1["label"] == "A" and j1["correct"] == (j1["winner"] == "A")
    assert j2["winner"] == "tie" and j2["p_a"] == pytest.approx(0.5)  # identical responses
    scored = client.post("/v1/score", json={"items": [{"id": "s", "prompt": "What is 2+2?", "response": "4"},
                                                      {"prompt": "What is 2+2?", "response": "5"}]}).json()["rewards"]
    assert [s["status"] for s in scored] == ["ok", "ok"] and scored[0]["id"] == "s"
    assert j1["p_a"] == pytest.approx(1 / (1 + math.exp(-(scored[0]["reward"] - scored[1]["reward"]))), abs=1e-5)
    ranked = client.post("/v1/rank", json={"prompt": "What is 2+2?", "responses": ["4", "5", "four"]}).json()
    result = ranked["result"]
    assert result["strategy"] == "scores" and sorted(result["ranking"]) == [0, 1, 2]
    assert result["rewards"][0]["reward"] == pytest.approx(scored[0]["reward"], abs=1e-5)
    compared = client.post("/compare", json=compare_body(["4", "5", "four"], "What is 2+2?")).json()
    assert len(compared["rewards"]) == 3 and compared["statuses"] == ["ok"] * 3
    assert len(compared["comparison_results"]) == 3 and compared["metrics"]["failed_comparisons"] == 0
    best = max(range(3), key=lambda k: result["rewards"][k]["reward"])
    assert max(range(3), key=lambda k: compared["rewards"][k]) == best


def test_api_key_required_on_every_endpoint_but_health(server):
    for path in ("/ready", "/v1/models", "/metrics", "/docs", "/openapi.json"):
        assert http().get(f"{server.url}{path}").status_code == 401, path
    bad = http().post(f"{server.url}/v1/judge", headers={"Authorization": "Bearer wrong-key-0000000"}, json={})
    assert bad.status_code == 401 and bad.json()["error"]["type"] == "unauthorized"
    assert bad.headers["www-authenticate"] == "Bearer"


def test_validation_errors_name_the_field_and_valid_values(client):
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a"}]})
    assert r.status_code == 422 and "pairs.0.response_b" in r.json()["error"]["message"]
    r = client.post("/v1/judge", json={"pairs": [{"conversation": [{"role": "robot", "content": "x"}],
                                                  "response_a": "a", "response_b": "b"}]})
    assert r.status_code == 422 and "'system', 'user', 'assistant' or 'tool'" in r.text
    r = client.post("/v1/rank", json={"prompt": "q", "responses": ["a", "b"], "strategy": "best"})
    assert r.status_code == 422 and "round_robin" in r.text
    r = client.post("/v1/judge", content=b'{"pairs": [', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["type"] == "validation_error"
    r = client.post("/v1/score", json={"items": [{"prompt": "q", "response": "a", "reference": "b"}]})
    assert r.status_code == 422 and "items[0].reference" in r.json()["error"]["message"]
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "conversation": [{"role": "user", "content": "q"}],
                                                  "response_a": "a", "response_b": "b"}]})
    assert r.status_code == 422 and "exactly one of 'conversation'" in r.text
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a", "response_b": "b"}],
                                       "options": {"max_new_tokens": 8}})
    message = r.json()["error"]["message"]
    assert r.status_code == 422 and message.startswith("options: option 'max_new_tokens' cannot be varied"), message
    assert "for BR-RM judges" in message, message
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a", "response_b": "b"}],
                                       "options": {"temperature": 0.5}})  # a field the options do not have
    assert r.status_code == 422 and r.json()["error"]["message"] == (
        "options.temperature: Extra inputs are not permitted; valid fields: max_new_tokens, max_total_tokens, "
        "seed, decoding")
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a", "response_b": "b", "why": 1}]})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(
        "pairs.0.why: Extra inputs are not permitted; valid fields: ") and "response_b, label" in r.text
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a", "response_b": "b"}], "colour": 1})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(
        "colour: Extra inputs are not permitted; valid fields: ") and "timeout_s, pairs, swap" in r.text
    r = client.post("/v1/judge", json={"pairs": [{"prompt": "q", "response_a": "a", "response_b": "b"}] * 65})
    assert r.status_code == 413 and r.json()["error"]["type"] == "too_many_items" and "--max-items" in r.text


def test_c24_score_needs_a_response_and_a_trailing_user_turn(client):
    turns = [{"role": "user", "content": "Translate 'good morning' to Spanish."},
             {"role": "assistant", "content": "Buenos días."}, {"role": "user", "content": "And 'good night'?"}]
    r = client.post("/v1/score", json={"items": [{"conversation": turns, "response": None}]})
    assert r.status_code == 422 and "items.0.response" in r.json()["error"]["message"]
    r = client.post("/v1/score", json={"items": [{"conversation": turns[:2], "response": "x"}]})
    assert r.status_code == 422 and "must end with a user or tool turn" in r.json()["error"]["message"]
    r = client.post("/v1/score", json={"items": [{"conversation": turns, "response": "Buenas noches."}]})
    assert r.status_code == 200 and r.json()["rewards"][0]["status"] == "ok"


def test_c23_system_message_and_consecutive_user_turns(client):
    turns = [{"role": "system", "content": "Answer in exactly one sentence."},
             {"role": "user", "content": "Why do cats purr?"}, {"role": "user", "content": "Keep it simple please."}]
    item = {"conversation": turns, "response": "Cats purr mostly to signal contentment."}
    first, second = (client.post("/v1/score", json={"items": [item]}) for _ in range(2))
    assert first.status_code == second.status_code == 200
    a, b = first.json()["rewards"][0], second.json()["rewards"][0]
    assert a["status"] == "ok" and a["reward"] == b["reward"]
    policies = [{**reply.json()["provenance"], **item["provenance"]}["policies"] for reply, item in
                ((first, a), (second, b))]
    assert policies[0] == policies[1]  # the rendering policy is recorded (once per reply: one item here)


def test_n07_get_reward_strips_padding_and_never_templates_twice(client):
    padded = "<|endoftext|><|endoftext|>" + CHATML_PROMPT + "4<|im_end|>\n<|endoftext|><|endoftext|><|endoftext|>"
    body = {"query": [padded, CHATML_PROMPT + "4<|im_end|>\n"], "prompts": [CHATML_PROMPT] * 2, "labels": ["4", "4"]}
    r = client.post("/get_reward", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["rewards"]) == len(out["scores"]) == 2 and out["statuses"] == ["ok", "ok"]
    assert abs(out["rewards"][0] - out["rewards"][1]) < 1e-4 and out["extra_logs"]["brrm_failed"] == [0.0, 0.0]
    direct = client.post("/v1/score", json={"items": [{"prompt": "What is 2+2?", "response": "4"}]}).json()
    assert out["rewards"][0] == pytest.approx(direct["rewards"][0]["reward"], abs=1e-5)  # same model input


def test_get_reward_failed_items_are_flagged_and_lengths_kept(client):
    body = {"query": [CHATML_PROMPT + "4<|im_end|>", "no prompt in here"], "prompts": [CHATML_PROMPT] * 2}
    out = client.post("/get_reward", json=body).json()
    assert len(out["rewards"]) == 2 and out["statuses"] == ["ok", "invalid_input"]
    assert out["rewards"][1] == 0.0 and out["extra_logs"]["brrm_failed"] == [0.0, 1.0]
    assert "does not contain its prompt" in out["reasons"][1]
    r = client.post("/get_reward", json={"query": ["a", "b"], "prompts": ["a"]})
    assert r.status_code == 422 and "prompts has 1 items but query has 2" in r.text


def test_openrlhf_client_contract_and_reward_func_module(server, monkeypatch):
    """OpenRLHF's remote-reward client needs ray, deepspeed and aiohttp (not importable here), so this client is
    written to its documented contract: POST query/prompts/labels, read ``scores`` (else ``rewards``) and
    ``extra_logs``, and make tensors of them as its sample generator does."""
    import torch

    queries = [CHATML_PROMPT + "4<|im_end|>\n", CHATML_PROMPT + "5<|im_end|>\n"]
    payload = {"query": queries, "prompts": [CHATML_PROMPT] * 2, "labels": ["4", "4"]}
    info = http().post(f"{server.url}/get_reward", json=payload, headers=server.headers, timeout=30).json()
    scores = info.get("scores") if info.get("scores") is not None else info["rewards"]
    reward = torch.tensor([info["rewards"]])
    assert reward.shape == (1, 2) and torch.isfinite(reward).all() and torch.tensor([scores]).shape == (1, 2)
    for value in info["extra_logs"].values():
        assert torch.tensor([value]).dtype == torch.float32
    monkeypatch.setenv("BRRM_URL", server.url)
    monkeypatch.setenv("BRRM_API_KEY", KEY)
    spec = importlib.util.spec_from_file_location("reward_func", REPO / "examples" / "openrlhf_reward_func.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # exactly how OpenRLHF loads --remote_rm_url path.py
    got = module.reward_func(queries, [CHATML_PROMPT] * 2, ["4", "4"])
    assert got["rewards"] == pytest.approx(info["rewards"]) and got["extra_logs"]["brrm_failed"] == [0.0, 0.0]


def test_body_and_field_limits(server, client):
    big = "x" * 200_001
    r = client.post("/v1/score", json={"items": [{"prompt": "q", "response": big}]})
    assert r.status_code == 413 and r.json()["error"]["field"] == "items[0].response"
    r = http().post(f"{server.url}/v1/judge", headers={**server.headers, "content-type": "application/json"},
                   content=b"[" + b" " * (9 << 20) + b"]", timeout=30)
    assert r.status_code == 413 and r.json()["error"]["type"] == "body_too_large"


@pytest.mark.slow  # a load test: the slow tier (pyproject.toml, README)
@pytest.mark.timeout(120)
def test_load_200_concurrent_clients(server):
    """200 concurrent single-pair clients: no 5xx, every answer a judgment or a 429, identical inputs give
    identical results whatever batch they shared (C05), p50/p99 latency reported."""
    pairs = [("What is 2+2?", "4", "5"), ("Name a colour.", "Red.", "Blue is a colour and so is red."),
             ("Say hi.", "Hi!", "Hello there, how are you today?"), ("2*3?", "6", "six")]

    async def one(client: httpx.AsyncClient, k: int) -> tuple[int, float, dict | None]:
        prompt, a, b = pairs[k % len(pairs)]
        started = time.perf_counter()
        r = await client.post("/v1/judge", json={"pairs": [{"id": str(k), "prompt": prompt, "response_a": a,
                                                            "response_b": b}]})
        return r.status_code, time.perf_counter() - started, r.json()

    async def run() -> list[tuple[int, float, dict | None]]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60, limits=limits) as c:
            return await asyncio.gather(*(one(c, k) for k in range(200)))

    results = asyncio.run(run())
    codes = [code for code, _, _ in results]
    assert set(codes) <= {200, 429}, codes
    by_input: dict[int, set[float]] = {}
    for k, (code, _, body) in enumerate(results):
        if code == 200:
            (jd,) = body["judgments"]
            assert jd["id"] == str(k) and jd["status"] == "ok"
            by_input.setdefault(k % len(pairs), set()).add(round(jd["p_a"], 6))
    assert codes.count(200) >= 190 and all(len(v) == 1 for v in by_input.values()), by_input
    latencies = sorted(t for _, t, _ in results)
    p50, p99 = statistics.median(latencies), latencies[int(0.99 * len(latencies)) - 1]
    print(f"\n200 concurrent /v1/judge: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
          f"{codes.count(429)} answered 429")
    metrics = http().get(f"{server.url}/metrics", headers=server.headers).text
    assert 'brrm_requests_total{code="200",endpoint="/v1/judge"}' in metrics and "brrm_batch_items_count" in metrics


@pytest.mark.timeout(300)
def test_schemathesis_no_server_errors(server):
    """Generated requests for every operation of the served schema: never a 5xx. What is sent depends on the schema
    alone (12 derandomized examples per operation, no time bound); a generated short ``timeout_s`` that a loaded
    machine misses answers 504 by design, which ``tests/fixtures/schemathesis.toml`` accepts, as
    ``tests/test_serve_schema.py`` does."""
    import hypothesis
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig.from_path(REPO / "tests" / "fixtures" / "schemathesis.toml")
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config, headers=server.headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 9, [op.label for op in operations]  # 5 judging routes, 4 operational ones
    calls = dict.fromkeys((op.label for op in operations), 0)
    for operation in operations:
        @hypothesis.settings(max_examples=12, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck))
        @hypothesis.given(case=operation.as_strategy())
        def check(case):
            calls[case.operation.label] += 1
            # a guard against a hang only: a tiny BT model answers in well under a second, loaded or not
            response = case.call(base_url=server.url, headers=server.headers, timeout=120)
            case.validate_response(response, checks=[not_a_server_error])

        check()
    assert all(calls.values()) and sum(calls.values()) >= 5 * len(operations), f"requests per operation: {calls}"
