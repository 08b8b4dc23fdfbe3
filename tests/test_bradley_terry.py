"""Bradley–Terry reward models on tiny real Qwen3 models (sequence classifier and causal LM).

Cases: C05 (batch size), C06 (padding side), C07 (no pad token), C09 (truncation side), C11 (single BOS),
C19 (empty response), C24 (missing response / ends with assistant), C31 (one float per sequence).
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from brrm.backends.transformers.bucketing import padding_waste
from brrm.compose import ScalarRewardJudge
from brrm.errors import ConfigError
from brrm.reward_models.bradley_terry import (
    EMPTY_THINK,
    NOTHINK_SUFFIX,
    BradleyTerryRewardModel,
    bucket_by_length,
    resolve_recipe,
)
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer, save_tiny_qwen3
from brrm.types import Status, Verdict

FILLER = " ".join(["Plants convert light, water and carbon dioxide into glucose and oxygen."] * 40)
ITEMS = [  # (conversation, response): short and long, one and several turns, a system and a tool turn
    ("Name a primary colour.", "Red."),
    ("Explain photosynthesis in detail.", FILLER),
    ("Say hi.", "Hi!"),
    ("2+2?", "4"),
    (
        "Write two sentences about autumn leaves.",
        "Leaves turn amber and red. They drift down and crunch underfoot.",
    ),
    (
        [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Capital of France?"},
        ],
        "Paris.",
    ),
    (
        [
            {"role": "user", "content": "What is 12 squared?"},
            {"role": "assistant", "content": "144"},
            {"role": "user", "content": "And 13 squared?"},
        ],
        "169",
    ),
    (
        [
            {"role": "user", "content": "Capital of Australia?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "search", "arguments": {"q": "capital"}}],
            },
            {"role": "tool", "content": "Canberra is the capital city of Australia."},
        ],
        "It's Canberra.",
    ),
]


@pytest.fixture(scope="module")
def seqcls():
    return build_tiny_qwen3(seed=1, sequence_classification=True)


@pytest.fixture(scope="module")
def bt(seqcls):
    model, tok = seqcls
    return BradleyTerryRewardModel.from_model(model, tok, model_id="tiny-rm")


def _reference(model, ids):
    """What the recipe's model card computes: ``model(input_ids).logits[0][0]`` on the unpadded sequence."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(ids)])).logits[0][0].item()


def _rewards(model, tok, **kw):
    rm = BradleyTerryRewardModel.from_model(model, tok, model_id="tiny-rm", **kw)
    convs, resps = zip(*ITEMS, strict=True)
    out = rm.score(list(convs), list(resps))
    assert all(r.ok for r in out), [r.reason for r in out]
    return [r.reward for r in out]


def test_reward_is_the_model_cards_logits_00(seqcls, bt):
    model, _ = seqcls
    for conv, resp in ITEMS:
        enc = bt.encode(conv, resp)
        assert bt.score([conv], [resp])[0].reward == pytest.approx(_reference(model, enc.ids), abs=1e-6)


def test_batch_invariance_alone_batch_of_8_padding_sides_and_order(seqcls):
    """C05/C06: alone, in a batch of 8, left or right padding, any order: |Δ| <= 1e-5 in fp32."""
    model, tok = seqcls
    alone = _rewards(model, tok, max_batch_size=1)
    for kw in (
        {"max_batch_size": 8, "bucketing": False},
        {"max_batch_size": 8, "padding_side": "left"},
        {"max_batch_size": 8, "padding_side": "right", "bucketing": False},
        {"token_budget": 600},
    ):
        got = _rewards(model, tok, **kw)
        assert max(abs(a - b) for a, b in zip(alone, got, strict=True)) <= 1e-5, kw
    rm = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=8, padding_side="left", bucketing=False)
    order = list(range(len(ITEMS)))
    random.Random(0).shuffle(order)
    shuffled = rm.score([ITEMS[i][0] for i in order], [ITEMS[i][1] for i in order])
    for k, i in enumerate(order):
        assert abs(shuffled[k].reward - alone[i]) <= 1e-5
    assert rm.stats["classify_batches"] == 1  # really one padded batch of 8


def test_c05_target_with_fillers_and_sign_stability(bt):
    target = ("Name a primary colour.", "Red.")
    one = bt.score([target[0]], [target[1]], ids=["t"])[0]
    three = bt.score([target[0], ITEMS[1][0], "Say hi."], [target[1], FILLER, "Hi!"])
    assert one.id == "t" and abs(one.reward - three[0].reward) <= 1e-5
    chosen, rejected = bt.score(["Name a primary colour."] * 2, ["Red.", "Seven."])
    batch = bt.score(
        ["Name a primary colour.", ITEMS[1][0], "Name a primary colour."], ["Red.", FILLER, "Seven."]
    )
    assert (chosen.reward > rejected.reward) == (batch[0].reward > batch[2].reward)


def test_bucketing_covers_every_item_under_the_budget():
    lengths = [5, 300, 17, 17, 2, 90, 91, 400, 1, 60]
    batches = bucket_by_length(lengths, token_budget=200, max_batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 200
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths)
    naive = bucket_by_length(lengths, token_budget=10**9, max_batch_size=4, sort=False)
    assert naive == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert padding_waste(lengths, naive) == pytest.approx(1 - sum(lengths) / (4 * 300 + 4 * 400 + 2 * 60))
    assert padding_waste(lengths, batches) < padding_waste(lengths, naive)


def test_padding_waste_is_measured_on_the_batches_run(seqcls):
    model, tok = seqcls
    convs, resps = zip(*ITEMS, strict=True)
    rm = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=4, bucketing=False)
    rm.score(list(convs), list(resps))
    lengths = [len(rm.encode(c, r).ids) for c, r in ITEMS]
    assert rm.stats["classify_real_tokens"] == sum(lengths) and rm.stats["classify_batches"] == 2
    assert rm.padding_waste == pytest.approx(padding_waste(lengths, [[0, 1, 2, 3], [4, 5, 6, 7]]))


def test_pad_token_missing_or_equal_to_eos(seqcls):
    """C07: sequence ends come from the attention mask, so pad handling cannot merge chosen and rejected."""
    model, _ = seqcls
    for pad in (None, "<|im_end|>"):
        tok = build_tiny_tokenizer()
        tok.pad_token = pad
        rm = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=2, padding_side="left")
        a, b = rm.score(["What is the capital of France?"] * 2, ["Paris.", "Berlin."])
        assert a.ok and b.ok and a.reward != b.reward
        for r, resp in ((a, "Paris."), (b, "Berlin.")):
            assert (
                abs(r.reward - _reference(model, rm.encode("What is the capital of France?", resp).ids))
                <= 1e-5
            )


def test_truncation_keeps_the_whole_response_and_end_tokens(bt, seqcls):
    """C09: a ~3000-token prompt with max_length 512 loses tokens from the left only."""
    model, tok = seqcls
    notes = " ".join(
        f"Note {k}: the town of Wexley trades wool, fish and timber along the river." for k in range(180)
    )
    prompt = notes + " Based on the notes, what is the town's main export?"
    rm = BradleyTerryRewardModel.from_model(model, tok, max_length=512)
    full_a = bt.encode(prompt, "Wool.")
    assert len(full_a.ids) > 2000
    a, b = rm.score([prompt, prompt], ["Wool.", "I don't know."])
    assert a.ok and b.ok and a.truncated and a.reward != b.reward
    for resp, r in (("Wool.", a), ("I don't know.", b)):
        enc, full = rm.encode(prompt, resp), bt.encode(prompt, resp)
        assert (
            len(enc.ids) == 512 and r.input_tokens == 512 and r.truncated_tokens == enc.truncated_tokens > 0
        )
        protected = len(enc.ids) - enc.response_start
        assert enc.ids[enc.response_start:] == full.ids[len(full.ids) - protected:]  # header, response, end tokens
        assert enc.ids[:enc.response_start] == full.ids[enc.truncated_tokens:len(full.ids) - protected]  # left cut
        assert tok.decode(enc.ids).endswith(resp + "<|im_end|>\n")
        assert tok.decode(enc.ids[enc.response_start :]).startswith("<|im_start|>assistant\n")
        assert r.reward == pytest.approx(_reference(model, enc.ids), abs=1e-5)
    too_long = BradleyTerryRewardModel.from_model(model, tok, max_length=16).score(["hi"], [FILLER])[0]
    assert (
        too_long.status is Status.TRUNCATED and math.isnan(too_long.reward) and "never cut" in too_long.reason
    )
    strict = BradleyTerryRewardModel.from_model(model, tok, max_length=512, truncation_side="none").score(
        [prompt], ["Wool."]
    )[0]
    assert strict.status is Status.TRUNCATED and "truncation_side='none'" in strict.reason


def test_bos_exactly_once(seqcls):
    """C11: a template that writes BOS and a tokenizer that adds BOS still give one BOS, at position 0."""
    from tokenizers import processors

    model, _ = seqcls
    tok = build_tiny_tokenizer()
    tok.bos_token = "<|endoftext|>"
    bos = tok.bos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)]
    )
    tok.chat_template = "{{ bos_token }}" + tok.chat_template
    conv, resp = "Recommend a board game for two players.", "Try a short cooperative card game."
    text = tok.apply_chat_template(
        [{"role": "user", "content": conv}, {"role": "assistant", "content": resp}], tokenize=False
    )
    assert tok(text)["input_ids"][:2] == [bos, bos]  # the failure mode: render, then tokenize again
    rm = BradleyTerryRewardModel.from_model(model, tok, max_length=40)
    enc = BradleyTerryRewardModel.from_model(model, tok).encode(conv, resp)
    assert enc.ids.count(bos) == 1 and enc.ids[0] == bos
    direct = tok.apply_chat_template(
        [{"role": "user", "content": conv}, {"role": "assistant", "content": resp}],
        tokenize=True,
        return_dict=False,
    )
    assert list(enc.ids) == list(direct)
    assert BradleyTerryRewardModel.from_model(model, tok).score([conv], [resp])[0].reward == pytest.approx(
        _reference(model, direct), abs=1e-5
    )
    cut = rm.encode(conv * 3, resp)  # truncation keeps the BOS in front
    assert cut.truncated_tokens > 0 and cut.ids[0] == bos and cut.ids.count(bos) == 1


def test_qwen3_nemotron_recipe(seqcls):
    model, tok = seqcls
    rm = BradleyTerryRewardModel.from_model(model, tok, recipe="qwen3_nemotron")
    conv = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Name a colour."},
    ]
    enc = rm.encode(conv, "Blue.")
    messages = [
        *conv[:2],
        {"role": "user", "content": "Name a colour." + NOTHINK_SUFFIX},
        {"role": "assistant", "content": EMPTY_THINK + "Blue."},
    ]
    expected = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert list(enc.ids) == list(expected)
    text = tok.decode(enc.ids)
    assert "Name a colour. /nothink<|im_end|>" in text and "Hi<|im_end|>" in text
    assert text.endswith("<think>\n\n</think>\n\nBlue.<|im_end|>\n")
    assert rm.score([conv], ["Blue."])[0].reward == pytest.approx(_reference(model, expected), abs=1e-6)
    assert rm.provenance.policies["recipe"] == "qwen3_nemotron"


def test_llama_nemotron_recipe_reads_vocab_logit_0():
    model, tok = build_tiny_qwen3(seed=2)
    rm = BradleyTerryRewardModel.from_model(model, tok, recipe="llama_nemotron", max_batch_size=8, padding_side="left")
    convs, resps = zip(*ITEMS, strict=True)
    batched = rm.score(list(convs), list(resps))
    for (conv, resp), r in zip(ITEMS, batched, strict=True):
        messages = [*_msgs(conv), {"role": "assistant", "content": resp}]
        ids = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        with torch.inference_mode():
            expected = model(input_ids=torch.tensor([ids])).logits[0, -1, 0].item()
        assert r.ok and abs(r.reward - expected) <= 1e-5
    assert len({round(r.reward, 6) for r in batched}) == len(ITEMS)


def _msgs(conv):
    return [{"role": "user", "content": conv}] if isinstance(conv, str) else conv


def test_thinking_policy_and_empty_responses(bt):
    plain = bt.score(["Say something kind."], ["You're doing great."])[0]
    thought = bt.score(["Say something kind."], ["<think>be nice</think>\nYou're doing great."])[0]
    assert thought.thinking_stripped and not plain.thinking_stripped
    assert thought.reward == pytest.approx(plain.reward, abs=1e-7)
    assert bt.provenance.policies["strip_thinking"] is True
    empty, ok = bt.score(["Say something kind."] * 2, ["", "You're doing great today."])  # C19
    assert empty.status is Status.EMPTY and math.isnan(empty.reward) and empty.input_tokens == 0
    assert ok.ok and math.isfinite(ok.reward)
    only_thought = bt.score(["Say something kind."], ["<think>hmm</think>  "])[0]
    assert only_thought.status is Status.EMPTY and "after removing" in only_thought.reason
    judge = ScalarRewardJudge(bt)
    fwd, rev = judge.judge_pairs(
        ["Say something kind."] * 2, ["", "You're doing great today."], ["You're doing great today.", ""]
    )
    assert fwd.winner is Verdict.B and rev.winner is Verdict.A and fwd.ok and rev.ok


def test_invalid_input_fails_before_any_model_call(seqcls):
    """C24: a conversation ending with the assistant, or no response: ConfigError, model untouched."""
    model, tok = seqcls
    calls = []
    handle = model.base_model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        rm = BradleyTerryRewardModel.from_model(model, tok)
        conv = [
            {"role": "user", "content": "Translate 'good morning' to Spanish."},
            {"role": "assistant", "content": "Buenos días."},
            {"role": "user", "content": "And 'good night'?"},
        ]
        with pytest.raises(ConfigError, match="missing"):
            rm.score([conv, "hi"], [None, "hello"])
        with pytest.raises(ConfigError, match="ends with role 'assistant'"):
            rm.score(["hi", conv[:2]], ["hello", "x"])
        with pytest.raises(ConfigError, match="no principle"):
            rm.score(["hi"], ["hello"], principles="be kind")
        with pytest.raises(ConfigError, match="same length"):
            rm.score(["hi", "yo"], ["hello"])
        assert calls == []
        assert rm.score([conv], ["Buenas noches."])[0].ok and calls
    finally:
        handle.remove()


def test_non_finite_reward_is_backend_error():
    model, tok = build_tiny_qwen3(seed=4, sequence_classification=True)
    with torch.no_grad():
        model.score.weight[0, 0] = float("nan")
    r = BradleyTerryRewardModel.from_model(model, tok).score(["hi"], ["hello"])[0]
    assert r.status is Status.BACKEND_ERROR and math.isnan(r.reward) and "non-finite" in r.reason
    assert r.to_dict()["reward"] is None


def test_a_vector_head_is_rejected_at_construction():
    """C31: a classifier with several outputs is not a scalar reward."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    tok = build_tiny_tokenizer()
    model, _ = build_tiny_qwen3(tok, sequence_classification=True)
    config = Qwen3Config(**{**model.config.to_dict(), "num_labels": 3})
    wide = Qwen3ForSequenceClassification(config).eval()
    with pytest.raises(ConfigError, match="3 labels wide"):
        BradleyTerryRewardModel.from_model(wide, tok)


def test_recipes_resolve_from_names():
    assert resolve_recipe("auto", "nvidia/Qwen-3-Nemotron-32B-Reward", causal=False) == "qwen3_nemotron"
    assert resolve_recipe("auto", "nvidia/Llama-3.1-Nemotron-70B-Reward-HF", causal=True) == "llama_nemotron"
    assert (
        resolve_recipe("auto", "Skywork/Skywork-Reward-Llama-3.1-8B", causal=False)
        == "sequence_classification"
    )
    for bad, causal in (("nvidia/Llama-3.3-Nemotron-70B-Reward-Principle", True), ("tiny-lm", True)):
        with pytest.raises(ConfigError):
            resolve_recipe("auto", bad, causal=causal)
    with pytest.raises(ConfigError, match="not valid"):
        resolve_recipe("mean_pool", "x", causal=False)


def test_load_detects_and_loads_the_saved_tiny_rm(tmp_path, seqcls):
    import brrm

    path = save_tiny_qwen3(tmp_path / "rm", seed=1, sequence_classification=True)
    loaded = brrm.load(str(path), dtype="float32", device="cpu")  # kind auto: a one-label classifier is bt
    assert isinstance(loaded, brrm.RewardJudge) and loaded.info.kind == "bt"
    assert loaded.info.recipe == "sequence_classification" and loaded.info.model == str(path)
    model, tok = seqcls
    mem = BradleyTerryRewardModel.from_model(model, tok)
    assert loaded.score_one("Say hi.", "Hi!").reward == pytest.approx(mem.score(["Say hi."], ["Hi!"])[0].reward,
                                                                      abs=1e-6)
    with pytest.raises(ConfigError, match="dtype 'int8' is not valid"):
        brrm.load(str(path), dtype="int8")
