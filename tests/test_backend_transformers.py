"""The transformers backend on the tiny real Qwen3: batch invariance, padding, KV reuse, constraints."""

from __future__ import annotations

import pytest
import torch

from brrm.backends.base import GenerationRequest
from brrm.backends.transformers import PrefixCache, TransformersBackend
from brrm.constraints import Choice, Pattern, Program, Think
from brrm.errors import ConfigError
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge
from brrm.types import SamplingConfig

PROMPTS = ["hello there", "a much longer prompt about the world and its many people " * 3, "x",
           "Information Accuracy matters most here", "Write a function that adds two numbers."]


def _ids(tok, text):
    return tuple(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False))


def _requests(tok, n_new=10, program=None):
    return [GenerationRequest(_ids(tok, p), n_new, seed=k, program=program) for k, p in enumerate(PROMPTS)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batch_size_does_not_change_tokens(tiny, temperature):
    model, tok = tiny
    reqs = _requests(tok, 12)
    batched = TransformersBackend(model, tok, batch_size=4).generate(reqs, temperature=temperature)
    single = TransformersBackend(model, tok, batch_size=1).generate(reqs, temperature=temperature)
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert all(len(c.token_ids) == 12 and c.finish_reason == "length" for c in batched)
    # reversed order inside the batch gives the same per-request result
    rev = TransformersBackend(model, tok, batch_size=5).generate(reqs[::-1], temperature=temperature)
    assert [c.token_ids for c in rev[::-1]] == [c.token_ids for c in single]


def test_greedy_matches_model_generate(tiny):
    model, tok = tiny
    ids = _ids(tok, PROMPTS[1])
    (ours,) = TransformersBackend(model, tok).generate([GenerationRequest(ids, 16)], temperature=0)
    ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                         pad_token_id=tok.pad_token_id)
    assert list(ours.token_ids) == ref[0, len(ids):].tolist()


def test_prefix_cache_reuses_only_entries_whose_prompt_the_new_prompt_extends():
    cache = PrefixCache(capacity=2)
    kv = [(torch.arange(10.0).reshape(1, 10, 1), torch.arange(10.0).reshape(1, 10, 1))]
    cache.put((1, 2, 3, 4, 5, 6, 7, 8, 9, 10), kv, prompt_length=3)  # prompt 1 2 3, then 7 generated ids
    assert cache.take((1, 2, 9, 9)) == (0, None)  # shares 2 ids with the prompt only: another record's prefix
    n, got = cache.take((1, 2, 3, 4, 99, 100))  # extends the prompt and part of the generation: own turn
    assert n == 4 and got[0][0].shape == (1, 4, 1) and got[0][0].flatten().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert cache.take((1, 2, 3, 4, 99, 100)) == (0, None)  # evicted on use


def test_identical_sequences_keep_one_prefix_cache_entry_each():
    """Duplicate items in one chunk (a GRPO group's repeated response) each reuse their own turn 1."""
    cache = PrefixCache(capacity=2)
    kv = [(torch.zeros(1, 4, 1), torch.zeros(1, 4, 1))]
    cache.put((1, 2, 3, 4), kv, prompt_length=2)
    cache.put((1, 2, 3, 4), kv, prompt_length=2)
    assert cache.take((1, 2, 3, 4, 5))[0] == 4 and cache.take((1, 2, 3, 4, 5))[0] == 4
    assert cache.take((1, 2, 3, 4, 5)) == (0, None)
    for _ in range(3):
        cache.put((7, 8), kv, prompt_length=1)
    assert cache.size == 2  # capacity counts entries, not keys


def test_kv_reuse_gives_identical_turn2_tokens(tiny):
    model, tok = tiny
    cfg = BRRMConfig(decoding="faithful", sampling=SamplingConfig(temperature=0, max_new_tokens=24))
    reuse = TransformersBackend(model, tok, batch_size=4, prefix_cache=True)
    plain = TransformersBackend(model, tok, batch_size=4, prefix_cache=False)
    convs, a, b = ["What is 2+2?", "Name a colour.", "Say hi."], ["4", "Red.", "Hi!"], ["5", "Blue.", "Hello."]
    # force turn 1 to end so that turn 2 runs: the tiny model rarely emits <|im_end|> by itself
    with_reuse = brrm_judge(reuse, cfg)
    without = brrm_judge(plain, cfg)
    r1 = with_reuse.judge_pairs(convs, a, b)
    r2 = without.judge_pairs(convs, a, b)
    assert [r.turn1_text for r in r1] == [r.turn1_text for r in r2]
    assert [r.turn2_text for r in r1] == [r.turn2_text for r in r2]
    assert plain.stats["cached_tokens"] == 0


def test_kv_reuse_constrained_turn2_identical_and_cheap(tiny):
    model, tok = tiny
    cfg = BRRMConfig(sampling=SamplingConfig(temperature=0, max_new_tokens=400), thinking="off",
                     block_token_cap=16)
    reuse = TransformersBackend(model, tok, batch_size=4, prefix_cache=True)
    plain = TransformersBackend(model, tok, batch_size=4, prefix_cache=False)
    convs, a, b = ["What is 2+2?", "Name a colour."], ["4", "Red."], ["5", "Blue."]
    r1 = brrm_judge(reuse, cfg).judge_pairs(convs, a, b)
    r2 = brrm_judge(plain, cfg).judge_pairs(convs, a, b)
    assert [r.turn2_text for r in r1] == [r.turn2_text for r in r2]
    assert all(r.ok for r in r1)
    assert reuse.stats["cached_tokens"] > 0
    # with reuse, turn-2 prefill recomputes only what follows the common prefix
    assert reuse.stats["prefill_tokens"] < plain.stats["prefill_tokens"]


def test_program_think_budget_pattern_and_choice(tiny):
    model, tok = tiny
    program = Program((Think(5), Pattern(r"Verdict: ", max_len=9), Choice(("1", "2")),
                       Pattern(r"\nReason: [^\n\[]+\n\[end\]", cap=6, force="\n[end]")))
    be = TransformersBackend(model, tok)
    outs = be.generate(_requests(tok, 80, program), temperature=1.0)
    for c in outs:
        assert c.finish_reason == "stop", c
        assert c.think_budget_hit  # the random model never writes </think> by itself
        body = c.text.split("</think>", 1)[1]
        assert body.startswith("\n\nVerdict: ") and body[len("\n\nVerdict: ")] in "12"
        reason = body.split("Reason: ", 1)[1].split("\n[end]")[0]
        assert len(reason) > 0 and body.endswith("\n[end]")
        assert len(c.choice_logits) == 1 and len(c.choice_logits[0]) == 2


def test_a_malformed_request_is_a_programming_error_not_an_item_status(tiny):
    """The judges never build an empty request; if code does, it raises instead of hiding as backend_error."""
    model, tok = tiny
    be = TransformersBackend(model, tok, batch_size=8)
    reqs = _requests(tok, 4)
    reqs.insert(2, GenerationRequest((), 4))
    with pytest.raises(ConfigError, match="needs >= 1 prompt token"):
        be.generate(reqs, temperature=0)
