"""``gpu_check.py --decoding``: the released protocol (``faithful``) beside constrained decoding on one engine.

One process, one vLLM engine (prefix caching on): N pairs judged with ``decoding="faithful"`` (one free engine
request per turn) and with ``decoding="constrained"`` (a chain of engine requests per turn, one per constraint
phase), each after a warm-up. Each row: seconds, generated tokens, seconds per generated token, engine requests
per judgment, prompt tokens sent, prefix-cache hits, parsed verdicts; then constrained ÷ faithful seconds per
generated token (the CPU figure of ``benchmarks/bench_vllm_decoding.py``, issue 31.3, targets <= 1.1).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

MODES = ("faithful", "constrained")


def decoding_worker(args: argparse.Namespace, engine: dict[str, Any], judge_workload: Any, make_pairs: Any) -> None:
    """``--worker dec``: both decodings on one engine; prints one ``RESULT`` JSON line ``{mode: row}``."""
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(args.model_dir, **engine)
    pairs = make_pairs(args.n, words_prompt=args.words_prompt, words_response=args.words_response)
    warm = make_pairs(2, words_prompt=20, words_response=20, seed=1)
    rows = {}
    for mode in MODES:
        work = {"turn_tokens": args.turn_tokens, "block_cap": args.block_cap, "decoding": mode}
        judge_workload(backend, warm, **work)
        before = dict(backend.stats)
        run = judge_workload(backend, pairs, **work)
        delta = {k: backend.stats[k] - before[k] for k in ("phases", "prompt_tokens", "cached_tokens",
                                                           "generated_tokens")}
        rows[mode] = {"judgments": run["judgments"], "ok": run["ok"], "seconds": round(run["seconds"], 2),
                      "generated_tokens": delta["generated_tokens"],
                      "ms_per_generated_token": round(1000 * run["seconds"] / max(1, delta["generated_tokens"]), 4),
                      "engine_requests_per_judgment": round(delta["phases"] / max(1, run["judgments"]), 2),
                      "engine_prompt_tokens": delta["prompt_tokens"], "prefix_cache_hits": delta["cached_tokens"]}
    backend.close()
    print("RESULT " + json.dumps(rows), flush=True)


def decoding_report(rows: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Print the two rows and the ratio; return them as a dict."""
    ratio = rows["constrained"]["ms_per_generated_token"] / rows["faithful"]["ms_per_generated_token"]
    print(f"\nfaithful vs constrained on vLLM — {meta['model']}; N={meta['n']}, {meta['turn_tokens']} tokens per turn")
    keys = list(rows["faithful"])
    print(f"{'':30s}" + "".join(f"{m:>14s}" for m in MODES))
    for k in keys:
        print(f"{k:30s}" + "".join(f"{rows[m][k]!s:>14s}" for m in MODES))
    print(f"constrained ÷ faithful, seconds per generated token: {ratio:.3f}")
    return {"meta": meta, "decoding": rows, "ratio_s_per_token_constrained_vs_faithful": round(ratio, 3)}
