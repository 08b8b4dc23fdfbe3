"""``brrm serve --backend vllm`` (vLLM tier): concurrent clients coalesced into vLLM engine calls give the
verdicts of the transformers backend on the same tiny model.

The engine runs in the server process; several judge calls run at once (``--concurrency auto`` is 4 for vLLM) and
their requests share the engine's running batch, so a request never waits for an earlier call to finish.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("vllm")

from tests.serve_helpers import running_server  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

FLAGS = ["--temperature", "0", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off"]
PAIRS = [("What is 17 * 3?", "51.", "57."), ("Name a primary colour.", "Red.", "Blue."),
         ("Is 91 prime?", "No, 91 = 7 x 13.", "Yes."), ("Say hi.", "Hi!", "Bye.")]


def test_served_vllm_judge_equals_transformers(tiny_lm_dir, hf_backend, tmp_path):
    import brrm

    with running_server(["--model", tiny_lm_dir, "--kind", "brrm", "--backend", "vllm", "--dtype", "float32",
                         "--max-model-len", "4096", *FLAGS, "--max-wait-ms", "200"], tmp_path,
                        ready_timeout_s=300) as srv:

        async def clients() -> list[dict]:
            async with httpx.AsyncClient(base_url=srv.url, timeout=300) as c:
                answers = await asyncio.gather(*(c.post("/v1/judge", json={"pairs": [
                    {"prompt": p, "response_a": a, "response_b": b}]}) for p, a, b in PAIRS))
            # the wire format: model, backend, template hash and decoding once per reply, in its "provenance"
            return [{**r.json()["judgments"][0], "provenance": {**r.json()["provenance"],
                                                                **r.json()["judgments"][0]["provenance"]}}
                    for r in answers]

        served = asyncio.run(clients())
        metrics = httpx.get(f"{srv.url}/metrics").text
    reference = brrm.load(kind="brrm", backend=hf_backend, temperature=0, max_new_tokens=420, block_token_cap=8,
                          thinking="off").judge_pairs(*map(list, zip(*PAIRS, strict=True)))
    assert [j["status"] for j in served] == ["ok"] * len(PAIRS)
    assert [j["winner"] for j in served] == [j.winner.value for j in reference]
    assert all(j["provenance"]["backend"] == "vllm" for j in served)
    assert "brrm_batch_requests_count" in metrics
