"""A result depends only on the record, the options and the seed (issue 9.2): never on batch size, order,
chunking or neighbours — at the published T = 1.0, on a tiny real Qwen3 with the transformers backend.

Every field is compared byte for byte except the raw floats (the verdict-digit logits and P(A ≻ B)): CPU BLAS
kernels sum in a batch-shape-dependent order, so those agree to float rounding (asserted to 1e-5), while every
sampled token, verdict, seed and provenance field is identical."""

from __future__ import annotations

import json

import pytest

import brrm
from brrm.cli import main
from brrm.testing import save_tiny_qwen3
from tests.conftest import REPO

CONVS = ["What is 2+2?", "Name a colour.", "Say hi.", "Capital of France?", "2*3?"]
A = ["4", "Red.", "Hi!", "Paris.", "6"]
B = ["5", "Seven.", "Go away.", "Lyon.", "five"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _judge(tiny_dir, batch_size):
    return brrm.load(tiny_dir, kind="brrm", batch_size=batch_size, temperature=1.0, max_new_tokens=420,
                     block_token_cap=8, thinking="off", seed=11)


FLOATS = ("p_a", "logit_1", "logit_2")


def _split(row):
    """(the row without its raw floats, as canonical JSON; the floats, recursively for swap sub-judgments)."""
    row = dict(row)
    floats = [row.pop(k) for k in FLOATS if k in row]
    subs = [_split(s) for s in row.pop("sub_judgments", [])]
    return json.dumps({**row, "sub": [s[0] for s in subs]}, sort_keys=True), floats + [f for s in subs for f in s[1]]


def _key(j):
    return _split(j.to_dict())


def _same(rows, ref):
    assert [r[0] for r in rows] == [r[0] for r in ref]
    for (_, fa), (_, fb) in zip(rows, ref, strict=True):
        assert all((a is None and b is None) or abs(a - b) <= 1e-5 for a, b in zip(fa, fb, strict=True))


def test_batch_size_order_and_neighbours_do_not_change_results(tiny_dir):
    ids = [f"r{k}" for k in range(5)]
    ref = [_key(j) for j in _judge(tiny_dir, 1).judge_pairs(CONVS, A, B, ids=ids)]
    for bs in (3, 8):
        _same([_key(j) for j in _judge(tiny_dir, bs).judge_pairs(CONVS, A, B, ids=ids)], ref)
    rev = _judge(tiny_dir, 8).judge_pairs(CONVS[::-1], A[::-1], B[::-1], ids=ids[::-1])
    _same([_key(j) for j in rev][::-1], ref)
    tail = _judge(tiny_dir, 3).judge_pairs(CONVS[1:], A[1:], B[1:], ids=ids[1:])
    _same([_key(j) for j in tail], ref[1:])
    out = _judge(tiny_dir, 8).judge_pairs(CONVS, A, B, ids=ids)
    turns = {(j.provenance.seed, j.turn1_text, j.turn2_text) for j in out}
    assert len(turns) == 5  # every item has its own streams


def test_turns_and_retries_draw_from_their_own_streams():
    from brrm.seeds import item_seed

    seeds = {item_seed(0, "k", stream=s, attempt=a) for s in ("turn1", "turn2") for a in (0, 1)}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert item_seed(0, "k", stream="turn1") == item_seed(0, "k", stream="turn1")
    assert item_seed(1, "k", stream="turn1") != item_seed(0, "k", stream="turn1")


def test_cli_batch_size_1_and_8_give_identical_judgments(tmp_path, tiny_dir, capsys):
    outs = []
    for bs in ("1", "8"):
        out = tmp_path / f"b{bs}.jsonl"
        assert main(["judge", "--input", str(REPO / "examples/pairs.jsonl"), "--output", str(out), "--model",
                     tiny_dir, "--kind", "brrm", "--batch-size", bs, "--max-new-tokens", "420",
                     "--block-token-cap", "8", "--thinking", "off", "--no-progress", "-q"]) == 0
        outs.append([_split(json.loads(line)) for line in out.read_text().splitlines()])
    capsys.readouterr()
    assert len(outs[0]) == 8
    _same(outs[0], outs[1])
