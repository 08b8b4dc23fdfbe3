"""Pinned logprob semantics: P(A ≻ B) is the softmax of the raw verdict logits whatever the judge's temperature,
every result records the semantics it used, and aggregates refuse to mix ``unknown`` with known ones.

The server here is an OpenAI-compatible completions server that reports logprobs *processed* by the request's
temperature (what vLLM's ``--logprobs-mode processed_logprobs`` does, and what third-party servers may do): with
raw verdict logits (1, 0) it reports P = σ(1 / T), 0.881 at the judge's T = 0.5, where the raw logits give 0.731.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import brrm
from brrm.backends.base import Completion, GenerationRequest
from brrm.backends.blackbox.phases import pick_choice
from brrm.backends.fake import FakeBackend
from brrm.backends.options import OpenAIOptions, set_options
from brrm.bench.core import BenchItem, ItemResult, Pair, Shown
from brrm.bench.protocol import score_both
from brrm.calibration.data import observations
from brrm.constraints import Choice, Program
from brrm.errors import ConfigError
from brrm.judges.brrm import digit_probability
from brrm.types import SamplingConfig, Status, Verdict, summarize
from brrm.types.codec import judgment_from_dict, provenance_from_dict
from brrm.types.results import PairwiseJudgment, Provenance
from tests.completions_stub import CompletionsServer

RAW = (1.0, 0.0)
"""The raw logits of the verdict options "1" and "2" at the verdict position."""


class ProcessedLogprobsServer(CompletionsServer):
    """Answers ``POST /v1/completions`` for a one-token choice: the options' logprobs after temperature scaling
    (log-softmax of raw / T over the allowed tokens), the most likely option as the token."""

    def __init__(self, option_ids: tuple[int, int]) -> None:
        raw = dict(zip(option_ids, RAW, strict=True))

        def answer(body: dict) -> dict:
            lps = processed(raw, body["allowed_token_ids"], float(body["temperature"]))
            return {"choices": [{"text": "", "token_ids": [max(lps, key=lps.__getitem__)], "finish_reason": "length",
                                 "logprobs": {"top_logprobs": [{f"token_id:{i}": v for i, v in lps.items()}]}}],
                    "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}}

        super().__init__(answer)


def processed(raw: dict[int, float], allowed: list[int], temperature: float) -> dict[int, float]:
    """log-softmax(raw / T) over ``allowed`` (T = 0 is greedy: scaled as T = 1, as vLLM does)."""
    t = temperature if temperature > 0 else 1.0
    top = max(raw[i] / t for i in allowed)
    norm = top + math.log(sum(math.exp(raw[i] / t - top) for i in allowed))
    return {i: raw[i] / t - norm for i in allowed}


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


def _verdict_request(tok, seed: int = 3) -> GenerationRequest:
    prompt = tuple(tok.encode("Which is better? \\boxed{"))
    return GenerationRequest(prompt, 4, seed=seed, program=Program((Choice(("1", "2"), after="\\boxed{"),)))


@pytest.mark.parametrize("temperature", [0.5, 0.0, 1.3])
def test_p_from_a_server_reporting_processed_logprobs_is_the_raw_logit_value(tok, temperature):
    from brrm.backends.openai import OpenAIBackend

    backend = OpenAIBackend(["http://127.0.0.1:9/v1"], "tiny", tok, max_context=4096, http_retries=0)
    ids = (backend.tokens.label("1", "\\boxed{"), backend.tokens.label("2", "\\boxed{"))
    server = ProcessedLogprobsServer(ids)
    try:
        backend = OpenAIBackend([server.url], "tiny", tok, max_context=4096, http_retries=0)
        [comp] = backend.generate([_verdict_request(tok)], temperature=temperature, top_p=0.9, top_k=5)
        backend.close()
    finally:
        server.close()
    assert comp.finish_reason == "stop", comp.error
    p, _ = digit_probability(comp)
    assert p == pytest.approx(1 / (1 + math.exp(-1.0)), abs=1e-4)  # 0.7311, the raw logits' softmax
    [body] = server.bodies
    assert (body["temperature"], body["top_p"], body["top_k"]) == (1.0, 1.0, -1)  # the verdict in its own T=1 step
    # what the verdict step at the judge's temperature would have reported (the bug: 0.881 at T = 0.5)
    at_t = processed(dict(zip(ids, RAW, strict=True)), list(ids), 0.5)
    assert 1 / (1 + math.exp(at_t[ids[1]] - at_t[ids[0]])) == pytest.approx(0.8808, abs=1e-4)


def test_the_option_is_picked_with_the_judges_decoding():
    values = (1.0, 0.0)
    assert {pick_choice(values, s, 0.0) for s in range(50)} == {0}  # greedy: the argmax
    assert pick_choice((0.0, 2.0, 2.0), 7, 0.0) == 1  # ties: the first
    share = sum(pick_choice(values, s, 1.0) == 0 for s in range(4000)) / 4000
    assert share == pytest.approx(1 / (1 + math.exp(-1.0)), abs=0.025)  # a sample of softmax(values)
    cold = sum(pick_choice(values, s, 0.5) == 0 for s in range(4000)) / 4000
    assert cold == pytest.approx(1 / (1 + math.exp(-2.0)), abs=0.02)  # of softmax(values / T)
    assert {pick_choice(values, s, 1.0, top_p=0.5) for s in range(200)} == {0}  # the nucleus holds option 0 only
    assert {pick_choice(values, s, 1.0, top_k=1) for s in range(200)} == {0}
    assert pick_choice(values, 11, 1.0) == pick_choice(values, 11, 1.0)  # seeded


def test_the_openai_backend_declares_its_semantics(tok):
    from brrm.backends.openai import OpenAIBackend

    url = ["http://127.0.0.1:9/v1"]
    assert OpenAIBackend(url, "m", tok, max_context=64).capabilities.logprob_semantics == "unknown"
    for mode in ("raw_logits", "raw_logprobs", "processed_logprobs"):
        assert OpenAIBackend(url, "m", tok, max_context=64, logprobs_mode=mode).capabilities.logprob_semantics == "raw"
    with pytest.raises(ConfigError, match="logprobs_mode"):
        OpenAIBackend(url, "m", tok, max_context=64, logprobs_mode="softmaxed")
    with pytest.raises(ConfigError, match="logprobs_mode"):
        OpenAIOptions(logprobs_mode="softmaxed")
    assert set_options(OpenAIOptions(logprobs_mode="raw_logits")) == {"logprobs_mode": "raw_logits"}


T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: wrong\n[End of Quality Analysis for Response 2]")


def _judgments(tok, semantics: str) -> list[PairwiseJudgment]:
    def script(prompt, request):
        turn2 = "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1]
        if not turn2:
            return T1
        text = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"
        return Completion(tuple(tok.encode(text)), text, "stop", choice_logits=(RAW,))  # the verdict digit's logits

    backend = FakeBackend(tok, script)
    backend.capabilities = replace(backend.capabilities, logprob_semantics=semantics)
    judge = brrm.load(kind="brrm", backend=backend, decoding="faithful")
    return judge.judge_pairs(["What is 2+2?"] * 2, ["4", "four"], ["5", "five"], labels=["A", "A"])


def test_results_record_their_semantics_and_aggregates_refuse_to_mix(tok):
    raw, unknown = _judgments(tok, "raw"), _judgments(tok, "unknown")
    assert all(j.status is Status.OK and j.p_a == pytest.approx(0.7311, abs=1e-4) for j in raw + unknown)
    assert {j.provenance.logprob_semantics for j in raw} == {"raw"}
    assert {j.provenance.logprob_semantics for j in unknown} == {"unknown"}
    assert judgment_from_dict(unknown[0].to_dict()).provenance.logprob_semantics == "unknown"
    assert summarize(raw).total == 2 and summarize(unknown).total == 2  # one kind at a time is fine
    with pytest.raises(ConfigError, match=r"mixes 2 results of unknown logprob semantics .* 2 raw"):
        summarize(raw + unknown)
    rows = [{**j.to_dict(), "label": "A", "line": k, "content_key": f"k{k}"} for k, j in enumerate(raw + unknown)]
    with pytest.raises(ConfigError, match="the calibration fit mixes"):
        observations(rows)
    assert len(observations(rows[:2]).items) == 2
    item = BenchItem("x", "s", "q", ("a", "b"), (Pair(0, 1, Verdict.A),))
    results = [ItemResult(replace(item, id=str(k)), (Shown(0, False, j),)) for k, j in enumerate(raw + unknown)]
    with pytest.raises(ConfigError, match="the bench report mixes"):
        score_both(None, results, None, None)  # type: ignore[arg-type]


def test_stored_results_without_semantics():
    prov = Provenance("m", "openai", "", SamplingConfig(), 0).to_dict()
    del prov["logprob_semantics"]
    assert provenance_from_dict(prov).logprob_semantics == "unknown"  # sent at the judge's temperature then
    assert provenance_from_dict({**prov, "backend": "transformers"}).logprob_semantics == "raw"
    with pytest.raises(ConfigError, match="logprob_semantics"):
        Provenance("m", "openai", "", SamplingConfig(), 0, logprob_semantics="cooked")
