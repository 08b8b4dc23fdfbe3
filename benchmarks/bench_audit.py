"""``brrm audit`` overhead on the tiny model: the audit vs plain ``brrm judge``-style judging of the same 64 pairs
(the store must not slow judging), and a rerun of a finished audit (no model call; seconds).

Run: ``pytest benchmarks/bench_audit.py -s``. The two are measured side by side in one run, alternating, and the
fastest round of each is compared.
"""

from __future__ import annotations

import json
import time

import pytest

import brrm
from brrm.audit import AuditOptions, JudgeSpec, plan_items, run_audit
from brrm.records import read_records

N_PAIRS = 64
ROUNDS = 5  # rounds of each, alternated; the best of each is compared (this box's noise is 10-25% a round)
OPTIONS = {"kind": "brrm", "temperature": 0.0, "max_new_tokens": 420, "block_token_cap": 8, "thinking": "off"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    base = tmp_path_factory.mktemp("bench-audit")
    model = str(save_tiny_qwen3(base / "tiny"))
    rows = [{"id": f"p{k}", "prompt": f"What is {k} times 3?", "response_a": f"{3 * k}.",
             "response_b": f"It is {3 * k + 1}.", "label": "A", "source": f"s{k % 4}"} for k in range(N_PAIRS)]
    path = base / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    judge = brrm.load(model, **OPTIONS)
    judge.judge_pairs(["warm-up?"], ["a"], ["b"])  # grammar compile / index load, outside the timings
    return base, model, path, judge


def plain_judge(judge, records, out_path):
    """What ``brrm judge`` does: chunks of the backend's size, one JSON line per result."""
    chunk = judge.info.chunk_size
    with open(out_path, "w", encoding="utf-8") as out:
        for start in range(0, len(records), chunk):
            part = records[start:start + chunk]
            for r in judge.judge_pairs([r.conversation for r in part], [r.response_a for r in part],
                                       [r.response_b for r in part], ids=[r.id for r in part],
                                       labels=[r.label for r in part]):
                out.write(json.dumps({"line": 0, **r.to_dict()}) + "\n")


def test_audit_overhead_vs_plain_judging_and_rerun(benchmark, setup):
    base, model, path, judge = setup
    records = read_records(path, "pairs")
    opts = AuditOptions(shape="pairs", slice_by=("source",), progress=False)
    plain_s, audit_s, totals, in_judge = [], [], [], []
    judge_pairs = judge.judge_pairs

    def timed_judge_pairs(*args, **kwargs):  # time spent judging inside the audit (the rest is bookkeeping)
        start = time.perf_counter()
        try:
            return judge_pairs(*args, **kwargs)
        finally:
            in_judge[-1] += time.perf_counter() - start

    def time_plain():  # pedantic's untimed setup: each audit round follows a plain round (fair under load)
        start = time.perf_counter()
        plain_judge(judge, records, base / f"plain-{len(plain_s)}.jsonl")
        plain_s.append(time.perf_counter() - start)

    def audit():
        start = time.perf_counter()
        in_judge.append(0.0)
        judge.judge_pairs = timed_judge_pairs
        items = plan_items(records, "pairs", slice_by=["source"])
        try:
            out = run_audit(items, base / f"audit-{len(audit_s)}", opts, judge=judge)
        finally:
            del judge.judge_pairs
        audit_s.append(out.judging_seconds + (time.perf_counter() - start - out.seconds))
        totals.append(out.seconds)
        return out

    outcome = benchmark.pedantic(audit, setup=time_plain, rounds=ROUNDS, iterations=1)
    assert outcome.judged == N_PAIRS and json.loads(outcome.files["summary"].read_text())["overall"]["judged"] == 64
    ratio = min(audit_s) / min(plain_s)
    bookkeeping = min(a - j for a, j in zip(audit_s, in_judge, strict=True))  # planning, hashing, store writes

    calls = judge.model.backend.stats["forward_calls"]
    start = time.perf_counter()
    rerun = run_audit(plan_items(records, "pairs", slice_by=["source"]), base / "audit-0", opts, judge=judge)
    rerun_s = time.perf_counter() - start
    assert rerun.judged == 0 and judge.model.backend.stats["forward_calls"] == calls  # no model call

    spec = JudgeSpec(model, kind="brrm", options={k: v for k, v in OPTIONS.items() if k != "kind"})
    run_audit(plan_items(records, "pairs"), base / "audit-0", AuditOptions(shape="pairs", progress=False), spec=spec)
    start = time.perf_counter()  # the CLI's path: the store remembers the configuration, so no model even loads
    again = run_audit(plan_items(records, "pairs"), base / "audit-0", AuditOptions(shape="pairs", progress=False),
                      spec=spec)
    cli_rerun_s = time.perf_counter() - start
    assert again.judged == 0 and again.pending_at_start == 0
    info = {"pairs": N_PAIRS, "plain_judge_s": round(min(plain_s), 2), "audit_judging_s": round(min(audit_s), 2),
            "audit_total_s": round(min(totals), 2), "overhead_ratio": round(ratio, 3),
            "audit_bookkeeping_s": round(bookkeeping, 3),
            "rerun_s": round(rerun_s, 2), "rerun_without_model_load_s": round(cli_rerun_s, 2)}
    benchmark.extra_info.update(info)
    print("\nbrrm audit vs plain judging, 64 pairs on the tiny Qwen3 (rounds: plain "
          f"{[round(s, 2) for s in plain_s]}, audit {[round(s, 2) for s in audit_s]}, of which judging "
          f"{[round(s, 2) for s in in_judge]}):")
    for key, value in info.items():
        print(f"  {key:28s} {value}")
    assert ratio <= 1.05, f"audit judging is {ratio:.3f}x plain judging"
    assert rerun_s < 30 and cli_rerun_s < 30
