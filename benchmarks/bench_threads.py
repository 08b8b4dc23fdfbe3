"""brrm's default CPU threading against the best fixed setting, on an idle and on a busy machine (issue 31, item 1).

One pair of ``examples/pairs.jsonl`` through ``brrm judge`` on the embedded demo model, each setting a fresh
process (OpenMP reads its settings once, at start): brrm's default (no OpenMP variable set: brrm chooses,
``brrm/threads.py``), ``OMP_NUM_THREADS=1``, and all usable CPUs with spinning waits (``OMP_WAIT_POLICY=ACTIVE``,
close to what a user got before brrm chose). The busy round starts one spinning process per usable CPU itself
and stops them after. Printed: seconds per setting and brrm's default / the best fixed setting in each round
(targets: <= 1.1 idle, <= 1.3 busy). Each run must succeed (exit 0 and one ok verdict line); the ratios are
printed, not asserted, since a shared machine's other load moves them.

Run: ``pytest benchmarks/bench_threads.py -s`` (about twelve minutes: each setting three times idle and twice
busy, alternated, the best kept).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

from brrm.threads import MARKER, usable_cpus

REPO = Path(__file__).resolve().parents[1]


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1_000_003


def default_threading_env() -> dict[str, str]:
    """This environment without any OpenMP setting or brrm's marker of its own choice (and with this checkout on
    ``PYTHONPATH``): a child started with it chooses its threading as brrm does for a user (the benchmarks' own
    ``OMP_NUM_THREADS=1`` removed)."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_")) and k != MARKER}
    return {**keep, "PYTHONPATH": str(REPO)}


def _judge_seconds(env: dict[str, str]) -> float:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "brrm", "judge", "--input", str(REPO / "examples" / "pairs.jsonl"),
                          "--limit", "1", "--no-progress", "--quiet"], env={**default_threading_env(), **env},
                         capture_output=True, text=True, timeout=3600, cwd=REPO)
    seconds = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [json.loads(t) for t in out.stdout.splitlines() if t.startswith("{")]
    assert line["status"] == "ok", line
    return seconds


SETTINGS = {"brrm default": {}, "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
            "all CPUs, spinning": {"OMP_NUM_THREADS": str(usable_cpus()), "OMP_WAIT_POLICY": "ACTIVE"}}


REPEATS = {"idle": 3, "busy": 2}
"""Runs of each setting per round, alternated; the best counts (a 25 s run moves by +-3 s on a quiet 2-core box,
more than the 10% the idle target allows, so the idle round takes one more)."""


def _round(repeats: int) -> dict[str, float]:
    best = {name: float("inf") for name in SETTINGS}
    for _ in range(repeats):
        for name, env in SETTINGS.items():
            best[name] = min(best[name], _judge_seconds(env))
    return best


def test_default_threads_idle_and_busy(benchmark):
    def both() -> dict[str, dict[str, float]]:
        idle = _round(REPEATS["idle"])
        stop = multiprocessing.Event()
        spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(usable_cpus())]
        for p in spinners:
            p.start()
        try:
            busy = _round(REPEATS["busy"])
        finally:
            stop.set()
            for p in spinners:
                p.join(10)
        return {"idle": idle, "busy": busy}

    figures = benchmark.pedantic(both, rounds=1, iterations=1)
    for name, times in figures.items():
        best = min(v for k, v in times.items() if k != "brrm default")
        ratio = times["brrm default"] / best
        print(f"{name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
              + f"; brrm default / best fixed = {ratio:.2f}")
        benchmark.extra_info[name] = {**times, "ratio": ratio}
