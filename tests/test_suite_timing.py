"""``.ci/suite_timing.py`` (the README's timing of its test command) runs what it is given beside the busy
processes it starts, prints a row per run with pytest's own summary, and exits 1 when a run's tests failed; on one
small test file here, not the whole suite."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / ".ci" / "suite_timing.py"


LIGHT = ("-n", "0", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:schemathesis")
"""The inner runs' pytest options: one process, and without the hypothesis and schemathesis plugins, whose imports
are most of a small run's CPU (and of the time a busy process spins beside it)."""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def test_a_busy_run_prints_its_row_and_the_passed_tests(tmp_path):
    passing = tmp_path / "test_passes.py"
    passing.write_text("def test_one():\n    assert True\n\n\ndef test_two():\n    assert True\n")
    done = _run("--no-idle", "--busy", "1", "--logs", str(tmp_path), "--", *LIGHT, str(passing))
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [line for line in done.stdout.splitlines() if "busy x1 #1:" in line]
    assert "(budget 600 s), exit 0: 2 passed" in row and (tmp_path / "suite-busy-x1-1.log").is_file()


def test_a_failing_run_exits_1(tmp_path):
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert False\n")
    done = _run("--busy", "0", "--busy-runs", "0", "--logs", str(tmp_path), "--", *LIGHT, str(failing))
    assert done.returncode == 1 and "idle:" in done.stdout and "1 failed" in done.stdout, done.stdout
