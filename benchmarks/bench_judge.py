"""BR-RM judge speed on the tiny model: overhead vs raw ``model.generate``, batching, KV reuse.

Run: ``pytest benchmarks/bench_judge.py -s``. Each test measures the compared variants side by side in
one run and prints the ratio.
"""

from __future__ import annotations

import time

import pytest
import torch

from brrm.backends.transformers import TransformersBackend
from brrm.judges.brrm import BRRMConfig
from brrm.testing import brrm_judge
from brrm.types import SamplingConfig

PROMPTS = ["What is 17 * 3?", "Name a primary colour.", "Write a haiku about rain.", "Is 91 prime?"]
A = ["51.", "Red.", "Rain taps the roof.", "No, 91 = 7 x 13."]
B = ["57.", "Blue.", "Rain is water.", "Yes."]


def _pairs(n):
    return [PROMPTS[i % 4] + " " * (i // 4) for i in range(n)], [A[i % 4] for i in range(n)], \
        [B[i % 4] for i in range(n)]


def _config(**kw):
    base = {"sampling": SamplingConfig(temperature=0, max_new_tokens_per_turn=420), "thinking": "off",
            "block_token_cap": 32}
    return BRRMConfig(**{**base, **kw})


def _raw_generate(model, tok, prompts, new_tokens):
    """model.generate over left-padded prompts, exactly ``new_tokens`` new tokens for every row."""
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       pad_token_id=tok.pad_token_id)


def _spy(backend):
    """Record (keep_kv, requests, completions) of every generate call."""
    seen: list = []
    orig = backend.generate

    def spy(reqs, **kw):
        out = orig(reqs, **kw)
        seen.append((kw.get("keep_kv", False), reqs, out))
        return out

    backend.generate = spy
    return seen


def _raw_generate(model, prompts, new_tokens, pad_id):
    """model.generate over the same prompt ids (left-padded), exactly ``new_tokens`` per row."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=pad_id)


@pytest.mark.parametrize("decoding", ["constrained", "faithful"])
def test_judge_overhead_vs_raw_generate(benchmark, tiny, decoding):
    """Judge wall time ÷ raw model.generate over the same P1 and P2 prompts and token counts."""
    model, tok = tiny
    convs, a, b = _pairs(8)
    backend = TransformersBackend(model, tok, batch_size=8)
    budget = 420 if decoding == "constrained" else 64
    judge = brrm_judge(backend, _config(decoding=decoding, sampling=SamplingConfig(
        temperature=0, max_new_tokens_per_turn=budget)))
    seen = _spy(backend)
    judge.judge_pairs(convs, a, b)  # warm-up (grammar compile) and the turns' prompts and lengths
    turns = [(list(r.prompt_ids for r in reqs), max(len(c.token_ids) + 1 for c in outs))
             for _, reqs, outs in seen]

    def raw():
        for prompts, n in turns:
            _raw_generate(model, prompts, n, tok.pad_token_id)

    start = time.perf_counter()
    raw()
    raw_s = time.perf_counter() - start
    benchmark.pedantic(lambda: judge.judge_pairs(convs, a, b), rounds=3, iterations=1)
    ratio = benchmark.stats.stats.median / raw_s
    benchmark.extra_info.update(raw_generate_s=raw_s, ratio=ratio, turns=[n for _, n in turns])
    print(f"\n{decoding}: judge / raw model.generate = {ratio:.3f} (judge {benchmark.stats.stats.median:.3f} s, "
          f"raw {raw_s:.3f} s, tokens per turn {[n for _, n in turns]}, 8 rows)")


def test_batched_vs_single_calls(benchmark, tiny):
    model, tok = tiny
    convs, a, b = _pairs(16)
    batched = brrm_judge(TransformersBackend(model, tok, batch_size=16), _config())
    single = brrm_judge(TransformersBackend(model, tok, batch_size=1), _config())
    single.judge_pairs(convs[:1], a[:1], b[:1])
    start = time.perf_counter()
    for i in range(16):
        single.judge_pairs(convs[i:i + 1], a[i:i + 1], b[i:i + 1])
    single_s = time.perf_counter() - start
    benchmark.pedantic(lambda: batched.judge_pairs(convs, a, b), rounds=2, iterations=1)
    speedup = single_s / benchmark.stats.stats.median
    benchmark.extra_info.update(single_calls_s=single_s, speedup=speedup)
    print(f"\n16 pairs batched vs 16 single calls: speed-up {speedup:.2f}x "
          f"(batched {benchmark.stats.stats.median:.2f} s, single {single_s:.2f} s)")


def _turn2_prefill(model, tok, *, reuse: bool, decoding: str) -> tuple[int, int]:
    """(turn-2 tokens recomputed, new turn-2 tokens) summed over 8 pairs."""
    convs, a, b = _pairs(8)
    backend = TransformersBackend(model, tok, batch_size=8, prefix_cache=reuse)
    budget = 420 if decoding == "constrained" else 48
    judge = brrm_judge(backend, _config(decoding=decoding, sampling=SamplingConfig(
        temperature=0, max_new_tokens_per_turn=budget)))
    seen: list = []
    orig = backend.generate

    def spy(reqs, **kw):
        before = backend.stats["prefill_tokens"]
        out = orig(reqs, **kw)
        seen.append((kw.get("keep_kv", False), reqs, out, backend.stats["prefill_tokens"] - before))
        return out

    backend.generate = spy
    judge.judge_pairs(convs, a, b)
    if len(seen) < 2:
        return 0, 0
    (_, reqs1, outs1, _), (_, reqs2, _, recomputed) = seen[-2], seen[-1]
    # P2 rows are the turn-1 rows that finished; in faithful mode the tiny model may not end turn 1
    t1 = {r.prompt_ids: len(c.token_ids) for r, c in zip(reqs1, outs1, strict=True)}
    new = 0
    for r in reqs2:
        p1 = next(p for p in t1 if r.prompt_ids[:len(p)] == p)
        new += len(r.prompt_ids) - len(p1) - t1[p1]
    return recomputed, new


def test_turn2_prefill_with_and_without_reuse(benchmark, tiny):
    """Turn-2 prefill recomputation ÷ new turn-2 tokens: with KV reuse vs recompute-all (released eval)."""
    model, tok = tiny
    figures = {}
    for decoding in ("constrained", "faithful"):
        for reuse in (True, False):
            recomputed, new = _turn2_prefill(model, tok, reuse=reuse, decoding=decoding)
            if not new:
                print(f"\n{decoding}: no pair reached turn 2")
                continue
            figures[f"{decoding}_{'reuse' if reuse else 'no_reuse'}"] = recomputed / new
            print(f"\n{decoding}, {'with' if reuse else 'without'} reuse: turn-2 prefill {recomputed} tokens for "
                  f"{new} new tokens -> ratio {recomputed / new:.3f}")
    benchmark.extra_info.update(figures)
    benchmark.pedantic(lambda: _turn2_prefill(model, tok, reuse=True, decoding="constrained"), rounds=1,
                       iterations=1)
