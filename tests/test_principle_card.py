"""GenRM-Principle rewards as the model card computes them (issue 20, item 3).

The card's code path: ``model.generate(..., output_scores=True, return_dict_in_generate=True)`` with the
checkpoint's generation config, then, on the *processed* scores of the step that emitted the answer token
(``scores[-2]``), ``max(s_yes - s_max, -50) - max(s_no - s_max, -50)`` (``DESIGN.md`` §3). It is run here with
transformers itself on a tiny real Qwen3 and compared with brrm to 1e-6.

Sampling noise: brrm samples with its own per-item streams, transformers with torch's global generator, so a
sampled generation cannot give the same tokens on both routes. The sampled comparison is therefore made at the
same step given the same prefix: brrm generates (really, on the model), and the card's route is run by
transformers on brrm's prompt + generated tokens up to that step; ``generate`` reports that step's processed
scores (they depend only on the prefix and the generation config, not on the noise). Under greedy decoding the
whole card route, from the prompt, gives the same tokens as brrm, and is compared end to end.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

import brrm
from brrm.judges.principle_format import card_reward
from brrm.testing import build_tiny_qwen3, save_tokenizer
from brrm.types import Status

from .test_principle import principle_template

PRINCIPLE = "The response is correct."
CONVERSATIONS = ["What is 2+2?", "Name a colour.", "Say hi.", "What is the capital of France?", "Count to 3.",
                 "Is water wet?"]
RESPONSES = ["4", "Blue.", "Hi!", "Paris.", "1, 2, 3.", "Yes."]


@pytest.fixture(scope="module")
def genrm_dir(tmp_path_factory):
    """A tiny Qwen3 whose " Yes" and end-of-turn rows are nudged so generations end within a few tokens, saved
    with a principle-aware chat template (what a GenRM-Principle checkpoint folder holds)."""
    model, tok = build_tiny_qwen3(seed=3)
    tok.chat_template = principle_template()
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    yes, no = (tok.encode(t, add_special_tokens=False)[0] for t in (" Yes", " No"))
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=True,
                                  return_dict=False)
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0].mean(0)
        w = model.lm_head.weight
        for token, scale in ((eot, 2.0), (yes, 2.2), (no, 2.2)):
            w[token] += scale * hidden / hidden.norm() * w.norm(dim=1).mean()
    out = tmp_path_factory.mktemp("genrm") / "tiny-genrm"
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    return out


def _set_generation_config(folder, **fields):
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1538, "pad_token_id": 1538,
                                                               **fields}))


def _load(folder, **opts):
    """The judge, and a list receiving each generate call's (requests, completions). One row per forward and no
    KV reuse: the judgement step is then one forward over the whole prefix, as transformers' prefill computes it,
    so both routes start from the same float32 logits (with KV reuse they differ by ~1e-7, which a temperature
    below 1 scales up)."""
    judge = brrm.load(str(folder), kind="principle", recipe="qwen3_genrm", principle=PRINCIPLE, device="cpu",
                      max_new_tokens=40, batch_size=1, prefix_cache=False, batch_invariant=False, **opts)
    backend, calls = judge.model.backend, []
    original = backend.generate

    def spy(requests, **kw):
        out = original(requests, **kw)
        calls.append((list(requests), out))
        return out

    backend.generate = spy
    return judge, calls


def card_number(scores: torch.Tensor, yes: int, no: int) -> float:
    """The card's formula on one step's processed scores (a 1-D tensor)."""
    s_max = scores.max()
    return float(max(scores[yes] - s_max, -50) - max(scores[no] - s_max, -50))


def _with(gen_config, **fields):
    out = copy.deepcopy(gen_config)
    out.update(output_scores=True, return_dict_in_generate=True, **fields)
    return out


def _card_scores_at(model, prefix, gen_config) -> torch.Tensor:
    """The card's route for one step: transformers' generate with output_scores on ``prefix``."""
    out = model.generate(torch.tensor([prefix]), generation_config=_with(gen_config, max_new_tokens=1))
    return out.scores[0][0]


SAMPLED = [(dict(do_sample=True, temperature=0.7, top_k=5, top_p=0.9), True),
           (dict(do_sample=True, temperature=0.3, top_p=0.8, top_k=0), True),  # top-p alone: the whole vocabulary
           (dict(do_sample=True), False)]  # no temperature/top_k/top_p: transformers' 1.0 / 50 / 1.0, not greedy


@pytest.mark.parametrize(("fields", "processing_matters"), SAMPLED)
def test_sampled_rewards_equal_the_card_route_at_the_same_step(genrm_dir, fields, processing_matters):
    from transformers import AutoModelForCausalLM, GenerationConfig

    _set_generation_config(genrm_dir, **fields)
    judge, calls = _load(genrm_dir, seed=5)
    s = judge.model.config.sampling
    expected = {"temperature": fields.get("temperature", 1.0), "top_k": fields.get("top_k", 50),
                "top_p": fields.get("top_p", 1.0)}
    assert {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p} == expected
    results = judge.score(CONVERSATIONS * 2, RESPONSES * 2, ids=[str(i) for i in range(12)])
    model = AutoModelForCausalLM.from_pretrained(genrm_dir).eval()
    gen_config = GenerationConfig.from_pretrained(genrm_dir)
    yes, no = judge.model.option_ids
    (free_reqs, free_out) = calls[0]
    compared = differs = 0
    for r, req, comp in zip(results, free_reqs, free_out, strict=True):
        if len(comp.token_ids) < 2:
            continue
        number = r.reward if r.ok else r.card_reward  # brrm's failure carries the card's number beside it
        cut = 2 if r.status is Status.TRUNCATED else 1  # the card's scores[-2], with and without an end of turn
        scores = _card_scores_at(model, list(req.prompt_ids) + list(comp.token_ids[:-cut]), gen_config)
        assert number == pytest.approx(card_number(scores, yes, no), abs=1e-6), (r.status, comp.token_ids)
        compared += 1
        differs += abs(card_reward(*r.logits) - number) > 1e-3  # the raw logits' formula would be off
    assert compared >= 3 and (differs > 0) == processing_matters
    assert any(r.ok for r in results) or fields.get("top_k") == 0
    assert any(-50 < r.reward < 50 for r in results if r.ok) or any(
        -50 < r.card_reward < 50 for r in results if not r.ok)  # not only the clamped extremes


def test_greedy_rewards_equal_the_card_route_end_to_end(genrm_dir):
    from transformers import AutoModelForCausalLM, GenerationConfig

    _set_generation_config(genrm_dir, do_sample=False)
    judge, calls = _load(genrm_dir)
    assert judge.model.config.sampling.temperature == 0.0
    results = judge.score(CONVERSATIONS, RESPONSES)
    model = AutoModelForCausalLM.from_pretrained(genrm_dir).eval()
    gen_config = GenerationConfig.from_pretrained(genrm_dir)
    yes, no = judge.model.option_ids
    numbers = 0
    for r, req in zip(results, calls[0][0], strict=True):
        out = model.generate(torch.tensor([req.prompt_ids]), generation_config=_with(gen_config, max_new_tokens=40))
        new = out.sequences[0, len(req.prompt_ids):].tolist()
        assert r.text == judge.model.tokenizer.decode(new[:-1] if new[-1] == 1538 else new)
        assert len(out.scores) >= 2
        number = r.reward if r.ok else r.card_reward
        assert number == pytest.approx(card_number(out.scores[-2][0], yes, no), abs=1e-6)
        numbers += 1
    assert numbers == len(CONVERSATIONS)


def test_parse_failure_keeps_brrm_status_and_carries_the_card_number(genrm_dir):
    _set_generation_config(genrm_dir, do_sample=True, temperature=0.7, top_k=5, top_p=0.9)
    judge, _ = _load(genrm_dir, seed=5)
    failures = [r for r in judge.score(CONVERSATIONS * 2, RESPONSES * 2, ids=[str(i) for i in range(12)])
                if r.status is Status.PARSE_FAILURE and "empty" not in r.reason]  # an empty one has no step
    assert failures, "no generation ended off Yes/No: the test needs one"
    for r in failures:
        assert math.isnan(r.reward) and -50 <= r.card_reward <= 50 and "card_reward" in r.reason
        assert r.to_dict()["reward"] is None and r.to_dict()["card_reward"] == r.card_reward


def test_processed_scores_floor_masked_labels():
    from brrm.judges.principle_format import processed_scores, top_needed

    largest = [3.0, 2.0, 1.0]  # top_k = 3: " No" (0.5) is cut
    s_yes, s_no, s_max = processed_scores(2.0, 0.5, 3.0, largest, temperature=0.5, top_k=3, top_p=1.0)
    assert (s_yes, s_no, s_max) == (4.0, -math.inf, 6.0)
    assert card_reward(s_yes, s_no, s_max) == pytest.approx(-2.0 + 50.0)
    assert processed_scores(2.0, 0.5, 3.0, [], temperature=0.0, top_k=3, top_p=0.5) == (2.0, 0.5, 3.0)
    assert top_needed(0.0, 20, 0.9, 1000) == 0 and top_needed(1.0, 20, 0.9, 1000) == 20
    assert top_needed(1.0, 0, 0.9, 1000) == 1000 and top_needed(0.7, 0, 1.0, 1000) == 0
