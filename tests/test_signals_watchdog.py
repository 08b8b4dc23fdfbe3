"""SIGINT/SIGTERM land within seconds whatever the backend is doing: a run stuck in native code (where Python
cannot run a signal handler) is ended by the watchdog of :func:`brrm.signals.sigterm_as_interrupt`; a run that
unwinds in time keeps its own path (Terminated / KeyboardInterrupt)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, terminal_sigint

STUCK = """
import sys, time
import brrm.signals as s
s.HARD_EXIT_AFTER_S = 1.0
try:
    with s.sigterm_as_interrupt():
        print("ready", flush=True)
        if sys.argv[1] == "native":  # one C call holding the interpreter: no handler and no thread runs, for minutes
            sum(range(10 ** 12))
        else:
            time.sleep(600)
except KeyboardInterrupt as exc:
    print("unwound", type(exc).__name__, flush=True)
    sys.exit(143 if isinstance(exc, s.Terminated) else 130)
"""


HANG_S = 300
"""A guard against a hang only, never a verdict: the outcome is read from the exit status and the output."""


def _run(mode: str, sig: signal.Signals) -> tuple[int, float, str, str]:
    proc = subprocess.Popen([sys.executable, "-c", STUCK, mode], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG_S)
        return proc.returncode, time.monotonic() - sent, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_run_stuck_in_native_code_ends_within_seconds_of_the_signal(sig):
    code, took, out, err = _run("native", sig)
    # killed by the watchdog (SIGKILL and its message) after the 1 s grace (a lower bound: load cannot make it
    # shorter), not at the end of the native call (hours: it would exit 0, or meet the hang guard)
    assert code == -signal.SIGKILL and took > 0.9, (code, took, err)
    assert f"brrm: {sig.name}: the run did not stop within 1 s" in err and "unwound" not in out


@pytest.mark.parametrize(("sig", "name", "status"), [(signal.SIGTERM, "Terminated", 143),
                                                     (signal.SIGINT, "KeyboardInterrupt", 130)])
def test_a_run_that_unwinds_keeps_its_own_path(sig, name, status):
    code, took, out, err = _run("python", sig)
    # its own exit status and no watchdog message tell the unwinding apart from the kill
    assert code == status and out.strip() == f"unwound {name}", (code, took, out, err)
    assert "did not stop" not in err
