"""Self-consistency voting cost on the tiny model (issue 21.3): k = 4 judgments per pair vs one, side by side.

Target: voting with k = 4 through the transformers backend costs <= 4.2x one sample. The k samples of a pair go
to the backend in one call next to each other; identical turn-1 prompts share one prefill (the decoder copies the
KV to each sample's row), turn 2 reuses each sample's own turn-1 KV. Both variants run at the published
temperature 1.0 with constrained decoding (bounded blocks), every timed judgment must be ok.

Run: ``pytest benchmarks/bench_voting.py -s``.
"""

from __future__ import annotations

import time

from brrm.backends.transformers import TransformersBackend
from brrm.compose import PairwiseRewardJudge
from brrm.judges.brrm import BRRMConfig, BRRMJudge
from brrm.types import SamplingConfig

PROMPTS = ["What is 17 * 3?", "Name a primary colour.", "Write a haiku about rain.", "Is 91 prime?"]
A = ["51.", "Red.", "Rain taps the roof.", "No, 91 = 7 x 13."]
B = ["57.", "Blue.", "Rain is water.", "Yes."]
K = 4


def _judge(model, tok, samples):
    backend = TransformersBackend(model, tok, batch_size=8)
    config = BRRMConfig(sampling=SamplingConfig(temperature=1.0, max_new_tokens=420, seed=5),
                        thinking="off", block_token_cap=16)
    return PairwiseRewardJudge(BRRMJudge(backend, config), samples=samples), backend


def _timed(judge, convs, a, b, rounds=3):
    best, out = float("inf"), []
    for _ in range(rounds):
        start = time.perf_counter()
        out = judge.judge_pairs(convs, a, b)
        best = min(best, time.perf_counter() - start)
    return best, out


def test_voting_k4_costs_at_most_4_2x_one_sample(benchmark, tiny):
    model, tok = tiny
    convs = [PROMPTS[i % 4] + " " * (i // 4) for i in range(8)]
    a, b = [A[i % 4] for i in range(8)], [B[i % 4] for i in range(8)]
    one, _ = _judge(model, tok, 1)
    voted, backend = _judge(model, tok, K)
    _timed(one, convs[:2], a[:2], b[:2], rounds=1)  # warm-up: grammar compilation, allocator
    t1, out1 = _timed(one, convs, a, b)
    tk, outk = _timed(voted, convs, a, b)
    assert all(j.ok for j in out1) and all(j.ok and j.samples == K and len(j.sub_judgments) == K for j in outk)
    gen1 = sum(j.generated_tokens for j in out1)
    genk = sum(j.generated_tokens for j in outk)
    ratio = tk / t1
    shared = backend.stats["shared_prompt_tokens"]
    benchmark.extra_info.update(one_sample_s=t1, voted_s=tk, ratio=ratio, generated_one=gen1, generated_voted=genk,
                                shared_prompt_tokens=shared)
    print(f"\n8 pairs: k=1 {t1:.2f} s ({gen1} generated tokens), k={K} {tk:.2f} s ({genk} tokens): {ratio:.2f}x; "
          f"turn-1 prefill shared across samples saved {shared} prompt tokens over 3 timed rounds")
    assert shared > 0
    assert ratio <= 4.2
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
