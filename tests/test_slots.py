"""The slot KV cache (brrm.backends.transformers.slots) on a tiny real Qwen3: every row's keys are one contiguous run
of its own slot, the same bits as the row computed alone, whatever its neighbours feed; rows move between slots
without changing a bit; the stock attention path reads the same cache through the step's 4D mask."""

from __future__ import annotations

import pytest
import torch

from brrm.backends.transformers import TransformersBackend
from brrm.backends.transformers.slots import SlotCache, Step, stepping
from brrm.testing import build_tiny_qwen3
from brrm.testing.forward import step_forward


@pytest.fixture(scope="module")
def invariant():
    model, tok = build_tiny_qwen3(seed=3)
    TransformersBackend(model, tok)  # the CPU default: the batch-invariant forward
    return model


_feed = step_forward  # one forward through the backend's own decoder forward


def test_each_row_holds_its_own_contiguous_keys_whatever_its_neighbours_feed(invariant):
    """Three rows of different prompt lengths, then a step where one feeds 5 forced tokens and the others one: each
    slot holds exactly what the row alone holds (bits), and the logits are the row's alone."""
    prompts = [list(range(10, 10 + n)) for n in (7, 19, 12)]
    steps = [[3], [4, 5, 6, 7, 8], [9]]
    batch = SlotCache(invariant.config, 4, 8)  # room for 8 positions: the buffers grow
    together = _feed(invariant, batch, Step(0, (0, 0, 0), tuple(map(len, prompts)), 19), prompts)
    starts = tuple(len(p) for p in prompts)
    together2 = _feed(invariant, batch, Step(0, starts, tuple(map(len, steps)), 5), steps)
    for i, (prompt, step) in enumerate(zip(prompts, steps, strict=True)):
        alone = SlotCache(invariant.config, 1, 8)
        first = _feed(invariant, alone, Step(0, (0,), (len(prompt),), len(prompt)), [prompt])
        second = _feed(invariant, alone, Step(0, (len(prompt),), (len(step),), len(step)), [step])
        assert torch.equal(first[0], together[i]) and torch.equal(second[0], together2[i])
        n = len(prompt) + len(step)
        for (k1, v1), (k2, v2) in zip(alone.read(0, n), batch.read(i, n), strict=True):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert batch.slot_layers()[0].capacity >= 24 and batch.slot_layers()[0].buffers()[0].shape[0] == 4


def test_rows_move_between_slots_unchanged(invariant):
    cache = SlotCache(invariant.config, 3, 16)
    prompts = [[5, 6, 7], [8, 9, 10, 11], [12, 13]]
    _feed(invariant, cache, Step(0, (0, 0, 0), (3, 4, 2), 4), prompts)
    before = [cache.read(i, 4) for i in range(3)]
    with torch.inference_mode():
        cache.move([2, 0], 0, 4)  # overlapping: slot 0 takes slot 2, slot 1 takes slot 0 (read before any write)
    for slot, origin in ((0, 2), (1, 0)):
        for (k1, v1), (k2, v2) in zip(cache.read(slot, 4), before[origin], strict=True):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)


def test_a_slot_layer_is_written_inside_a_step_only(invariant):
    cache = SlotCache(invariant.config, 1, 4)
    with pytest.raises(RuntimeError, match="stepping"):
        cache.slot_layers()[0].update(torch.zeros(1, 1, 1, 64), torch.zeros(1, 1, 1, 64))


def test_the_stock_attention_reads_the_slots_through_the_steps_mask():
    """batch_invariant=False: stock SDPA over each row's slot with the 4D mask; a row's logits agree with the row
    alone up to rounding (stock kernels are not batch-invariant), and the mask is causal within each row."""
    model, tok = build_tiny_qwen3(seed=3)
    TransformersBackend(model, tok, batch_invariant=False)
    prompts = [list(range(10, 17)), list(range(20, 32))]
    batch = SlotCache(model.config, 2, 32)
    together = _feed(model, batch, Step(0, (0, 0), (7, 12), 12), prompts)
    for i, prompt in enumerate(prompts):
        alone = _feed(model, SlotCache(model.config, 1, 32), Step(0, (0,), (len(prompt),), len(prompt)), [prompt])
        assert torch.allclose(alone[0], together[i], atol=1e-5)
    mask = Step(0, (3, 0), (1, 2), 2).mask()
    assert mask.shape == (2, 1, 2, 4)
    assert mask[0, 0, 1].tolist() == [True, True, True, True]  # row 0's one query: its 3 keys and its own
    assert mask[1, 0].tolist() == [[True, False, False, False], [True, True, False, False]]
    with stepping(Step(0, (0,), (1,), 1)) as step:
        assert step.length == 1


def test_memory_follows_use_slots_and_positions_grow_without_changing_a_bit(invariant):
    """A cache for 4 rows that starts with 1 slot of 8 positions grows to the rows and lengths that come, and the
    rows compute the same bits as in a cache made big enough up front."""
    prompts = [list(range(10, 10 + n)) for n in (5, 30, 9)]
    small = SlotCache(invariant.config, 4, 8, first=1)
    big = SlotCache(invariant.config, 4, 64)
    assert small.slot_layers()[0].slots == 1
    outs = [_feed(invariant, cache, Step(0, (0, 0, 0), (5, 30, 9), 30), prompts) for cache in (small, big)]
    assert torch.equal(outs[0], outs[1])
    layer = small.slot_layers()[0]
    assert (layer.slots, layer.buffers()[0].shape[:1]) == (3, (3,)) and layer.capacity >= 30
    joined = [_feed(invariant, cache, Step(3, (0,), (4,), 4), [[7, 8, 9, 10]]) for cache in (small, big)]
    assert torch.equal(joined[0], joined[1]) and layer.slots == 4  # grown to the most the cache may hold
    for slot, n in ((0, 5), (1, 30), (2, 9), (3, 4)):
        for (k1, v1), (k2, v2) in zip(small.read(slot, n), big.read(slot, n), strict=True):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)


def test_a_leaving_row_costs_one_slot_copy_per_hole_and_changes_no_bits(monkeypatch):
    """Rows that finish early leave holes that the last running rows fill (one slot copied per hole, not a shift of
    every row after it), and every row still decodes what it decodes alone."""
    from brrm.backends.base import GenerationRequest
    from brrm.backends.transformers.decode import _refill

    assert _refill([0, 2, 3, 5, 6]) == [0, 5, 2, 3, 6] and _refill([0, 1, 2]) == [0, 1, 2] and _refill([4]) == [4]
    model, tok = build_tiny_qwen3()
    backend = TransformersBackend(model, tok, batch_size=6, scheduling="static", prefix_cache=False)
    backend.stop_ids = set()  # free-running: each row decodes exactly its budget
    budgets = (24, 2, 24, 5, 24, 3)
    reqs = [GenerationRequest(prompt_ids=tuple(range(7, 12 + i)), max_new_tokens=n, seed=i)
            for i, n in enumerate(budgets)]
    copies: list[int] = []
    move = SlotCache.move

    def counted(cache, sources, first, length):
        copies.append(sum(s != first + j for j, s in enumerate(sources)))
        return move(cache, sources, first, length)

    monkeypatch.setattr(SlotCache, "move", counted)
    batched = backend.generate(reqs, temperature=1.0)
    # row 1 leaves after 2 tokens and row 5 takes its slot; row 5 leaves after 3 and row 4 takes it; row 3 leaves
    # after 5 from the last slot: nothing moves (a shift would have copied 4, 3 and 0 slots)
    assert copies == [1, 1]
    monkeypatch.setattr(SlotCache, "move", move)
    alone = [backend.generate([r], temperature=1.0)[0] for r in reqs]
    assert [c.token_ids for c in batched] == [c.token_ids for c in alone]
    assert [len(c.token_ids) for c in batched] == list(budgets)
