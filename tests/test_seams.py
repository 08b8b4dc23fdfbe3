"""Seams where brrm's tokens meet the model's own (issue 20, item 6): end-of-text strings at a response's end,
pad == eos in a Bradley–Terry forward, turn 2 extending turn 1 in concat mode, SentencePiece verdict digits."""

from __future__ import annotations

import pytest
import torch

from brrm.reward_models.bradley_terry import BradleyTerryRewardModel
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer
from brrm.types import Status

CHATML_NO_NEWLINE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A template whose assistant turn ends with the EOS token itself (no newline after it)."""


@pytest.fixture(scope="module")
def seqcls():
    return build_tiny_qwen3(seed=1, sequence_classification=True)


def _forward(model, ids) -> float:
    """The model's own forward on the unpadded sequence: ``model(input_ids).logits[0][0]`` (the card's code)."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(ids)])).logits[0][0].item()


def test_a_response_ending_with_end_of_text_is_not_scored_with_it_doubled(seqcls):
    model, tok = seqcls
    assert tok.eos_token == "<|im_end|>" and "<|endoftext|>" in tok.get_added_vocab()
    rm = BradleyTerryRewardModel.from_model(model, tok)
    clean = rm.encode("What is the capital of France?", "Paris.")
    base = rm.score(["What is the capital of France?"], ["Paris."])[0]
    for tail in ("<|endoftext|>", "<|im_end|><|endoftext|>", "<|endoftext|>\n", " <|im_end|>\n<|endoftext|>"):
        enc = rm.encode("What is the capital of France?", "Paris." + tail)
        assert enc.ids == clean.ids, tail  # no text ids of "<|endoftext|>" before the real end of turn
        (r,) = rm.score(["What is the capital of France?"], ["Paris." + tail])
        assert r.reward == base.reward
    inside = rm.encode("Q?", "a <|endoftext|> b")  # only a trailing end string is removed
    assert "<|endoftext|> b" in tok.decode(list(inside.ids))


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_equal_to_eos_with_an_eos_terminated_template_matches_the_models_own_forward(seqcls, padding_side):
    model, _ = seqcls
    tok = build_tiny_tokenizer()
    tok.chat_template = CHATML_NO_NEWLINE
    tok.pad_token = tok.eos_token = "<|im_end|>"
    eos = tok.eos_token_id
    original = model.config.pad_token_id
    model.config.pad_token_id = eos
    try:
        rm = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=4, padding_side=padding_side)
        prompts = ["What is the capital of France?", "Name a colour.", "Say hi.", "2+2?"]
        responses = ["Paris.", "A rather long answer: blue, like the sky at noon.", "Hi!", "4"]
        out = rm.score(prompts, responses)
        for p, resp, r in zip(prompts, responses, out, strict=True):
            ids = list(rm.encode(p, resp).ids)
            assert ids[-1] == eos  # the sequence ends with the pad id itself
            assert r.ok and r.reward == pytest.approx(_forward(model, ids), abs=1e-5)
            with torch.inference_mode():  # ...which is not the score at the last token (so the rule mattered)
                hidden = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
                assert abs(model.score(hidden).item() - r.reward) > 1e-4
        (only_pad,) = rm.backend.classify([[eos, eos]])
        assert only_pad.error and "pad id" in only_pad.error
    finally:
        model.config.pad_token_id = original


def test_status_of_unreadable_sequence_is_an_error_not_a_number(seqcls):
    model, tok = seqcls
    rm = BradleyTerryRewardModel.from_model(model, tok)
    pad = model.config.pad_token_id
    (score,) = rm.backend.classify([[pad]])
    assert score.error and score.value != score.value
    assert rm.score(["Q?"], ["A."])[0].status is Status.OK


class _Recording:
    """Wraps a backend's generate to keep each call's (request, completion) pairs."""

    def __init__(self, backend):
        self.turns = []
        original = backend.generate

        def generate(requests, **kw):
            out = original(requests, **kw)
            self.turns += list(zip(requests, out, strict=True))
            return out

        backend.generate = generate


@pytest.mark.parametrize("decoding", ["constrained", "faithful"])
def test_concat_turn2_ids_are_an_exact_extension_of_turn1(decoding):
    from brrm.backends.transformers import TransformersBackend
    from brrm.judges.brrm import BRRMConfig
    from brrm.testing import brrm_judge
    from brrm.types import SamplingConfig

    model, tok = build_tiny_qwen3(seed=5)
    if decoding == "constrained":
        backend = TransformersBackend(model, tok, model_id="tiny")
    else:  # a random tiny model's free turn 1 never ends its turn: a scripted turn 1 that does
        from brrm.backends.fake import FakeBackend

        from .test_faithful_released import RANKING, T1

        backend = FakeBackend(tok, lambda p, r: RANKING if "Analysis on Response 1" in p.rsplit("user", 1)[-1] else T1)
    rec = _Recording(backend)
    cfg = BRRMConfig(decoding=decoding, turn2_tokens="concat", thinking="off", block_token_cap=8,
                     sampling=SamplingConfig(temperature=0, max_new_tokens_per_turn=420))
    judge = brrm_judge(backend, cfg)
    judge.judge_pairs(["What is 2+2?", "Name a colour."], ["4", "Blue."], ["5", "Seven."])
    turn1 = {tuple(req.prompt_ids): comp for req, comp in rec.turns}
    end = tok.convert_tokens_to_ids("<|im_end|>")
    extended = 0
    for req, _ in rec.turns:
        p2 = tuple(req.prompt_ids)
        for p1, t1 in turn1.items():
            if t1.finish_reason == "stop" and len(p2) > len(p1) and p2[:len(p1)] == p1 and p1 != p2:
                length = len(p1) + len(t1.token_ids)  # turn 1's length: P1 and every id it generated
                assert p2[:length] == p1 + t1.token_ids
                if decoding == "constrained":  # the seam "]\n" is one canonical token, from turn 1's program
                    assert t1.token_ids[-1] == tok.encode("]\n", add_special_tokens=False)[0] and p2[length] == end
                else:  # a free turn 1: "\n" after it on its own, then the template's end of turn
                    assert tok.decode(list(p2[length:length + 2])) == "\n<|im_end|>"
                extended += 1
    assert extended == 2
