"""Constrained decoding stays on the model's own tokenization (issue 9.4), measured with the exact Qwen3 tokenizer.

Every token brrm feeds on the model's behalf — forced literals (markers), a forced thinking close, the turn-2 seam —
must be where the canonical tokenization of the same text puts it. Tokens the model itself sampled are its choice
and are counted apart.
"""

from __future__ import annotations

import pytest

from brrm.backends.transformers import TransformersBackend
from brrm.judges.brrm import BRRMConfig
from brrm.judges.brrm_format import turn1_program, turn2_program
from brrm.testing import brrm_judge, build_tiny_qwen3
from brrm.tokens import encoder
from brrm.types import SamplingConfig

PAIRS = [("What is 2+2?", "4", "5"), ("Is 91 prime?", "No, 7*13.", "Yes."),
         ("Boil point of water?", "100 C at sea level.", "50 C."), ("Translate 'hola'.", "Hello.", "Goodbye.")]
"""Four pairs (digits, punctuation, quotes, spaces), both orders: 8 judgments, 16 turns of forced and sampled text."""
TURNS = 4 * len(PAIRS)
"""Generation calls recorded: two orders of two turns per pair."""


class Recording(TransformersBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns = []

    def generate(self, requests, **kwargs):
        out = super().generate(requests, **kwargs)
        self.turns += list(zip(requests, out, strict=True))
        return out


def _decoded_spans(tok, ids):
    """(start, end) character span of each token in the decoded text (prefix decoding: ``tok.decode`` of every
    prefix, quadratic in the length; the definition :func:`_spans` is checked against)."""
    spans, pos = [], 0
    for k in range(1, len(ids) + 1):
        end = len(tok.decode(list(ids[:k]), skip_special_tokens=False))
        spans.append((pos, end))
        pos = end
    return spans


def _spans(tok, ids):
    """:func:`_decoded_spans` in linear time: each prefix's bytes (a byte-level BPE token's raw bytes, an added
    token's text) decoded as the tokenizer's decoder does (UTF-8, an incomplete or invalid sequence replaced)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    inverse = {ch: b for b, ch in bytes_to_unicode().items()}
    added = {i: t.content.encode() for i, t in tok.added_tokens_decoder.items()}
    data, spans, pos = b"", [], 0
    for i, piece in zip(ids, tok.convert_ids_to_tokens(list(ids)), strict=True):
        data += added[i] if i in added else bytes(inverse[c] for c in piece)
        end = len(data.decode("utf-8", errors="replace"))
        spans.append((pos, end))
        pos = end
    return spans


def _model_ranges(text, generated):
    """Character ranges the model chose itself: its generated text minus every literal of both turn programs
    (and the "\n[" that ends each free block before a literal, which brrm forces at a block's cap)."""
    literals = [seg.text for prog in (turn1_program(0, 8), turn2_program(0, 8)) for seg in prog.segments
                if hasattr(seg, "text")]
    owned = [True] * len(text)
    for lo, hi in generated:
        owned[lo:hi] = [False] * (hi - lo)
    for lit in literals:
        start = text.find(lit)
        while start >= 0:
            lo = start - 2 if text[max(start - 2, 0):start] == "\n[" else start
            owned[lo:start + len(lit)] = [True] * (start + len(lit) - lo)
            start = text.find(lit, start + 1)
    return owned


@pytest.fixture(scope="module")
def recorded(qwen3_tokenizer):
    model, tok = build_tiny_qwen3(qwen3_tokenizer, seed=5)
    backend = Recording(model, tok, model_id="tiny-qwen3-vocab", batch_size=8)
    cfg = BRRMConfig(sampling=SamplingConfig(temperature=0, max_new_tokens=420), block_token_cap=8,
                     thinking="off", swap=True)
    judge = brrm_judge(backend, cfg)
    out = judge.judge_pairs(*map(list, zip(*PAIRS, strict=True)))
    return tok, backend.turns, out


def test_forced_tokens_equal_the_canonical_tokenization(recorded):
    tok, turns, out = recorded
    assert len(turns) == TURNS and all(j.ok for j in out)  # two constrained judgments a pair, two turns each
    enc = encoder(tok)
    first = list(turns[0][0].prompt_ids) + list(turns[0][1].token_ids)
    assert _spans(tok, first) == _decoded_spans(tok, first)  # the linear spans are the decoder's, on a real turn
    generated_text = {}  # turn-1 prompt text -> the model's turn-1 text
    forced_diff = model_diff = total = 0
    for req, comp in turns:
        fed = list(req.prompt_ids) + list(comp.token_ids)
        text = tok.decode(fed, skip_special_tokens=False)
        prompt = tok.decode(list(req.prompt_ids), skip_special_tokens=False)
        ranges = [(len(prompt), len(text))]
        for p1, t1 in generated_text.items():  # turn 2: turn 1's generated text sits inside the prompt
            if prompt.startswith(p1 + t1):
                ranges.append((len(p1), len(p1) + len(t1)))
        generated_text[prompt] = comp.text
        owned = _model_ranges(text, ranges)
        canonical = set(_spans(tok, enc.markup(text)))
        for lo, hi in set(_spans(tok, fed)) - canonical:
            ours = any(owned[lo:hi])
            forced_diff += ours
            model_diff += not ours
        total += len(fed)
    assert forced_diff == 0, forced_diff  # template, record text, literals, block ends and the seam
    print(f"\n{len(turns)} turns, {total} fed tokens: 0 of brrm's tokens off the canonical tokenization; "
          f"{model_diff} tokens the (random) model sampled off it")


def test_the_turn2_seam_is_one_canonical_token(recorded):
    tok, turns, _ = recorded
    turn2 = [req for req, _ in turns if "Ranking" in str(req.program)]
    (close,) = tok.encode("]\n", add_special_tokens=False)  # one token in Qwen's vocabulary
    bracket, newline = tok.encode("]", add_special_tokens=False)[0], tok.encode("\n", add_special_tokens=False)[0]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert len(turn2) == TURNS // 2
    for req in turn2:
        ids = list(req.prompt_ids)
        assert any(ids[k] == end and ids[k - 1] == close for k in range(1, len(ids)))
        assert not any(ids[k] == end and ids[k - 1] == newline and ids[k - 2] == bracket for k in range(2, len(ids)))
