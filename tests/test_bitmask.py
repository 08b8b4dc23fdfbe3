"""Grammar bitmasks (brrm.backends.transformers.bitmask): a real outlines-core Guide's allowed tokens, filled and
applied, leave exactly those logits finite; rows of one mask are each their own; and a constrained judgment never
loads torch's inductor (outlines-core's torch kernels compile at import)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from outlines_core import Guide

from brrm.backends.transformers.bitmask import allocate, apply, fill
from brrm.constraints.compile import compile_index
from brrm.testing.tokenizers import build_tiny_tokenizer
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def _allowed(guide: Guide, vocab: int) -> set[int]:
    mask = allocate(vocab)
    fill(guide, mask)
    logits = torch.zeros(1, vocab)
    apply(logits, mask)
    return set(torch.isfinite(logits[0]).nonzero().flatten().tolist())


def test_applied_mask_leaves_exactly_the_guides_tokens(tokenizer):
    vocab = len(tokenizer)
    guide = Guide(compile_index(tokenizer, r"(Yes|No)\. [a-z]{1,4}", tokenizer.eos_token_id))
    seen = 0
    while not guide.is_finished() and seen < 8:
        allowed = _allowed(guide, vocab)
        assert allowed == set(guide.get_tokens()) and 0 < len(allowed) < vocab
        guide.advance(min(allowed - {tokenizer.eos_token_id}, default=tokenizer.eos_token_id))
        seen += 1
    assert seen >= 3


def test_each_row_of_a_mask_is_its_own_and_words_past_the_mask_are_refused(tokenizer):
    vocab = len(tokenizer)
    guides = [Guide(compile_index(tokenizer, regex, tokenizer.eos_token_id)) for regex in (r"Yes", r"[0-9]+")]
    masks = torch.cat([allocate(vocab) for _ in guides])
    for r, guide in enumerate(guides):
        fill(guide, masks[r:r + 1])
    wide = torch.randn(2, vocab + 40)  # logits past the mask's last word: never allowed
    kept = wide.clone()
    apply(wide, masks)
    for r, guide in enumerate(guides):
        allowed = sorted(guide.get_tokens())
        assert torch.isfinite(wide[r]).nonzero().flatten().tolist() == allowed
        assert torch.equal(wide[r, allowed], kept[r, allowed])  # allowed logits keep their bits


def test_a_mask_of_the_wrong_form_is_refused(tokenizer):
    guide = Guide(compile_index(tokenizer, r"Yes", tokenizer.eos_token_id))
    with pytest.raises(ValueError, match="one contiguous int32 CPU row"):
        fill(guide, torch.zeros(2, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="int32 \\[rows, words\\]"):
        apply(torch.zeros(1, 64), torch.zeros(2, 2, dtype=torch.int32))


def test_a_constrained_judgment_loads_no_inductor_compiler(tmp_path):
    code = ("import sys, brrm\n"
            "from brrm.testing import save_tiny_qwen3\n"
            f"judge = brrm.load(str(save_tiny_qwen3({str(tmp_path / 'tiny')!r})), kind='brrm', "
            "max_new_tokens=420, block_token_cap=8, thinking='off')\n"
            "j = judge.judge_pairs(['What is 2+2?'], ['4'], ['5'])[0]\n"
            "print(j.status.value, 'torch._inductor.compile_fx' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "TORCH_COMPILE_DISABLE"})  # a user's
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["ok", "False"], out.stdout
