"""A result depends only on the record, the options and the seed (issue 9.2): never on batch size, order,
chunking or neighbours — at the published T = 1.0, on a tiny real Qwen3 with the transformers backend.

Every field is compared byte for byte, the raw floats (verdict-digit logits, P(A ≻ B)) included: on CPU the
backend is batch-invariant by default (:mod:`brrm.backends.transformers.invariant`). Without it those floats differ at
about 1e-5 between batch shapes, which the last test shows, so the invariance tests can fail. The CLI's files,
byte for byte at batch sizes 1 and 8 on examples/pairs.jsonl's first four pairs (one multi-turn), are
tests/test_invariance_matrix.py's (at 1 and 2 threads)."""

from __future__ import annotations

import json

import pytest

import brrm
from brrm.testing import save_tiny_qwen3

CONVS = ["What is 2+2?", "Name a colour.", "Say hi.", "Capital of France?", "2*3?"]
A = ["4", "Red.", "Hi!", "Paris.", "6"]
B = ["5", "Seven.", "Go away.", "Lyon.", "five"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _judge(tiny_dir, batch_size):
    return brrm.load(tiny_dir, kind="brrm", batch_size=batch_size, temperature=1.0, max_new_tokens=420,
                     block_token_cap=8, thinking="off", seed=11)


def _key(j):
    return json.dumps(j.to_dict(), sort_keys=True)


def _same(rows, ref):
    assert rows == ref


def test_batch_size_order_and_neighbours_do_not_change_results(tiny_dir):
    """Each pair alone (batch size 1) is the reference; the same bytes in reverse order in a batch of 8 and without
    the first pair in batches of 3 (other neighbours, other batch rows, a refilled batch)."""
    ids = [f"r{k}" for k in range(5)]
    ref = [_key(j) for j in _judge(tiny_dir, 1).judge_pairs(CONVS, A, B, ids=ids)]
    rev = _judge(tiny_dir, 8).judge_pairs(CONVS[::-1], A[::-1], B[::-1], ids=ids[::-1])
    _same([_key(j) for j in rev][::-1], ref)
    tail = _judge(tiny_dir, 3).judge_pairs(CONVS[1:], A[1:], B[1:], ids=ids[1:])
    _same([_key(j) for j in tail], ref[1:])
    turns = {(j.provenance.seed, j.turn1_text, j.turn2_text) for j in rev}
    assert len(turns) == 5  # every item has its own streams


def test_turns_and_retries_draw_from_their_own_streams():
    from brrm.seeds import item_seed

    seeds = {item_seed(0, "k", stream=s, attempt=a) for s in ("turn1", "turn2") for a in (0, 1)}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert item_seed(0, "k", stream="turn1") == item_seed(0, "k", stream="turn1")
    assert item_seed(1, "k", stream="turn1") != item_seed(0, "k", stream="turn1")


def test_without_batch_invariance_the_floats_drift_but_tokens_do_not(tiny_dir):
    """The control: batch_invariant=False batches rows with left padding through SDPA and 1-row BLAS calls, so
    the verdict logits move (by float rounding) while Gumbel-max keeps every sampled token."""
    ids = [f"r{k}" for k in range(5)]

    def run(bs):
        judge = brrm.load(tiny_dir, kind="brrm", batch_size=bs, temperature=1.0, max_new_tokens=420,
                          block_token_cap=8, thinking="off", seed=11, batch_invariant=False)
        return judge.judge_pairs(CONVS, A, B, ids=ids)

    one, eight = run(1), run(8)
    assert [(j.turn1_text, j.turn2_text, j.winner) for j in one] == [(j.turn1_text, j.turn2_text, j.winner)
                                                                     for j in eight]
    drift = max(abs(a.logit_1 - b.logit_1) for a, b in zip(one, eight, strict=True) if a.logit_1 is not None)
    assert 0 < drift < 1e-4
