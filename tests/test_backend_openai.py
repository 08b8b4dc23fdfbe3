"""The OpenAI-compatible backend's transport against a tiny local HTTP server stub (no vllm needed).

The stub stands in for a server's *transport* behaviour only (status codes, delays, dropped ports, a
server that ignores fields); model behaviour is tested against a real vLLM server in tests/vllm.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brrm.backends.base import GenerationRequest
from brrm.constraints import Pattern, Program
from brrm.errors import BackendUnavailable, ConfigError
from brrm.types import Status

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "http_retries": 3, "timeout_s": 5.0}


class Stub:
    """A scripted completions server: each POST takes the next (status, delay_s, body) from ``script``."""

    def __init__(self, eos: int) -> None:
        self.eos = eos
        self.script: list[tuple[int, float, object]] = []
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.retry_after: str | None = None  # sent with every error answer when set (a 429's is "0" otherwise)
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no delayed-ACK wait between them

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body, headers=()):
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"data": [{"id": "tiny", "max_model_len": 4096}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.requests.append(body)
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    status, delay, answer = stub.script.pop(0) if stub.script else (200, 0.0, None)
                try:
                    time.sleep(delay)
                    if answer is None:
                        answer = stub.ok([5, 6, 7])
                    headers = [("Retry-After", stub.retry_after)] if stub.retry_after is not None and status != 200 \
                        else [("Retry-After", "0")] if status == 429 else []
                    self._send(status, answer if status == 200 else {"error": {"message": answer}}, headers)
                finally:
                    with stub.lock:
                        stub.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def ok(self, ids: list[int], finish: str = "stop") -> dict:
        token_ids = [*ids, self.eos] if finish == "stop" else ids
        return {"choices": [{"text": "", "token_ids": token_ids, "finish_reason": finish}],
                "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture()
def stub(tok):
    s = Stub(tok.convert_tokens_to_ids("<|im_end|>"))
    yield s
    s.close()


def _backend(urls, tok, **kw):
    from brrm.backends.openai import OpenAIBackend

    return OpenAIBackend(urls, "tiny", tok, max_context=4096, **{**FAST, **kw})


REQ = GenerationRequest((1, 2, 3), 8, seed=4)


def test_503_then_200_is_retried(stub, tok):
    stub.script = [(503, 0.0, "overloaded"), (200, 0.0, None)]
    with _backend([stub.url], tok) as be:
        (c,) = be.generate([REQ], temperature=0)
    assert c.finish_reason == "stop" and c.token_ids == (5, 6, 7) and len(stub.requests) == 2
    body = stub.requests[0]
    assert body["prompt"] == [1, 2, 3] and body["seed"] == 4 and body["return_token_ids"] is True
    assert body["temperature"] == 0 and body["top_k"] == -1 and "guided_regex" not in body


def test_an_upstreams_retry_after_is_waited_never_cut_short(stub, tok):
    """A 503 or 429 with ``Retry-After`` is retried no sooner than it asks (seconds or an HTTP date), however short
    the backend's own backoff; one asking for longer than the request's timeout fails at once, not retried early."""
    from brrm.backends.openai.transport import Transport, retry_after_s

    transport = Transport([stub.url], timeout_s=5.0, max_retries=3, backoff_s=0.01, max_backoff_s=0.05, api_key=None)
    assert transport._delay(0, "3") == 3.0 and transport._delay(2, "0.5") == 0.5
    assert transport._delay(0, "600") is None and 0.0075 <= (transport._delay(0, None) or 0) <= 0.0125
    assert retry_after_s("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
    assert retry_after_s("soon") is None and retry_after_s("-1") is None
    stub.retry_after = "600"
    stub.script = [(503, 0.0, "upstream overloaded"), (200, 0.0, None)]
    with _backend([stub.url], tok) as be:
        (c,) = be.generate([REQ], temperature=0)
    assert len(stub.requests) == 1 and c.finish_reason == "error"
    assert "HTTP 503" in c.error and "retry after 600" in c.error, c.error


def test_429_and_a_timeout_are_retried(stub, tok):
    stub.script = [(429, 0.0, "slow down"), (200, 1.0, None), (200, 0.0, None)]
    with _backend([stub.url], tok, timeout_s=0.3) as be:
        (c,) = be.generate([REQ], temperature=0)
    assert c.finish_reason == "stop" and len(stub.requests) == 3


def test_permanent_500_is_a_backend_error_for_every_judgment(stub, tok):
    from brrm.judges.brrm import BRRMConfig
    from brrm.testing import brrm_judge

    stub.script = [(500, 0.0, "boom")] * 100
    with _backend([stub.url], tok, http_retries=2) as be:
        (c,) = be.generate([REQ], temperature=0)
        assert c.finish_reason == "error" and "HTTP 500: boom" in c.error and "after 3 attempts" in c.error
        results = brrm_judge(be, BRRMConfig()).judge_pairs(["q1", "q2"], ["a", "b"], ["c", "d"])
    assert [r.status for r in results] == [Status.BACKEND_ERROR] * 2
    assert all("HTTP 500" in r.reason for r in results)


def test_400_is_not_retried_and_keeps_the_servers_message(stub, tok):
    stub.script = [(400, 0.0, "Grammar error: look-around is not supported")]
    with _backend([stub.url], tok) as be:
        good, bad = be.generate([REQ, REQ], temperature=0)
    assert len(stub.requests) == 2 and sum(c.finish_reason == "error" for c in (good, bad)) == 1
    failed = good if good.finish_reason == "error" else bad
    assert "HTTP 400" in failed.error and "look-around" in failed.error


def test_a_dead_server_fails_over_to_the_next(stub, tok):
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with _backend([dead, stub.url], tok) as be:
        outs = be.generate([REQ] * 4, temperature=0)
    assert all(c.finish_reason == "stop" for c in outs) and len(stub.requests) == 4


def test_concurrency_is_bounded(stub, tok):
    stub.script = [(200, 0.05, None)] * 12
    with _backend([stub.url], tok, max_concurrency=3) as be:
        outs = be.generate([REQ] * 12, temperature=0)
    assert all(c.finish_reason == "stop" for c in outs)
    assert 2 <= stub.max_in_flight <= 3


def test_a_server_that_ignores_structured_outputs_is_caught(stub, tok):
    ids = list(tok.encode("free text", add_special_tokens=False))
    stub.script = [(200, 0.0, stub.ok(ids))]
    with _backend([stub.url], tok) as be:
        (c,) = be.generate([GenerationRequest((1, 2), 20, program=Program((Pattern(r"[12]\n"),)))], temperature=0)
    assert c.finish_reason == "error" and "did not apply the structured-output request" in c.error
    assert stub.requests[0]["structured_outputs"] == {"regex": r"[12]\n"}


def test_an_answer_without_token_ids_is_an_error(stub, tok):
    stub.script = [(200, 0.0, {"choices": [{"text": "hi", "finish_reason": "stop"}]})]
    with _backend([stub.url], tok) as be:
        (c,) = be.generate([REQ], temperature=0)
    assert c.finish_reason == "error" and "return_token_ids" in c.error


def test_from_options_picks_the_served_model_and_context(stub, tok, tmp_path):
    from brrm.backends.openai import OpenAIBackend
    from brrm.testing import save_tokenizer

    path = str(save_tokenizer(tok, tmp_path / "tok"))
    be = OpenAIBackend.connect(path, base_urls=[stub.url.removesuffix("/v1")])
    assert (be.model, be.max_context) == ("tiny", 4096) and be.transport.base_urls == [stub.url]
    be.close()
    with pytest.raises(ConfigError, match="base-url"):
        OpenAIBackend.connect(path)
    with pytest.raises(ConfigError, match="http"):
        OpenAIBackend.connect(path, base_urls=["127.0.0.1:8000"])


def test_from_options_reports_an_unreachable_server(tok, tmp_path):
    import socket

    from brrm.backends.openai import OpenAIBackend

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(BackendUnavailable, match="no OpenAI-compatible server"):
        OpenAIBackend.connect("unused", base_urls=[dead])


def test_the_vllm_backend_without_vllm_names_the_install():
    import importlib.util

    import brrm

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(BackendUnavailable, match="vllm") as info:
        brrm.load("some/model", kind="brrm", backend="vllm")
    assert "pip install" in info.value.hint
