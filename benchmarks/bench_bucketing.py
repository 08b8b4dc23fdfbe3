"""Length bucketing vs naive fixed-size batching for Bradley–Terry scoring (pytest-benchmark).

Data: every chosen and rejected response of RM-Bench's chat domain (129 prompts × 6 responses = 774
sequences, ``../shared/data/RM-Bench/chat_filtered.json``), tokenized with the exact Qwen3 tokenizer and its
chat template (39–671 tokens each). Model: the tiny random Qwen3 sequence classifier on Qwen3's vocabulary.

Both variants run in the same session on the same pre-tokenized sequences, alternating round by round (so
that load from other processes hits both alike), with at most 16 rows per batch:

* naive — batches of 16 in input order, each padded to its longest row;
* bucketed — sorted by length into batches of at most 16 rows and 16,384 padded tokens, order restored.

Checks: padding waste of the bucketed run ≤ 10 % of the tokens run; both variants give the same rewards
(|Δ| ≤ 1e-5, fp32). Printed: padding waste of each, throughput (real tokens / s) and the ratios.

Run: ``pytest benchmarks/bench_bucketing.py -s`` (add ``--benchmark-only`` to skip nothing else).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from brrm.testing import build_qwen3_tokenizer, build_tiny_qwen3

SHARED = Path(os.environ.get("BRRM_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
CHAT = SHARED / "data" / "RM-Bench" / "chat_filtered.json"
BATCH, BUDGET, ROUNDS = 16, 16384, 3


@pytest.fixture(scope="module")
def setup():
    if not CHAT.is_file():
        pytest.skip(f"{CHAT} not found: RM-Bench data is only on developer and CI machines")
    from brrm.reward_models.bradley_terry import BradleyTerryRewardModel

    tok = build_qwen3_tokenizer()
    model, _ = build_tiny_qwen3(tok, seed=0, sequence_classification=True)
    records = json.loads(CHAT.read_text(encoding="utf-8"))
    rm = BradleyTerryRewardModel.from_model(model, tok, model_id="tiny-qwen3-rm")
    sequences = [rm.encode(r["prompt"], resp).ids for r in records for resp in (*r["chosen"], *r["rejected"])]
    naive = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=BATCH, token_budget=1 << 30,
                                               bucketing=False)
    bucketed = BradleyTerryRewardModel.from_model(model, tok, max_batch_size=BATCH, token_budget=BUDGET,
                                                  bucketing=True)
    return sequences, naive, bucketed


def _run(rm, sequences):
    """The backend's scalar head over the sequences (what ``score`` runs after encoding), counters reset."""
    rm.backend.scorer.stats.update(classify_batches=0, classify_real_tokens=0, classify_padded_tokens=0)
    return [s.value for s in rm.backend.classify(sequences)]


def test_bucketing_padding_waste_and_throughput(benchmark, setup):
    sequences, naive, bucketed = setup
    real = sum(len(s) for s in sequences)
    _run(naive, sequences[:32])  # warm-up
    naive_times, naive_out = [], []

    def time_naive():  # pedantic's untimed setup: each bucketed round follows a naive one (fair under load)
        start = time.perf_counter()
        naive_out[:] = _run(naive, sequences)
        naive_times.append(time.perf_counter() - start)

    bucketed_rewards = benchmark.pedantic(
        _run, args=(bucketed, sequences), setup=time_naive, rounds=ROUNDS, iterations=1
    )
    naive_rewards = naive_out
    naive_s, bucketed_s = min(naive_times), benchmark.stats.stats.min
    waste_naive, waste_bucketed = naive.padding_waste, bucketed.padding_waste
    assert all(isinstance(v, float) for v in bucketed_rewards)
    assert max(abs(a - b) for a, b in zip(naive_rewards, bucketed_rewards, strict=True)) <= 1e-5
    info = {
        "sequences": len(sequences),
        "real_tokens": real,
        "padding_waste_naive": round(waste_naive, 4),
        "padding_waste_bucketed": round(waste_bucketed, 4),
        "tokens_run_naive": naive.stats["classify_padded_tokens"],
        "tokens_run_bucketed": bucketed.stats["classify_padded_tokens"],
        "throughput_naive_tok_s": round(real / naive_s),
        "throughput_bucketed_tok_s": round(real / bucketed_s),
        "speedup": round(naive_s / bucketed_s, 3),
        "tokens_run_ratio": round(naive.stats["classify_padded_tokens"] / bucketed.stats["classify_padded_tokens"], 3),
    }
    benchmark.extra_info.update(info)
    print("\nlength bucketing on RM-Bench chat (774 sequences, exact Qwen3 tokens, tiny Qwen3 RM):")
    for key, value in info.items():
        print(f"  {key:28s} {value}")
    assert waste_bucketed <= 0.10
