"""Liveness from the first second: ``brrm serve`` answers ``/health`` while its model loads (in this process, on a
real socket), and a real ``brrm serve`` process stops at once when signalled during the load.

The judge comes from ``--factory`` (``brrm serve``'s own path for a judge built by a function): a scripted BR-RM
whose load takes ``BRRM_TEST_LOAD_S`` seconds, so the load is slow on demand and its end can be waited for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.forked_cli import SERVE_PRELOAD, ForkedCLI
from tests.serve_helpers import free_port, http, serving_in_process

FACTORY = "tests.test_serve_liveness:slow_judge"
BOUND_S = 240.0
"""A bound on waits for a process to start, load or stop: it ends a hung test, far above what a busy machine takes
(the checks are events: an answer, an exit), so no verdict depends on the machine's speed."""
PAIRS = {"pairs": [{"prompt": "Q?", "response_a": "a good answer", "response_b": "b"}]}


def slow_judge():
    """The scripted BR-RM of the server tests, after ``BRRM_TEST_LOAD_S`` seconds of "loading", or, where
    ``BRRM_TEST_LOAD_GATE`` names a file, once the test has created it (at most 600 s): the load ends when the test
    says so, however long the process took to start on a busy machine."""
    from tests.serve_helpers import fake_brrm

    gate = os.environ.get("BRRM_TEST_LOAD_GATE")
    if gate:
        end = time.monotonic() + 600
        while not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.05)
    else:
        time.sleep(float(os.environ.get("BRRM_TEST_LOAD_S", "0")))
    return fake_brrm()


def failing_judge():
    """A load that fails after a second (a missing model, say)."""
    from brrm.errors import ConfigError

    time.sleep(1.0)
    raise ConfigError("model 'nowhere' is not a local directory")


def _start(port: int, factory: str, load_s: float, log: Path, gate: str | None = None) -> ForkedCLI:
    """A real ``brrm serve`` process, forked from this one (:mod:`tests.forked_cli`: its own signals and exit status,
    a fresh interpreter's signal dispositions, without its imports)."""
    env = {"BRRM_TEST_LOAD_S": str(load_s), **({"BRRM_TEST_LOAD_GATE": gate} if gate else {})}
    return ForkedCLI(["serve", "--factory", factory, "--port", str(port), "--log-level", "warning", "--no-access-log"],
                     log=log, env=env, preload=SERVE_PRELOAD)


def _first_health(url: str, alive: Callable[[], bool], timeout_s: float = BOUND_S) -> float:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        assert alive(), "the server exited"
        try:
            if http().get(f"{url}/health", timeout=10).status_code == 200:
                return time.monotonic()
        except httpx.HTTPError:
            time.sleep(0.05)
    raise TimeoutError("no /health answer")


def test_health_answers_while_the_model_loads_and_ready_says_loading(tmp_path):
    """``brrm serve`` in this process (its parser, loading app and uvicorn server on a real socket): the process
    boundary is not what this checks, the answers during and after the load are."""
    gate = tmp_path / "loaded"  # the load lasts until the checks below are done: an event, not a guess of 12 s
    with serving_in_process(["--factory", FACTORY], tmp_path, env={"BRRM_TEST_LOAD_GATE": str(gate)},
                            ready_timeout_s=None) as srv:
        url = srv.url
        _first_health(url, srv.thread.is_alive)
        ready = http().get(f"{url}/ready", timeout=10)
        judge = http().post(f"{url}/v1/judge", json=PAIRS, timeout=10)
        head = http().head(f"{url}/health", timeout=10)
        assert srv.thread.is_alive()
        assert ready.status_code == 503 and ready.json()["reason"] == "loading" and ready.json()["ready"] is False
        assert judge.status_code == 503 and judge.json()["error"]["type"] == "loading"
        assert judge.headers["retry-after"] == "5" and head.status_code == 200
        gate.touch()
        end = time.monotonic() + BOUND_S
        while http().get(f"{url}/ready", timeout=10).status_code != 200:  # the load ends: the real app takes over
            assert time.monotonic() < end, srv.output()
            time.sleep(0.2)
        answer = http().post(f"{url}/v1/judge", json=PAIRS, timeout=30)
        assert answer.status_code == 200 and answer.json()["judgments"][0]["status"] == "ok", answer.text
        # the loaded server serves as one that never waited: ready, and its model listed
        assert http().get(f"{url}/ready", timeout=10).json()["ready"] is True
        assert http().get(f"{url}/v1/models", timeout=10).status_code == 200
        assert srv.stop() == 0, srv.output()  # drained and stopped as on SIGTERM, the load's judge freed


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_during_the_load_stops_the_server_within_seconds(tmp_path, how):
    import signal

    port = free_port()
    proc = _start(port, FACTORY, 600.0, tmp_path / "server.log")
    try:
        _first_health(f"http://127.0.0.1:{port}", lambda: proc.poll() is None)
        sent = time.monotonic()
        proc.send_signal(getattr(signal, how))
        proc.wait(120)  # a bound far below the 600 s load, however busy the machine: the signal ended it
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    out = (tmp_path / "server.log").read_text()
    assert took < 120, out  # not the 600 s load
    assert proc.returncode == (0 if how == "SIGTERM" else 130), out
    assert "stopped while the model was loading" in out and "Traceback" not in out


def test_a_failed_load_stops_the_server_with_its_error(tmp_path):
    port = free_port()
    proc = _start(port, "tests.test_serve_liveness:failing_judge", 0, tmp_path / "server.log")
    proc.wait(BOUND_S)
    out = (tmp_path / "server.log").read_text()
    assert proc.returncode == 2, out
    assert "brrm: error: " in out and "'nowhere' is not a local directory" in out and "Traceback" not in out
