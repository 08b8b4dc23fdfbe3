"""Tokens by turn (issue 48 item 3): each judgment's per-turn prompt, cached and generated tokens match what the
backend saw (its own counters and the tokenizer, on the tiny Qwen3), compose over swap orders, survive records (old
records load without them), and a backend that cannot tell its cache use says "not reported", never 0."""

from __future__ import annotations

import math

import pytest

from brrm.backends.transformers import TransformersBackend
from brrm.judges.brrm import BRRMConfig
from brrm.templates import brrm_turn1_content
from brrm.testing import brrm_judge
from brrm.types import Conversation, PairwiseJudgment, SamplingConfig, Status, Verdict
from brrm.types.cascade import CascadeDecision, CascadeRule, CascadeStage, CascadeWhy
from brrm.types.codec import judgment_from_dict
from brrm.types.usage import TurnTokens, merge_turns, token_line, token_report

PROMPTS = ["What is 17 * 3?", "Name a primary colour."]
A = ["51.", "Red."]
B = ["57.", "The capital of Peru is Lima."]
CONFIG = BRRMConfig(sampling=SamplingConfig(temperature=0, max_new_tokens=450), block_token_cap=8, thinking="off")


@pytest.fixture(scope="module")
def judged(tiny):
    """A pair judged in both orders on a fresh backend (prefix cache on), with the backend's counters."""
    model, tok = tiny
    backend = TransformersBackend(model, tok, model_id="tiny-qwen3", batch_size=8)
    judge = brrm_judge(backend, CONFIG)
    before = dict(backend.stats)
    results = judge.judge_pairs(PROMPTS[:1], A[:1], B[:1], swap=True)
    spent = {k: backend.stats[k] - before[k] for k in ("prefill_tokens", "cached_tokens", "generated_tokens",
                                                        "shared_prompt_tokens")}
    return results, spent, tok, judge


def test_turn_tokens_match_the_backends_counters(judged):
    results, spent, _, _ = judged
    ordered = [j for r in results for j in r.sub_judgments]
    assert len(ordered) == 2 and all(j.ok and len(j.turns) == 2 for j in ordered), [j.reason for j in ordered]
    turns = [t for j in ordered for t in j.turns]
    # every prompt token was either computed, served from the prefix cache, or shared with an identical prompt
    assert sum(t.prompt for t in turns) == spent["prefill_tokens"] + spent["cached_tokens"] + \
        spent["shared_prompt_tokens"]
    assert sum(t.cached or 0 for t in turns) == spent["cached_tokens"] and all(t.cached is not None for t in turns)
    # the backend also sampled each turn's end-of-turn token, which the turn's count leaves to turn 2's prompt
    assert sum(t.generated for t in turns) + len(turns) == spent["generated_tokens"]
    for j in ordered:
        assert j.prompt_tokens == sum(t.prompt for t in j.turns)
        assert j.generated_tokens == sum(t.generated for t in j.turns)


def test_turn_prompts_match_the_tokenizer(judged):
    """Turn 1's prompt is the chat template over the turn-1 message; turn 2's is turn 1's prompt, its generated
    tokens and the template's continuation (the turn-2 message), tokenized by the same tokenizer."""
    results, _, tok, judge = judged
    continuation = tok(judge.model.continuation, add_special_tokens=False)["input_ids"]
    for r, prompt, a, b in zip(results, PROMPTS[:1], A[:1], B[:1], strict=True):
        fwd, rev = r.sub_judgments
        for j, (first, second) in ((fwd, (a, b)), (rev, (b, a))):
            text = brrm_turn1_content(Conversation.from_prompt(prompt), first, second, CONFIG.context)
            p1 = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
            t1, t2 = j.turns
            assert t1.prompt == len(p1)
            assert t2.prompt == t1.prompt + t1.generated + len(continuation)
            assert t2.cached is not None and t2.cached >= t1.prompt  # turn 1's KV reused by turn 2
        # the pair's result sums both orders turn by turn
        assert r.turns == merge_turns(fwd.turns, rev.turns)


def test_turns_survive_a_record_and_old_records_load(judged):
    results, _, _, _ = judged
    r = results[0]
    assert judgment_from_dict(r.to_dict()).turns == r.turns
    old = r.to_dict()
    del old["turns"]
    for sub in old["sub_judgments"]:
        del sub["turns"]
    loaded = judgment_from_dict(old)
    assert loaded.turns == () and loaded.prompt_tokens == r.prompt_tokens
    report = token_report([loaded])  # an old record still counts, its cache use unknown
    assert report["tokens_per_judgment"]["cached"] is None
    assert report["tokens_per_judgment"]["prompt"]["mean"] == r.prompt_tokens


def test_a_backend_that_does_not_report_its_cache_says_so(tiny):
    """A scripted backend knows nothing of caches: its turns say "not reported" (None), and so does the report."""
    from brrm.backends.fake import FakeBackend

    backend = FakeBackend(tiny[1], lambda prompt, request: "no verdict here")
    (j,) = brrm_judge(backend, BRRMConfig(decoding="faithful")).judge_pairs(PROMPTS[:1], A[:1], B[:1], swap=False)
    assert j.status is Status.PARSE_FAILURE and len(j.turns) == 2
    assert all(t.cached is None and t.generated > 0 for t in j.turns)
    assert token_report([j])["tokens_per_judgment"]["cached"] is None and "cached not reported" in \
        token_line(token_report([j]))
    t = TurnTokens(prompt=10, generated=3)
    assert t.cached is None and (t + TurnTokens(5, 1, 4)).cached is None
    assert TurnTokens(5, 1, 4) + TurnTokens(5, 1, 5) == TurnTokens(10, 2, 9)
    with pytest.raises(Exception, match="cached"):
        TurnTokens(prompt=3, generated=0, cached=4)


def _j(turns, stage=None):
    decision = None
    if stage == "first":
        decision = CascadeDecision(CascadeStage.FIRST, CascadeWhy.CONFIDENT, CascadeRule.BAND, 0.1, 0.3)
    elif stage == "second":
        first = PairwiseJudgment(Verdict.A, Status.OK, turns=turns)
        decision = CascadeDecision(CascadeStage.SECOND, CascadeWhy.UNCERTAIN, CascadeRule.BAND, 0.1, 0.02,
                                   first=first)
    return PairwiseJudgment(Verdict.A, Status.OK, turns=turns, cascade=decision)


def test_token_report_means_p95_rate_and_cascade_shares():
    rows = [_j((TurnTokens(100, 10, 0), TurnTokens(120, 5, 110)), "first") for _ in range(3)]
    rows.append(_j((TurnTokens(200, 20, 50), TurnTokens(230, 10, 220)), "second"))
    report = token_report(rows, seconds=2.0)
    per = report["tokens_per_judgment"]
    assert per["total"]["mean"] == (3 * 235 + 460) / 4
    assert per["total"]["p95"] == pytest.approx(235 + 0.85 * 225)  # linear interpolation, as numpy's default
    assert per["cached"]["mean"] == (3 * 110 + 270) / 4
    assert report["by_turn"][0]["prompt"] == 125 and report["by_turn"][1]["generated"] == 6.25
    assert report["judgments_per_second"] == 2.0
    assert report["cascade"] == {"results": 4, "first": 0.75, "second": 0.25}
    line = token_line(report)
    assert "mean 291" in line and "2 judgments/s" in line and "first stage decided 75%" in line
    empty = token_report([], seconds=None)
    assert empty["tokens_per_judgment"] is None and empty["judgments_per_second"] is None
    assert "not measured" in token_line(empty) and not math.isnan(len(empty["by_turn"]))


def test_metrics_count_tokens_rate_and_cascade_stages():
    """``/metrics``' cost series over results of known tokens, with an injected clock for the rate."""
    from brrm.serve.metrics import RATE_WINDOW_S, Metrics

    now = [1000.0]
    metrics = Metrics(clock=lambda: now[0])
    rows = [_j((TurnTokens(100, 10, 0), TurnTokens(120, 5, 110)), "first") for _ in range(3)]
    rows.append(_j((TurnTokens(200, 20, None), TurnTokens(230, 10, 220)), "second"))
    metrics.count_costs(rows)
    text = metrics.render()[0].decode()
    assert "brrm_judgments_total 4.0" in text
    assert 'brrm_judgment_tokens_count{part="total"} 4.0' in text
    assert f'brrm_judgment_tokens_sum{{part="total"}} {3 * 235 + 460:.1f}' in text
    assert 'brrm_judgment_tokens_count{part="cached"} 3.0' in text  # the unreported one is not read as 0
    assert "brrm_judgment_cache_not_reported_total 1.0" in text
    assert 'brrm_cascade_decided_total{stage="first"} 3.0' in text
    assert 'brrm_cascade_decided_total{stage="second"} 1.0' in text
    assert f"brrm_judgments_per_second {4 / RATE_WINDOW_S}" in text
    now[0] += RATE_WINDOW_S + 1
    assert "brrm_judgments_per_second 0.0" in metrics.render()[0].decode()


def test_the_server_reports_what_it_judged(tiny):
    """A (scripted) judge served in process: ``/metrics`` counts the tokens of the judgments ``/v1/judge`` answered."""
    from fastapi.testclient import TestClient

    from brrm.backends.fake import FakeBackend
    from brrm.serve import ServerLimits, create_app

    judge = brrm_judge(FakeBackend(tiny[1], lambda prompt, request: "no verdict here"),
                       BRRMConfig(decoding="faithful"))
    with TestClient(create_app(judge, limits=ServerLimits(warmup=False), close_judge=False)) as client:
        reply = client.post("/v1/judge", json={"pairs": [{"prompt": PROMPTS[0], "response_a": A[0],
                                                          "response_b": B[0]}], "swap": True})
        assert reply.status_code == 200, reply.text
        (j,) = reply.json()["judgments"]
        text = client.get("/metrics").text
    total = sum(t["prompt"] + t["generated"] for t in j["turns"])
    assert "brrm_judgments_total 1.0" in text and f'brrm_judgment_tokens_sum{{part="total"}} {total:.1f}' in text
    assert "brrm_judgment_cache_not_reported_total 1.0" in text


@pytest.mark.parametrize(("usage", "cached"), [({"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}, 4),
                                               ({"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}}, 0),
                                               ({"prompt_tokens": 9}, None), (None, None)])
def test_an_openai_compatible_answer_reports_its_cache_use_or_says_it_did_not(usage, cached):
    """``usage.prompt_tokens_details.cached_tokens`` (vLLM's server with prefix caching) is read as given, 0
    included; an answer without it is "not reported"."""
    from brrm.backends.openai.backend import _parse_choice

    answer = {"choices": [{"token_ids": [5, 6], "finish_reason": "stop", "logprobs": None}]}
    if usage is not None:
        answer["usage"] = usage
    assert _parse_choice(answer).cached_tokens == cached


@pytest.mark.parametrize(("reported", "cached"), [(32, 32), (0, 0), (None, None), ("absent", None)])
def test_vllms_num_cached_tokens_is_read_as_reported(reported, cached):
    """``RequestOutput.num_cached_tokens``: None before the first step and absent on older vLLMs: "not reported"."""
    from types import SimpleNamespace

    from brrm.backends.vllm.request import phase_result

    completion = SimpleNamespace(token_ids=[5, 6], finish_reason="stop", stop_reason=None, logprobs=None)
    out = SimpleNamespace(outputs=[completion], prompt_token_ids=list(range(40)))
    if reported != "absent":
        out.num_cached_tokens = reported
    assert phase_result(out).cached_tokens == cached
