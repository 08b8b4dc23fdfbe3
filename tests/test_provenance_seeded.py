"""Provenance says whether the backend honoured the seed (issue 47, item 4): ``seeded`` is True for the in-process
transformers backend, which seeds each item's sampler streams itself, and False for an OpenAI-compatible server,
which is sent the seed but may ignore it. Records written before the field load with the backends' behaviour then.

The OpenAI-compatible server is a stub that answers the BR-RM protocol's two turns (a real server is tested in
tests/vllm); the transformers backend runs a tiny random Bradley–Terry head (brrm.testing).
"""

from __future__ import annotations

import pytest

import brrm
from brrm.types import SamplingConfig, Status
from brrm.types.codec import judgment_from_dict, provenance_from_dict, reward_from_dict
from brrm.types.results import Provenance
from tests.completions_stub import CompletionsServer

T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: wrong\n[End of Quality Analysis for Response 2]")
T2 = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"


def brrm_server(tok) -> CompletionsServer:
    """A completions server answering a BR-RM turn 1, or turn 2 when the last user turn asks for the ranking."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def answer(body: dict) -> dict:
        last_user = tok.decode(body["prompt"]).rsplit("<|im_start|>user", 1)[-1]
        text = T2 if "[The Begin of Analysis on Response 1]" in last_user else T1
        return {"choices": [{"text": text, "token_ids": [*tok.encode(text), eos], "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(body["prompt"]), "prompt_tokens_details": {"cached_tokens": 0}}}

    return CompletionsServer(answer)


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


def test_an_openai_compatible_server_records_seeded_false(tok):
    from brrm.backends.openai import OpenAIBackend

    server = brrm_server(tok)
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
