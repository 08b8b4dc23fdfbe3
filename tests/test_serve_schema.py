"""The served OpenAPI schema states exactly what ``brrm serve`` accepts and answers (issue 18 item 9):
schemathesis ``--checks all`` finds 0 failures against tiny real servers of each kind: a Bradley–Terry model, a BR-RM
judge with an API key, a principle model without a default principle and one with two defaults and an API key.

schemathesis runs as its CLI (``schemathesis run``), one process per server, with a fixed seed, a bounded number
of examples per operation and a time bound; ``tests/fixtures/schemathesis.toml`` counts 413 as a rejection (the
server's answer to a body over a limit the schema states), and ``tests/serve_schema_hooks.py`` leaves out bodies
that break the two rules JSON Schema cannot state (see there). The four servers start together and are tested
two at a time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.serve_helpers import REPO, Server, running_server

pytest.importorskip("schemathesis")

KEY = "schema-key-0123456789"
LIMITS = ["--max-items", "6", "--deadline", "30", "--max-wait-ms", "5"]
BRRM = ["--kind", "brrm", "--max-new-tokens", "24", "--block-token-cap", "8", "--thinking", "off"]
PRINCIPLE = ["--kind", "principle", "--recipe", "llama_reward", "--max-new-tokens", "8"]
CONFIG = REPO / "tests" / "fixtures" / "schemathesis.toml"
EXAMPLES, SECONDS = 8, 20


def schemathesis(server: Server, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``schemathesis run --checks all`` against ``server`` (bounded: examples per operation and seconds)."""
    exe = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    headers = ["-H", f"Authorization: Bearer {server.api_key}"] if server.api_key else []
    env = {**os.environ, "PYTHONPATH": str(REPO), "SCHEMATHESIS_HOOKS": "tests.serve_schema_hooks"}
    return subprocess.run([exe, "--config-file", str(CONFIG), "run", f"{server.url}/openapi.json", *headers,
                           "--checks", "all", "--max-examples", str(EXAMPLES), "--max-time", str(SECONDS),
                           "--seed", "18", "--workers", "1", "--suppress-health-check", "all",
                           "--request-timeout", "40"],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=SECONDS + 120)


@pytest.mark.timeout(240)
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
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(4) as pool:
        starting = {name: pool.submit(stack.enter_context, running_server(
            args, tmp_path, api_key=KEY if name.endswith("+key") else None, ready_timeout_s=120))
            for name, args in setups.items()}
        servers = {name: future.result() for name, future in starting.items()}
        with ThreadPoolExecutor(2) as runs:
            done = dict(zip(servers, runs.map(lambda s: schemathesis(s, tmp_path), servers.values()), strict=True))
    assert "/v1/judge, /v1/rank and /get_reward, which name none, answer 422" in servers["principle"].output()
    report = {}
    for name, run in done.items():
        summary = re.search(r"Test cases:\s*\n\s*(\d+) generated", run.stdout)
        report[name] = (run.returncode, int(summary.group(1)) if summary else 0)
        failures = re.findall(r"❌ (ST\d+ [^:]+: \d+)", run.stdout)
        print(f"\n{name}: exit {run.returncode}, {report[name][1]} test cases, failures: {failures or 'none'}")
    for name, run in done.items():
        assert run.returncode == 0, (f"{name}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}\nserver log:\n"
                                     f"{servers[name].output()[-4000:]}")
        tested = re.search(r"Tested: (\d+)", run.stdout)
        assert tested and int(tested.group(1)) == operations[name], (name, run.stdout[-3000:])  # every one tested
        assert report[name][1] >= 2 * operations[name], (name, run.stdout[-3000:])  # generated, not only examples
        assert "No failures" in run.stdout or "passed" in run.stdout, run.stdout[-2000:]
