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

PAIRS = [("What is 2+2?", "4", "5"), ("Name a colour.", "Blue.", "Seven."), ("Say hi.", "Hi!", "Go away."),
         ("Capital of France?", "Paris.", "Lyon."), ("2*3?", "6", "five"), ("Is 91 prime?", "No, 7*13.", "Yes."),
         ("Spell cat.", "cat", "kat"), ("Largest planet?", "Jupiter.", "Mars."), ("Boil point of water?",
         "100 C at sea level.", "50 C."), ("Translate 'hola'.", "Hello.", "Goodbye.")]


class Recording(TransformersBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns = []

    def generate(self, requests, **kwargs):
        out = super().generate(requests, **kwargs)
        self.turns += list(zip(requests, out, strict=True))
        return out


def _spans(tok, ids):
    """(start, end) character span of each token in the decoded text (prefix decoding)."""
    spans, pos = [], 0
    for k in range(1, len(ids) + 1):
        end = len(tok.decode(list(ids[:k]), skip_special_tokens=False))
        spans.append((pos, end))
        pos = end
    return spans


def _forced_ranges(text):
    """Character ranges of text brrm forces: every literal of both turn programs, wherever it occurs."""
    literals = [seg.text for prog in (turn1_program(0, 8), turn2_program(0, 8)) for seg in prog.segments
                if hasattr(seg, "text")]
    ranges = []
    for lit in literals:
        start = text.find(lit)
        while start >= 0:
            ranges.append((start, start + len(lit)))
            start = text.find(lit, start + 1)
    return ranges


@pytest.fixture(scope="module")
def recorded(qwen3_tokenizer):
    model, tok = build_tiny_qwen3(qwen3_tokenizer, seed=5)
    backend = Recording(model, tok, model_id="tiny-qwen3-vocab", batch_size=8)
    cfg = BRRMConfig(sampling=SamplingConfig(temperature=0, max_new_tokens_per_turn=420), block_token_cap=8,
                     thinking="off", swap=True)
    judge = brrm_judge(backend, cfg)
    out = judge.judge_pairs(*map(list, zip(*PAIRS, strict=True)))
    faithful = brrm_judge(backend, BRRMConfig(decoding="faithful", sampling=SamplingConfig(
        temperature=0, max_new_tokens_per_turn=420), swap=True)).judge_pairs(*map(list, zip(*PAIRS, strict=True)))
    return tok, backend.turns[:4 * len(PAIRS)], out, faithful


def test_forced_tokens_equal_the_canonical_tokenization(recorded):
    tok, turns, out, _ = recorded
    assert len(turns) == 40 and all(j.ok for j in out)  # 20 constrained judgments, two turns each
    enc = encoder(tok)
    forced_diff = model_diff = total = 0
    for req, comp in turns:
        fed = list(req.prompt_ids) + list(comp.token_ids)
        text = tok.decode(fed, skip_special_tokens=False)
        canonical = enc.markup(text)
        ours, theirs = set(_spans(tok, fed)), set(_spans(tok, canonical))
        forced = _forced_ranges(text)
        prompt_chars = len(tok.decode(list(req.prompt_ids), skip_special_tokens=False))
        for span in ours - theirs:
            touches = any(s < span[1] and span[0] < e for s, e in forced) or span[0] < prompt_chars
            forced_diff += touches
            model_diff += not touches
        total += len(fed)
    assert forced_diff == 0, forced_diff  # literals, closes and the seam: 0 differing positions
    print(f"\n{len(turns)} turns, {total} fed tokens: 0 forced tokens off the canonical tokenization; "
          f"{model_diff} tokens the model sampled off it")


def test_the_turn2_seam_is_one_canonical_token(recorded):
    tok, turns, _, _ = recorded
    turn2 = [req for req, _ in turns if req.program is not None and "Ranking" in str(req.program)]
    close = tok.convert_tokens_to_ids("]\n") if "]\n" in tok.get_vocab() else None
    assert close is not None
    for req in turn2:
        text = tok.decode(list(req.prompt_ids), skip_special_tokens=False)
        seam = text.index("[End of Quality Analysis for Response 2]\n<|im_end|>")
        assert close in req.prompt_ids and seam > 0


def test_constrained_and_faithful_verdicts_on_the_tiny_model(recorded):
    _, _, constrained, faithful = recorded
    both = [(c, f) for c, f in zip(constrained, faithful, strict=True) if c.ok and f.ok]
    agree = sum(c.winner is f.winner for c, f in both)
    print(f"\nconstrained vs faithful (tiny random model, greedy): {len(both)} pairs with both verdicts ok, "
          f"{agree} agree; faithful statuses {[f.status.value for f in faithful]}")
    assert len(constrained) == len(faithful) == len(PAIRS)
