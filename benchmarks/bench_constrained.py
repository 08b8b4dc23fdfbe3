"""Constrained vs unconstrained decoding: per-token cost on the tiny model and on the exact-Qwen-vocabulary
tiny model (151,669 tokens, where masks are largest). Grammar compile time is reported separately.

Run: ``pytest benchmarks/bench_constrained.py -s``.
"""

from __future__ import annotations

import time

import pytest

from brrm.backends.base import GenerationRequest
from brrm.backends.transformers import TransformersBackend
from brrm.constraints import COMPILE_SECONDS, Pattern, Program
from brrm.judges.brrm_format import turn1_program

N_TOKENS = 64
ROWS = 8


def _requests(tok, program):
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Describe item {i} briefly."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
               for i in range(ROWS)]
    return [GenerationRequest(tuple(p), N_TOKENS, seed=i, program=program) for i, p in enumerate(prompts)]


@pytest.mark.parametrize("model_name", ["tiny", "tiny_exact"])
def test_constrained_per_token_cost(benchmark, request, model_name):
    model, tok = request.getfixturevalue(model_name)
    backend = TransformersBackend(model, tok, batch_size=ROWS, prefix_cache=False)
    # free text that never ends by itself within N_TOKENS: every step is masked by the guide
    program = Program((Pattern(r"[^\[]+\n\[", cap=N_TOKENS + 8, force="\n["),))
    before = len(COMPILE_SECONDS)
    start = time.perf_counter()
    backend.compiled(program)
    backend.compiled(turn1_program(0, 32))
    compile_s = time.perf_counter() - start
    free = _requests(tok, None)
    constrained = _requests(tok, program)

    def run(reqs):
        t = time.perf_counter()
        outs = backend.generate(reqs, temperature=1.0)
        return (time.perf_counter() - t) / sum(len(o.token_ids) + 1 for o in outs)

    run(free)
    free_per_token = min(run(free) for _ in range(3))
    benchmark.pedantic(lambda: run(constrained), rounds=3, iterations=1)
    per_token = min(run(constrained) for _ in range(2))
    ratio = per_token / free_per_token
    benchmark.extra_info.update(ratio=ratio, compile_s=compile_s, indices_compiled=len(COMPILE_SECONDS) - before)
    print(f"\n{model_name} (vocab {len(tok)}): constrained / unconstrained per-token cost = {ratio:.3f} "
          f"({per_token * 1e3:.2f} vs {free_per_token * 1e3:.2f} ms/token, {ROWS} rows); grammar compile "
          f"{compile_s:.2f} s for {len(COMPILE_SECONDS) - before} indices (once per tokenizer)")
