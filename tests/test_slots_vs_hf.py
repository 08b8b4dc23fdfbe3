"""The slot-cache decoder against Hugging Face's own ``model.generate``, on tiny random models of several families:
greedy free generation gives the same tokens as each prompt generated alone by ``generate(do_sample=False)``, for
prompts of different lengths in one batch, on stock attention (``batch_invariant=False``: Qwen3, Llama, Mistral and
Qwen2 with a sliding window shorter than prompt + generation, Gemma2/Gemma3 mixing sliding and full layers, GPT-2
with absolute positions and Conv1D) and on the batch-invariant forward for the models it takes; static and
continuous scheduling, batch sizes 3/8 (a row alone among them). Then the decoder's harder paths: a turn 2 from the
prefix cache, rows finishing at different steps, ``max_new_tokens=1``, shared prompts (voting), prompts past the slot
buffers' first capacity, a call joining a running batch with shared prompts, the memory a long budget holds, and
models the slot cache cannot hold refused with a clear error."""

from __future__ import annotations

import functools
import random
import threading

import pytest
import torch
import transformers as hf

from brrm.backends.base import GenerationRequest, Next
from brrm.backends.transformers import TransformersBackend
from brrm.backends.transformers.slots import SlotLayer
from brrm.errors import ConfigError
from brrm.testing import build_tiny_qwen3
from brrm.testing.models import favour_tokens
from brrm.testing.tokenizers import build_tiny_tokenizer

TOK = build_tiny_tokenizer()
EOS = TOK.convert_tokens_to_ids("<|im_end|>")
PAD = TOK.pad_token_id if TOK.pad_token_id is not None else EOS
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 1024}
WINDOW = 8  # shorter than most prompts + generations below: the window matters
FAMILIES = {  # transformers class names, looked up when a model is built (not at collection)
    "qwen3": None,
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": WINDOW}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"sliding_window": WINDOW, "use_sliding_window": True,
                                                "max_window_layers": 1}),  # layer 0 full, layer 1 sliding
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"sliding_window": WINDOW, "head_dim": 16}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"sliding_window": WINDOW, "head_dim": 16,
                                                       "num_hidden_layers": 3, "sliding_window_pattern": 2}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 1024}),
}
INVARIANT = ("qwen3", "llama")
"""The families the batch-invariant forward takes (the others are refused by it, and decode on stock attention)."""
LENGTHS = (3, 17, 9, 30, 1, 12, 22, 7, 5)
NEW = 10
"""Greedy tokens per row: every prompt + generation runs past the window of 8 (the shortest prompt is 1 token)."""
SCHEDULES = (("static", (3, 8)), ("continuous", (3, 8)))
"""Batch sizes per scheduling: 9 prompts in three batches of 3, or in one of 8 and one of 1 (static: the ninth row
runs alone); rows leaving and joining a running batch of 3 and of 8 (continuous; the last rows run alone). Batch
size 1 (every row alone, one forward per token of each) adds no path these do not run."""


def build(family: str, seed: int = 0) -> torch.nn.Module:
    """A tiny random causal LM of ``family`` over the tiny tokenizer (eos = ``<|im_end|>``), in eval mode."""
    spec = FAMILIES[family]
    if spec is None:
        return build_tiny_qwen3(TOK, seed=seed)[0]
    config_name, model_name, extra = spec
    config_cls, model_cls = getattr(hf, config_name), getattr(hf, model_name)
    shape = {} if family == "gpt2" else SHAPE
    config = config_cls(vocab_size=len(TOK), eos_token_id=EOS, pad_token_id=PAD, bos_token_id=PAD,
                        **{**shape, **extra})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config).eval()
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD
    return model


def prompts(lengths: tuple[int, ...] = LENGTHS, seed: int = 1) -> list[list[int]]:
    r = random.Random(seed)
    return [[r.randrange(10, len(TOK) - 10) for _ in range(n)] for n in lengths]


def reference(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    """HF's greedy generation of ``prompt`` alone (no padding), without the stop token."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
                             do_sample=False, max_new_tokens=new, eos_token_id=EOS, pad_token_id=PAD)
    ids = out[0, len(prompt):].tolist()
    return ids[:ids.index(EOS)] if EOS in ids else ids


@functools.cache
def references(family: str, new: int = NEW) -> tuple[tuple[int, ...], ...]:
    model = build(family)
    return tuple(tuple(reference(model, p, new)) for p in prompts())


def budget_references(family: str, ps: list[list[int]], budgets: list[int]) -> list[tuple[int, ...]]:
    """HF's tokens for each prompt alone with its own budget, on ``build(family)``: computed once per process."""
    return _budget_references(family, tuple(map(tuple, ps)), tuple(budgets))


@functools.cache
def _budget_references(family: str, ps: tuple[tuple[int, ...], ...],
                       budgets: tuple[int, ...]) -> list[tuple[int, ...]]:
    model = build(family)
    return [tuple(reference(model, list(p), n)) for p, n in zip(ps, budgets, strict=True)]


def requests(ps: list[list[int]], new: int | list[int] = NEW,
             seeds: list[int] | None = None) -> list[GenerationRequest]:
    news = new if isinstance(new, list) else [new] * len(ps)
    return [GenerationRequest(prompt_ids=tuple(p), max_new_tokens=n, seed=(seeds or [0] * len(ps))[i])
            for i, (p, n) in enumerate(zip(ps, news, strict=True))]


def tokens(completions) -> list[tuple[int, ...]]:
    assert not [c.error for c in completions if c.error]
    return [tuple(c.token_ids) for c in completions]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("invariant", [False, True], ids=["stock", "invariant"])
def test_greedy_generation_equals_hf_generate(family, invariant):
    """Every scheduling and batch size: each row's tokens are HF's for its prompt alone (a window of 8 shorter than
    the rows, mixed sliding/full layers, absolute positions included); the batch-invariant forward takes the plain
    causal families and refuses the others with a one-line error naming the option."""
    if invariant and family not in INVARIANT:
        with pytest.raises(ConfigError, match="batch_invariant"):
            TransformersBackend(build(family), TOK, batch_invariant=True)
        return
    ref = list(references(family))
    assert sum(map(len, ref)) > 6 * NEW  # long generations: rows run far past the window
    for scheduling, sizes in SCHEDULES:
        model = build(family)
        for batch_size in sizes:
            backend = TransformersBackend(model, TOK, batch_invariant=invariant, scheduling=scheduling,
                                          batch_size=batch_size)
            assert backend.info.details["batch_invariant"] is invariant
            assert tokens(backend.generate(requests(prompts()), temperature=0.0)) == ref, (scheduling, batch_size)


@pytest.mark.parametrize("invariant", [False, True], ids=["stock", "invariant"])
@pytest.mark.parametrize("scheduling", ["static", "continuous"])
def test_rows_finishing_at_different_steps_and_one_token_budgets_equal_hf(invariant, scheduling):
    """Budgets 1 … 16 in one batch (a row with ``max_new_tokens=1`` finishes on its prefill) and more requests than
    the batch holds: rows leave at different steps, the rows after them move down, queued ones join."""
    model = build("mistral" if not invariant else "qwen3")
    ps = prompts()
    budgets = [1, 16, 3, 1, 9, 2, 16, 5, 1]
    ref = budget_references("mistral" if not invariant else "qwen3", ps, budgets)
    backend = TransformersBackend(model, TOK, batch_invariant=invariant, scheduling=scheduling, batch_size=3)
    got = backend.generate(requests(ps, budgets), temperature=0.0)
    assert tokens(got) == ref
    assert [len(c.token_ids) for c in got][:1] == [1]


@pytest.mark.parametrize("family", ["qwen3", "mistral", "gemma3"])
def test_a_follow_up_from_the_prefix_cache_equals_computing_it_from_scratch(family):
    """BR-RM's turn 2: a prompt extending a finished row's prompt + generation reuses the row's KV (written into a
    slot, the rest of the prompt fed after it, in a batch with uncached rows) and gets the tokens computed from
    scratch with the prefix cache off, and HF's."""
    ps = prompts((5, 14, 26))
    expected: dict[tuple[tuple[int, ...], ...], list[tuple[int, ...]]] = {}  # HF's tokens, by the turn-2 prompts
    for scheduling in ("static", "continuous"):
        on = TransformersBackend(build(family), TOK, batch_invariant=False, scheduling=scheduling, batch_size=3)
        off = TransformersBackend(build(family), TOK, batch_invariant=False, scheduling=scheduling, batch_size=3,
                                  prefix_cache=False)
        first = on.generate(requests(ps), temperature=0.0, keep_kv=True)
        turn2 = [p + list(c.token_ids) + [EOS, 40, 41, 42] for p, c in zip(ps, first, strict=True)]
        turn2.append(prompts((11,), seed=9)[0])  # a row with nothing cached, in the same batch
        cached = on.generate(requests(turn2), temperature=0.0)
        assert [c.cached_prompt_tokens > len(p) for c, p in zip(cached, ps, strict=False)] == [True] * 3
        assert cached[3].cached_prompt_tokens == 0
        fresh = off.generate(requests(turn2), temperature=0.0)
        key = tuple(map(tuple, turn2))
        if key not in expected:
            expected[key] = [tuple(reference(on.model, p, NEW)) for p in turn2]
        assert tokens(cached) == tokens(fresh) == expected[key]
    chained = TransformersBackend(build(family), TOK, batch_invariant=False, batch_size=2)

    turns = [0, 0, 0]

    def then(i: int, comp) -> Next | None:  # turn 2 joins the running batch as its turn 1 ends
        turns[i] += 1
        return Next(requests([ps[i] + list(comp.token_ids) + [EOS, 40, 41, 42]])[0]) if turns[i] == 1 else None

    got = chained.generate(requests(ps), temperature=0.0, keep_kv=True, then=then)
    assert tokens(got) == tokens(fresh)[:3] and chained.stats["cached_tokens"] > sum(map(len, ps))


def test_voting_rows_share_one_prefill_and_sample_as_alone():
    """The same prompt five times with different seeds (self-consistency voting), among other prompts: the prefix
    cache's shared prefill is counted, and each row samples exactly its tokens alone (batch-invariant forward)."""
    ps = prompts((6,)) * 5 + prompts((13, 4), seed=3)
    reqs = requests(ps, seeds=[0, 1, 2, 3, 4, 0, 0])
    model = build("qwen3")
    alone = [tokens(TransformersBackend(model, TOK, batch_size=1, prefix_cache=False).generate([r], temperature=1.0))
             for r in reqs]
    for scheduling in ("static", "continuous"):
        backend = TransformersBackend(model, TOK, batch_size=8, scheduling=scheduling)
        got = tokens(backend.generate(reqs, temperature=1.0))
        assert got == [a[0] for a in alone]
        assert backend.stats["shared_prompt_tokens"] == 4 * 6
        assert len(set(got[:5])) > 1  # the seeds differ


def test_a_joining_call_with_shared_prompts_fills_slots_past_the_grown_buffers():
    """A call of four identical prompts joins a running batch of one row: its one shared prefill is copied into four
    slots, past the two the buffers had grown to (before: ``IndexError`` from the slot copy, failing both calls)."""
    model = build("qwen3")
    backend = TransformersBackend(model, TOK, batch_size=8)
    voting = requests(prompts((20,)) * 4, new=6, seeds=[0, 1, 2, 3])
    alone = tokens(TransformersBackend(model, TOK, batch_size=1).generate(voting, temperature=1.0))
    out: dict[str, list[tuple[int, ...]]] = {}
    joiner: list[threading.Thread] = []
    rows_seen: list[int] = []

    def on_step(rows: int, added: int) -> None:
        rows_seen.append(rows)
        if not joiner:
            joiner.append(threading.Thread(target=lambda: out.update(b=tokens(
                backend.generate(voting, temperature=1.0)))))
            joiner[0].start()
            joiner[0].join(timeout=0.5)  # let it queue its rows before the next step

    out["a"] = tokens(backend.generate(requests(prompts((5,)), new=40), temperature=1.0, on_step=on_step))
    joiner[0].join(timeout=120)
    assert out["b"] == alone and len(out["a"][0]) == 40
    assert max(rows_seen) == 5  # the four joined the running row


@pytest.mark.parametrize("invariant", [False, True], ids=["stock", "invariant"])
def test_prompts_past_the_first_capacity_grow_the_slots(invariant):
    """Continuous batching sizes the slots for its first rows; a 700-token prompt joining later, and generation past
    the first stretch, grow the buffers (one copy) with every row's tokens still HF's."""
    model = build("qwen3")
    ps = prompts((4, 9, 700), seed=5)
    budgets = [300, 6, 12]
    ref = budget_references("qwen3", ps, budgets)
    backend = TransformersBackend(model, TOK, batch_invariant=invariant, batch_size=2)
    capacities: list[int] = []
    grow = SlotLayer.grow

    def watched(self, length: int = 0, slots: int = 0) -> None:
        grow(self, length, slots)
        capacities.append(self.capacity)

    SlotLayer.grow = watched  # type: ignore[method-assign]
    try:
        got = tokens(backend.generate(requests(ps, budgets), temperature=0.0))
    finally:
        SlotLayer.grow = grow  # type: ignore[method-assign]
    assert got == ref
    assert capacities and max(capacities) >= 712  # the long prompt outgrew the first rows' 9 + 256 positions


@pytest.mark.parametrize("scheduling", ["static", "continuous"])
def test_a_long_budget_is_not_allocated_up_front(scheduling):
    """``max_new_tokens=8192`` on rows that stop at once: the buffers hold the rows' slots (3 of the batch's 4) and
    the prompt plus a first stretch of decoding (hundreds of positions), never the budget."""
    model = favour_tokens(build("qwen3"), {EOS: 50.0})  # every row stops at once
    backend = TransformersBackend(model, TOK, batch_size=4, scheduling=scheduling)
    shapes: list[tuple[int, ...]] = []
    init = SlotLayer.lazy_initialization

    def watched(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        init(self, keys, values)
        shapes.append(tuple(self.buffers()[0].shape))

    SlotLayer.lazy_initialization = watched  # type: ignore[method-assign]
    try:
        got = backend.generate(requests(prompts((12, 30, 7)), new=8192), temperature=0.0)
    finally:
        SlotLayer.lazy_initialization = init  # type: ignore[method-assign]
    assert [c.finish_reason for c in got] == ["stop"] * 3
    assert shapes and all(s[0] == 3 and 30 < s[2] <= 30 + 256 for s in shapes), shapes


def test_models_the_slot_cache_cannot_hold_are_refused_before_decoding():
    """Chunked attention (Llama 4's layer type; transformers caches it in a sliding-window layer) would be decoded
    with a full causal mask, and a hybrid linear-attention layer (its cache class subclasses ``DynamicLayer``) would
    lose its recurrent state: before, both decoded silently; now each is refused with one line naming the layer
    type, when the backend is built (before any request)."""
    for layer_types in (["full_attention", "chunked_attention"], ["full_attention", "hybrid"]):
        model = build("llama")
        model.config.layer_types, model.config.attention_chunk_size = layer_types, 4
        with pytest.raises(ConfigError, match=layer_types[1]):
            TransformersBackend(model, TOK, batch_invariant=False)


@pytest.mark.parametrize("family", ["mistral", "gemma3", "gpt2"])
def test_forced_markers_in_a_batch_equal_one_token_at_a_time_alone(family):
    """A program's forced text (a closed think block, a literal) is fed several tokens per forward beside rows
    feeding one (mixed widths, across the sliding window): the tokens, and the choice's logits up to rounding, are
    those of each row decoded alone one token per forward."""
    from brrm.constraints.program import Choice, Literal, Program, Think

    program = Program((Think(6), Literal("Verdict: "), Choice(("1", "2")), Literal(" done")))
    ps = prompts((3, 17, 9, 12, 6))
    reqs = [GenerationRequest(prompt_ids=tuple(p), max_new_tokens=60, program=program) for p in ps]
    model = build(family)
    alone = [TransformersBackend(model, TOK, batch_invariant=False, batch_size=1, jump_forward=False,
                                 scheduling="static").generate([r], temperature=0.0)[0] for r in reqs]
    assert all(c.finish_reason == "stop" and "Verdict: " in c.text for c in alone)
    for scheduling in ("static", "continuous"):
        backend = TransformersBackend(model, TOK, batch_invariant=False, batch_size=4, scheduling=scheduling)
        got = backend.generate(reqs, temperature=0.0)
        assert tokens(got) == tokens(alone)
        for c, a in zip(got, alone, strict=True):
            assert torch.allclose(torch.tensor(c.choice_logits), torch.tensor(a.choice_logits), atol=1e-4)


def test_a_row_with_non_finite_keys_leaves_nothing_in_its_slot_for_the_next_row():
    """A row whose prompt holds a token with a NaN embedding fails (non-finite logits) and leaves; its follow-up,
    shorter, joins its slot while a longer row runs. Stock attention reads the slot up to the batch's length, masked:
    before, the NaN keys left there made every follow-up fail too (a masked NaN still poisons the weighted sum);
    now the slot is cleared and the follow-up gets HF's tokens at its first try."""
    model = build("qwen3")
    bad = 77
    with torch.no_grad():
        model.get_input_embeddings().weight[bad] = float("nan")
    x, y, follow = prompts((4,), 1)[0], prompts((8,), 2)[0] + [bad], prompts((3,), 3)[0]
    backend = TransformersBackend(model, TOK, batch_invariant=False, batch_size=2)
    tries: list[str] = []

    def then(i: int, comp) -> Next | None:
        if i == 0:
            return None
        tries.append(comp.finish_reason)
        return Next(requests([follow])[0]) if len(tries) == 1 else None

    got = backend.generate(requests([x, y], [40, 5]), temperature=0.0, then=then)
    assert tries == ["error", "length"]
    assert len(got[0].token_ids) == 40 and tokens(got[1:]) == [tuple(reference(model, follow, NEW))]


def test_attention_kernels_that_ignore_the_slot_mask_are_refused_before_decoding():
    """Flex, flash and paged attention read a padding mask (or none), not the step's 4D mask over each row's slot,
    so they would attend to other positions of it: refused with one line naming the implementation and the fix,
    when the backend is built (before any request)."""
    model = build("qwen3")
    model.set_attn_implementation("flex_attention")
    for scheduling in ("static", "continuous"):
        with pytest.raises(ConfigError, match="not 'flex_attention': load the model with attn_implementation='sdpa'"):
            TransformersBackend(model, TOK, batch_invariant=False, scheduling=scheduling)


@pytest.mark.parametrize("scheduling", ["static", "continuous"])
def test_shared_prompts_on_stock_attention_with_a_window_equal_hf(scheduling):
    """Four identical prompts among others, Mistral with its window of 8: one shared prefill copied into four slots
    (and, continuous, into slots past the ones the buffers started with), every row HF's tokens."""
    model = build("mistral")
    ps = prompts((3, 12)) + prompts((14,), seed=4) * 4
    backend = TransformersBackend(model, TOK, batch_invariant=False, batch_size=8, scheduling=scheduling)
    assert tokens(backend.generate(requests(ps), temperature=0.0)) == [tuple(reference(model, p, NEW)) for p in ps]
    assert backend.stats["shared_prompt_tokens"] == 3 * 14
