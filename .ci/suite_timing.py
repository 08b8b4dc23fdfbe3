#!/usr/bin/env python3
"""The README's test command timed idle and beside busy processes, side by side in one run (issue 44).

    python .ci/suite_timing.py                     # one idle run, then one run beside 2 busy processes
    python .ci/suite_timing.py --busy-runs 3       # ... then three runs in a row beside 2 busy processes
    python .ci/suite_timing.py --fresh-clone       # the same in a fresh clone of HEAD (../shared linked beside it)

A busy process is ``python -c "while True: pass"`` at the same priority as the suite: a CI runner, a build or a
second test run on a shared machine. The script starts them, runs ``pytest -q`` (the README's command, in the
checkout or the clone), stops them, and prints each run's wall time, exit status and pytest's summary line beside
the budgets the project holds (docs/development.md: under 5 minutes idle and 10 beside two busy processes on a
2-core machine).
It exits 1 when a run's tests failed, and with ``--enforce`` also when a run is over its budget. It is a check to
run by hand or on a quiet CI machine, not a unit test: no test's verdict depends on these times. A fresh clone runs
with the current interpreter's packages; its tests import the clone's ``brrm`` (pytest's ``pythonpath``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IDLE_BUDGET_S, BUSY_BUDGET_S = 300, 600
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?)\s*=*$")


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on a core each, for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()


def run_suite(where: Path, env: dict[str, str], log: Path, pytest_args: list[str]) -> tuple[float, int, str]:
    """(wall seconds, exit status, pytest's summary line) of ``pytest -q`` in ``where``; its output goes to ``log``."""
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", *pytest_args], cwd=where, env=env,
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    wall = time.monotonic() - start
    lines = [m.group(1) for line in log.read_text(errors="replace").splitlines() if (m := SUMMARY.match(line))]
    return wall, code, lines[-1] if lines else "(no summary line)"


def fresh_clone(into: Path, shared: Path) -> Path:
    """A clone of HEAD in ``into`` (what CI tests) with ``shared`` linked beside it as ``../shared``, as CI lays it
    (brrm's own defaults, such as ``brrm bench``'s data folder, look there)."""
    target = into / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)], check=True)
    if shared.is_dir():
        (into / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the loaded runs (default 2)")
    parser.add_argument("--busy-runs", type=int, default=1, help="runs in a row beside them (default 1)")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle run")
    parser.add_argument("--fresh-clone", action="store_true", help="run in a fresh clone of HEAD")
    parser.add_argument("--enforce", action="store_true", help="exit 1 when a run is over its budget")
    parser.add_argument("--logs", type=Path, help="folder for each run's output (default: a new temp folder)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.busy < 0 or args.busy_runs < 0:
        parser.error("--busy and --busy-runs are counts >= 0")
    with tempfile.TemporaryDirectory(prefix="brrm-suite-") as tmp:
        logs = args.logs or Path(tempfile.mkdtemp(prefix="brrm-suite-logs-"))  # kept: the paths are printed
        logs.mkdir(parents=True, exist_ok=True)
        shared = Path(os.environ.get("BRRM_SHARED_DIR", REPO.parent / "shared"))
        where = fresh_clone(Path(tmp), shared) if args.fresh_clone else REPO
        env = {**os.environ, "BRRM_SHARED_DIR": str(shared)}
        plan = ([] if args.no_idle else [("idle", 0)]) + [(f"busy x{args.busy} #{k + 1}", args.busy)
                                                            for k in range(args.busy_runs)]
        rows, failed, over = [], False, False
        print(f"{os.cpu_count()} CPUs; README test command `pytest -q` in {where}", flush=True)
        for name, load in plan:
            log = logs / f"suite-{name.replace(' ', '-').replace('#', '')}.log"
            with busy(load):
                wall, code, summary = run_suite(where, env, log, args.pytest_args)
            budget = IDLE_BUDGET_S if load == 0 else BUSY_BUDGET_S
            failed |= code != 0
            over |= wall > budget
            rows.append((name, wall, budget, code, summary))
            print(f"{name:>12}: {wall:7.1f} s (budget {budget} s), exit {code}: {summary}   [{log}]", flush=True)
        if len(rows) > 1 and rows[0][0] == "idle":
            for name, wall, *_ in rows[1:]:
                print(f"{name:>12} / idle: {wall / rows[0][1]:.2f}x")
    return 1 if failed or (args.enforce and over) else 0


if __name__ == "__main__":
    sys.exit(main())
