"""A real audit (tiny Qwen3 judge, the ``brrm audit`` CLI) stopped with Ctrl-C, killed with SIGKILL at random points
five times, watched with ``--status`` from another process, and resumed: the final store equals an uninterrupted
run's, and the rerun judges only what was missing.

Each run is a fresh process forked from a multiprocessing fork server that has torch, transformers and brrm
imported already (a plain subprocess would spend seconds importing them every time).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.audit_support import TINY_FLAGS, assert_same_stores, cli_exit, pair_rows, store_items, write_jsonl

# the slow tier (pyproject.toml, README): a Ctrl-C and five SIGKILLs in a row; the default tier's crash and resume
# tests are tests/test_audit_runner.py's and tests/test_continuous.py's
pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

N_PAIRS = 20  # 10 batches of 2: the Ctrl-C run and the five killed runs commit at most 9 of them
PRELOAD = ["tests.audit_support", "brrm.cli.audit", "brrm.audit.runner", "brrm.audit.summary", "brrm.audit.report",
           "brrm.backends.transformers", "brrm.judges.brrm", "brrm.constraints", "brrm.compose", "brrm.recipes",
           "transformers.modeling_utils", "transformers.models.qwen3.modeling_qwen3", "transformers.generation",
           "outlines_core", "accelerate", "torch._dynamo", "jinja2", "matplotlib.figure",
           "matplotlib.backends.backend_agg", "pyarrow.parquet"]


def committed(out: Path) -> int:
    """Result rows committed so far, read without blocking the writer (WAL)."""
    if not (out / "audit.sqlite").is_file():
        return 0
    conn = sqlite3.connect(f"file:{out / 'audit.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
    except sqlite3.OperationalError:  # tables not created yet
        return 0
    finally:
        conn.close()


def wait_for_more(out: Path, before: int, proc, timeout: float = 240.0, *, at_most: float | None = None) -> float:
    """Seconds until more rows than ``before`` are committed, the process ended, or ``at_most`` seconds passed."""
    start = time.time()
    while committed(out) <= before and proc.is_alive():
        if at_most is not None and time.time() - start >= at_most:
            break
        assert time.time() - start < timeout, "no progress"
        time.sleep(0.02)
    return time.time() - start


def status(out: Path, capsys) -> str:
    """``brrm audit --status OUT`` through ``main(argv)`` in the test's process: another process than the run's (the
    store is read across processes either way; a subprocess would only add seconds of imports)."""
    from brrm.cli import main

    capsys.readouterr()
    assert main(["audit", "--status", str(out)]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_ctrl_c_and_five_sigkills_then_rerun_equals_an_uninterrupted_run(tmp_path, capsys):
    from brrm.testing import save_tiny_qwen3

    model = str(save_tiny_qwen3(tmp_path / "tiny"))
    records = write_jsonl(tmp_path / "pairs.jsonl", [*pair_rows(N_PAIRS)[:3], "{broken", *pair_rows(N_PAIRS)[3:]])
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)

    def start(out: Path):
        # two pairs per judge call; each finished item commits, and a result never depends on its batch
        proc = ctx.Process(target=cli_exit, args=(["audit", str(records), "--output", str(out), "--model", model,
                                                   *TINY_FLAGS, "--chunk-size", "2", "--slice-by", "source",
                                                   "--no-progress", "--summary-every", "3600"],))
        proc.start()
        return proc

    reference = tmp_path / "reference"
    proc = start(reference)
    first_commit = wait_for_more(reference, 0, proc)
    batch = wait_for_more(reference, 2, proc)
    proc.join(240)
    assert proc.exitcode == 0

    out = tmp_path / "audit"
    proc = start(out)  # Ctrl-C once a batch is in: a clean stop that keeps it
    wait_for_more(out, 0, proc)
    os.kill(proc.pid, signal.SIGINT)
    proc.join(120)
    assert proc.exitcode == 130
    kept = store_items(out)
    assert 1 <= len(kept) < N_PAIRS  # each finished item is committed (issue 19; it was the batch of 2)

    rng = random.Random(1206)
    kills, seen_running = 0, ""
    for cycle in range(5):  # SIGKILL at random points: in start-up, mid-batch, mid-write or between batches
        before = committed(out)
        proc = start(out)
        if cycle % 2 == 0:  # start-up, planning or the first batch: at a random time, or as its commit lands
            wait_for_more(out, before, proc, at_most=rng.uniform(0.1, 0.9) * first_commit)
        else:  # right after a commit, or inside the next batch (never later than the next commit)
            wait_for_more(out, before, proc)
            if cycle == 1:
                seen_running = status(out, capsys)  # another process reads the store while this run writes it
            wait_for_more(out, before + 2, proc, at_most=rng.uniform(0.0, 0.9) * batch)
        assert proc.is_alive()
        os.kill(proc.pid, signal.SIGKILL)
        kills += 1
        proc.join(60)
    assert kills == 5
    partial = store_items(out)
    assert all(partial[k] == v for k, v in kept.items())  # finished items are never rewritten
    proc = start(out)
    proc.join(240)
    assert proc.exitcode == 0

    assert_same_stores(out, reference)
    rows = store_items(out)
    assert len(rows) == N_PAIRS and all(r["status"] == "ok" for r in rows.values())
    assert {k: r["result"] for k, r in rows.items()} == {k: r["result"] for k, r in store_items(reference).items()}
    assert (out / "results.jsonl").read_text() == (reference / "results.jsonl").read_text()
    conn = sqlite3.connect(str(out / "audit.sqlite"))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    states = [s for (s,) in conn.execute("SELECT state FROM runs ORDER BY run_id")]
    last = conn.execute("SELECT COUNT(*) FROM items WHERE run_id = (SELECT MAX(run_id) FROM runs)").fetchone()[0]
    conn.close()
    assert states[0] == "interrupted" and states[-1] == "finished" and set(states[1:-1]) <= {"killed"}
    assert last == N_PAIRS - len(partial)  # the rerun judged only what was missing
    assert "running (pid" in seen_running and "rows done" in seen_running
    text = status(out, capsys)
    assert "finished" in text and f"{N_PAIRS + 1}/{N_PAIRS + 1} rows done" in text and "invalid_input 1" in text
