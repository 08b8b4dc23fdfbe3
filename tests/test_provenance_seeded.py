"""Provenance says whether the backend honoured the seed (issue 47, item 4): ``seeded`` is True for the in-process
transformers backend, which seeds each item's sampler streams itself, and False for an OpenAI-compatible server,
which is sent the seed but may ignore it. Records written before the field load with the backends' behaviour then.

The OpenAI-compatible server is a stub that answers the BR-RM protocol's two turns (a real server is tested in
tests/vllm); the transformers backend runs a tiny random Bradley–Terry head (brrm.testing).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import brrm
from brrm.types import SamplingConfig, Status
from brrm.types.codec import judgment_from_dict, provenance_from_dict, reward_from_dict
from brrm.types.results import Provenance

T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: wrong\n[End of Quality Analysis for Response 2]")
T2 = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"


class BRRMServer:
    """``POST /v1/completions`` answering a BR-RM turn 1, or turn 2 when the last user turn asks for the ranking;
    each request body is kept (the seed it carried)."""

    def __init__(self, tok) -> None:
        self.bodies: list[dict] = []
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                last_user = tok.decode(body["prompt"]).rsplit("<|im_start|>user", 1)[-1]
                text = T2 if "[The Begin of Analysis on Response 1]" in last_user else T1
                ids = [*tok.encode(text), eos]
                data = json.dumps({"choices": [{"text": text, "token_ids": ids, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": len(body["prompt"]),
                                             "prompt_tokens_details": {"cached_tokens": 0}}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


def test_an_openai_compatible_server_records_seeded_false(tok):
    from brrm.backends.openai import OpenAIBackend

    server = BRRMServer(tok)
    try:
        backend = OpenAIBackend([server.url], "tiny", tok, max_context=4096, http_retries=0)
        with brrm.load(kind="brrm", backend=backend, decoding="faithful", temperature=1.0, seed=5) as judge:
            [j] = judge.judge_pairs(["What is 2+2?"], ["4"], ["5"], swap=False)
    finally:
        server.close()
    assert j.status is Status.OK, j.reason
    assert j.provenance.backend == "openai" and j.provenance.seeded is False
    assert j.to_dict()["provenance"]["seeded"] is False
    assert judgment_from_dict(j.to_dict()).provenance.seeded is False
    assert server.bodies and all("seed" in b for b in server.bodies)  # the seed is sent; it may be ignored


def test_the_transformers_backend_records_seeded_true(tmp_path):
    from brrm.testing import save_tiny_qwen3

    rm = save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)
    with brrm.load(str(rm), kind="bt", device="cpu") as judge:
        [r] = judge.score(["What is 2+2?"], ["4"])
    assert r.status is Status.OK and r.provenance.backend == "transformers" and r.provenance.seeded is True
    assert r.to_dict()["provenance"]["seeded"] is True
    assert reward_from_dict(r.to_dict()).provenance.seeded is True


@pytest.mark.parametrize(("backend", "seeded"), [("openai", False), ("replay", False), ("transformers", True),
                                                 ("vllm", True), ("fake", True)])
def test_records_written_before_the_field_load_with_what_their_backend_did(backend, seeded):
    stored = Provenance("m", backend, "", SamplingConfig(), 0).to_dict()
    del stored["seeded"]
    assert provenance_from_dict(stored).seeded is seeded
    assert provenance_from_dict({**stored, "seeded": not seeded}).seeded is (not seeded)  # a stored value wins
