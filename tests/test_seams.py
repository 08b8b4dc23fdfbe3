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
        backend = TransformersBackend(model, tok, model_id="tiny", scheduling="static")  # every turn via generate
    else:  # a random tiny model's free turn 1 never ends its turn: a scripted turn 1 that does
        from brrm.backends.fake import FakeBackend

        from .test_faithful_released import RANKING, T1

        backend = FakeBackend(tok, lambda p, r: RANKING if "Analysis on Response 1" in p.rsplit("user", 1)[-1] else T1)
    rec = _Recording(backend)
    cfg = BRRMConfig(decoding=decoding, turn2_tokens="concat", thinking="off", block_token_cap=8,
                     sampling=SamplingConfig(temperature=0, max_new_tokens=420))
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


def _sentencepiece_tokenizer():
    """A SentencePiece-style BPE (Llama-2 pipeline: "▁" prepended and for spaces, byte fallback, no
    pre-tokenizer) trained in-process, with the Qwen chat tokens and template."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    from brrm.templates import render_brrm_turn1, render_brrm_turn2
    from brrm.testing.tokenizers import TINY_ADDED_TOKENS, TINY_CORPUS, _add_tokens, _wrap
    from brrm.types import Conversation

    tok = Tokenizer(models.BPE(byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    corpus = (TINY_CORPUS + render_brrm_turn1(Conversation.from_prompt("What is 2+2?"), "4", "5")
              + render_brrm_turn2())
    trainer = trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                  special_tokens=["<unk>", *(f"<0x{b:02X}>" for b in range(256))])
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    _add_tokens(tok, TINY_ADDED_TOKENS)
    return _wrap(tok, 32768)


def test_sentencepiece_verdict_digits_and_markers_carry_no_stray_space():
    from brrm.backends.transformers import TransformersBackend
    from brrm.constraints.compile import forced_ids
    from brrm.judges.brrm import BRRMConfig
    from brrm.testing import brrm_judge
    from brrm.types import SamplingConfig

    tok = _sentencepiece_tokenizer()
    closing = "}\n[The End of Ranking Score]"
    assert tok.convert_ids_to_tokens(tok.encode(closing, add_special_tokens=False))[0] == "▁"  # alone: "▁}"
    ids = forced_ids(tok, closing)
    assert tok.decode(tok.encode("\\boxed{2", add_special_tokens=False) + list(ids)) == "\\boxed{2" + closing
    model, tok = build_tiny_qwen3(tok, seed=2)
    backend = TransformersBackend(model, tok, model_id="tiny-sentencepiece")
    rec = _Recording(backend)
    judge = brrm_judge(backend, BRRMConfig(thinking="off", block_token_cap=8,
                                           sampling=SamplingConfig(temperature=0, max_new_tokens=420)))
    results = judge.judge_pairs(["What is 2+2?", "Name a colour."], ["4", "Blue."], ["5", "Seven."])
    assert all(r.ok for r in results), [r.reason for r in results]
    for r in results:
        digit = "1" if r.winner.value == "A" else "2"
        assert r.turn2_text.endswith("[The Begin of Ranking Score]\n\\boxed{" + digit + closing)
        assert "[ End" not in r.turn1_text and "[ The" not in r.turn2_text
        assert "\n[End of Quality Analysis for Response 1]" in r.turn1_text  # markers in position too
    turn2 = [(req, comp) for req, comp in rec.turns if "Ranking" in str(req.program)]
    for _, comp in turn2:  # the fed ids of the verdict's closing literal are its in-position ids
        assert tuple(comp.token_ids[-len(ids):]) == ids
