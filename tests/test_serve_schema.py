"""The served OpenAPI schema states exactly what ``brrm serve`` accepts and answers (issue 18 item 9):
schemathesis ``--checks all`` finds 0 failures against tiny real servers of each kind: a Bradley–Terry model, a BR-RM
judge with an API key, a principle model without a default principle and one with two defaults and an API key.

schemathesis runs as its CLI (``schemathesis run``), one process per server. What it tests is decided by the
schema alone, never by how fast the machine is (issue 44): no ``--max-time`` (under load a time budget left
operations untested), a fixed seed with deterministic generation, and three phases chosen for what they prove:
``examples`` (the schema's own examples are accepted), ``coverage`` (every operation's boundary values, valid and
invalid, enumerated from the schema) and ``fuzzing`` (:data:`EXAMPLES` random cases per operation). ``stateful``
is left out: the schema has no links. Every operation of every server must be tested. The subprocess timeout is
only a guard against a hang; a request's own short ``timeout_s`` answers 504, which
``tests/fixtures/schemathesis.toml`` accepts (and it counts 413 as a rejection: the server's answer to a body over
a limit the schema states). ``tests/serve_schema_hooks.py`` leaves out bodies that break the two rules JSON
Schema cannot state (see there).

Each server is started and tested in a thread of its own, so one is tested while the others still import torch,
and each stops as soon as its run ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.serve_helpers import REPO, Server, running_server

pytest.importorskip("schemathesis")

# the slow tier (pyproject.toml, README): four servers under schemathesis; tests/test_serve_api.py and
# tests/test_served_examples.py keep a schemathesis run and every route's example in the default tier
pytestmark = pytest.mark.slow

KEY = "schema-key-0123456789"
LIMITS = ["--max-items", "6", "--deadline", "30", "--max-wait-ms", "5"]
BRRM = ["--kind", "brrm", "--max-new-tokens", "24", "--block-token-cap", "8", "--thinking", "off"]
PRINCIPLE = ["--kind", "principle", "--recipe", "llama_reward", "--max-new-tokens", "8"]
CONFIG = REPO / "tests" / "fixtures" / "schemathesis.toml"
PHASES = "examples,coverage,fuzzing"
EXAMPLES = 4
"""Fuzzing cases per operation (the coverage phase already gives every operation 9 to 160 cases)."""
HANG_S = 600
"""A guard against a hang only, never a budget, for a server's start and for a schemathesis run alike: on a loaded
machine they take what they take (a start is about 8 s of CPU, a run 5 to 20 s)."""
REQUEST_TIMEOUT_S = 120
"""Per request, above the servers' ``--deadline 30`` (past it a request answers 504, which the toml accepts)."""


def schemathesis(server: Server, tmp: Path, name: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``schemathesis run --checks all`` against ``server``: the process and its JSON report."""
    exe = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    headers = ["-H", f"Authorization: Bearer {server.api_key}"] if server.api_key else []
    report = tmp / f"schemathesis-{name}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SCHEMATHESIS_HOOKS": "tests.serve_schema_hooks"}
    args = [exe, "--config-file", str(CONFIG), "run", f"{server.url}/openapi.json", *headers, "--checks", "all",
            "--phases", PHASES, "--max-examples", str(EXAMPLES), "--seed", "18", "--generation-deterministic",
            "--workers", "1", "--suppress-health-check", "all", "--request-timeout", str(REQUEST_TIMEOUT_S),
            "--report", "json", "--report-json-path", str(report), "--no-color"]
    try:
        run = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{name}: schemathesis still running after {HANG_S} s (a hang guard, not a time budget):\n"
                    f"{out[-4000:]}\nserver log:\n{server.output()[-4000:]}")
    if not report.exists():
        pytest.fail(f"{name}: schemathesis exited {run.returncode} without a report:\n{run.stdout[-4000:]}\n"
                    f"{run.stderr[-2000:]}")
    return run, json.loads(report.read_text())


def start_and_test(args: list[str], tmp: Path, name: str) -> tuple[Server, subprocess.CompletedProcess[str],
                                                                      dict[str, Any]]:
    with running_server(args, tmp, api_key=KEY if name.endswith("+key") else None, ready_timeout_s=HANG_S) as server:
        return server, *schemathesis(server, tmp, name)


@pytest.mark.timeout(3 * HANG_S)
def test_schemathesis_checks_all_find_nothing(tmp_path):
    from brrm.testing import save_tiny_qwen3

    bt = save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)
    lm = save_tiny_qwen3(tmp_path / "lm")
    setups = {"bt": ["--model", str(bt), *LIMITS], "brrm+key": ["--model", str(lm), *BRRM, *LIMITS],
              "principle": ["--model", str(lm), *PRINCIPLE, *LIMITS],  # no default: /v1/judge, /v1/rank and
              # /get_reward, which name no principle, are not offered
              "principle2+key": ["--model", str(lm), *PRINCIPLE, "--principle", "correct", "--principle", "short",
                                 *LIMITS]}
    operations = {"bt": 9, "brrm+key": 9, "principle": 6, "principle2+key": 9}
    with ThreadPoolExecutor(len(setups)) as pool:
        futures = {name: pool.submit(start_and_test, args, tmp_path, name) for name, args in setups.items()}
        done = {name: future.result() for name, future in futures.items()}
    assert "/v1/judge, /v1/rank and /get_reward, which name none, answer 422" in done["principle"][0].output()
    for name, (_, run, report) in done.items():
        print(f"\n{name}: exit {run.returncode}, operations {report['operations']}, test cases "
              f"{report['test_cases']}, failures {[(f['code'], f['title'], f['count']) for f in report['failures']]}"
              f", in {report['running_time']:.1f} s")
    for name, (server, run, report) in done.items():
        context = (f"{name}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}\nserver log:\n{server.output()[-4000:]}")
        ops, phases = report["operations"], report["phases"]
        assert report["stop_reason"] == "completed" and report["complete"], (
            f"{name}: schemathesis stopped early ({report['stop_reason']}), not every case was run\n{context}")
        assert ops["tested"] == ops["selected"] == ops["total"] == operations[name] and not ops["skipped"], (
            f"{name}: every one of the {operations[name]} operations must be tested; schemathesis reports {ops}"
            f"\n{context}")
        ran = {phase: phases[phase]["status"] for phase in PHASES.split(",")}
        assert ran == dict.fromkeys(ran, "success"), f"{name}: every phase must run and pass: {phases}\n{context}"
        assert not report["failures"] and not report["errors"] and run.returncode == 0, (
            f"{name}: failures {report['failures']}, errors {report['errors']}\n{context}")
        # coverage's boundary values for every operation, and fuzzing's cases, not only the schema's examples
        assert report["test_cases"]["generated"] >= (9 + EXAMPLES) * operations[name], (report["test_cases"], context)
