"""What the suite's tiny models cost to build (moved here from a timed unit test, issue 44): training the tier-1
tiny BPE tokenizer from scratch, and a build from the per-process cache. Targets: under 1 s to train and under
0.5 s to build from the cache on the 2-core box; printed, not asserted, since a shared machine's other load moves
them. Each timed build must succeed (the tokenizer holds ``<|im_end|>``).

Run: ``pytest benchmarks/bench_testing_models.py -s``.
"""

from __future__ import annotations

from brrm import testing
from brrm.testing import tokenizers as tokenizer_builders


def test_tiny_tokenizer_training(benchmark):
    import transformers  # noqa: F401  (import time is not training time)

    def train() -> str:
        tokenizer_builders._tiny_tokenizer_json.cache_clear()
        return tokenizer_builders._tiny_tokenizer_json()

    trained = benchmark.pedantic(train, rounds=3, iterations=1)
    assert '"<|im_end|>"' in trained
    print(f"\ntiny tokenizer: trained in {benchmark.stats['min']:.3f} s (target < 1 s)")


def test_tiny_tokenizer_from_the_cache(benchmark):
    testing.build_tiny_tokenizer()  # trained once, then cached
    tok = benchmark(testing.build_tiny_tokenizer)
    assert tok.convert_tokens_to_ids("<|im_end|>") is not None
    print(f"\ntiny tokenizer: built from the cache in {benchmark.stats['min']:.4f} s (target < 0.5 s)")
