"""The same audit on a local Ray instance (2 CPU actors, a tiny Qwen3 judge) gives exactly the single-process
results under the same keys, and a rerun finds nothing pending without starting any actor."""

from __future__ import annotations

import json

import pytest

from brrm.audit import AuditOptions, JudgeSpec, plan_items, run_audit
from brrm.records import read_records
from tests.audit_support import TINY_OPTS, assert_same_stores, pair_rows, store_items, write_jsonl
from tests.ray_support import local_ray

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance (2 CPUs, 127.0.0.1, :mod:`tests.ray_support`), shut down after the module."""
    with local_ray(num_cpus=2) as ray:
        yield ray


@pytest.mark.slow  # a local Ray cluster: the slow tier (pyproject.toml, README)
def test_ray_audit_equals_the_single_process_audit(tmp_path, ray_instance):
    from brrm.audit.ray_runner import RayOptions
    from brrm.testing import save_tiny_qwen3

    model = str(save_tiny_qwen3(tmp_path / "tiny"))
    path = write_jsonl(tmp_path / "pairs.jsonl", [*pair_rows(4), "{broken"])
    items = plan_items(read_records(path, "pairs"), "pairs", slice_by=["source"])
    opts = AuditOptions(shape="pairs", slice_by=("source",), chunk_size=2, progress=False)
    spec = JudgeSpec.from_load(model, **{**TINY_OPTS, "backend": "transformers"})
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray actor (one CPU each); OpenMP spin-waiting is slow on a shared box
    try:
        local = run_audit(items, tmp_path / "local", opts, spec=spec)
    finally:
        torch.set_num_threads(threads)
    on_ray = run_audit(items, tmp_path / "ray", opts, spec=spec, ray=RayOptions(actors=2))
    again = run_audit(items, tmp_path / "ray", opts, spec=spec, ray=RayOptions(actors=2))
    assert local.judged == on_ray.judged == 4 and on_ray.config_hash == local.config_hash
    assert again.judged == 0 and again.pending_at_start == 0
    assert_same_stores(tmp_path / "local", tmp_path / "ray")
    # exactly equal, floats included: both judge the same batches of 2 (Ray blocks of 2, batch_size 2) on one
    # intra-op thread, and a result depends only on the record, the options and the seed
    assert {k: v["result"] for k, v in store_items(tmp_path / "local").items()} == {
        k: v["result"] for k, v in store_items(tmp_path / "ray").items()}
    rows = [[json.loads(line) for line in (tmp_path / d / "results.jsonl").read_text().splitlines()]
            for d in ("local", "ray")]
    assert [r["status"] for r in rows[1]] == ["ok"] * 4 + ["invalid_input"] and rows[0] == rows[1]
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("local", "ray")]
    assert summaries[0]["overall"] == summaries[1]["overall"] and summaries[0]["slices"] == summaries[1]["slices"]


def _actor_setup_in_a_child(nice: int, driver: str) -> list[str]:
    """``actor_setup`` in a fresh process started at niceness ``nice`` with the driver's niceness ``driver``:
    [what it returns, the process's niceness after, TORCH_COMPILE_DISABLE]."""
    import subprocess
    import sys

    code = (f"import os; os.nice({nice}); from brrm.audit.ray_runner import NICENESS, actor_setup; "
            f"env = {{NICENESS: {driver!r}}}; got = actor_setup(env); "
            "print(got, os.getpriority(os.PRIO_PROCESS, 0), env['TORCH_COMPILE_DISABLE'])")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_actors_run_at_their_drivers_priority():
    """Ray starts its workers at niceness 15, where a busy machine starves them (an arena that takes 17 s idle had
    not finished in 300 s beside a spinning process per core); an actor takes its driver's niceness back where the
    process may (root, CAP_SYS_NICE), never lowers its own priority, and without privilege stays as it is."""
    import os

    from brrm.audit.ray_runner import NICENESS, passed_env

    driver = os.getpriority(os.PRIO_PROCESS, 0)
    assert passed_env({})[NICENESS] == str(driver)
    got, after, compile_off = _actor_setup_in_a_child(15 - driver, str(driver))
    assert got == after and compile_off == "1"  # it reports the niceness it really runs at
    if os.geteuid() == 0:  # root may raise a priority (CI and this box run as root)
        assert int(after) == driver
    else:
        assert int(after) in (driver, 15)
    assert _actor_setup_in_a_child(0, "19")[:2] == [str(driver), str(driver)]  # never lowered on request
    assert _actor_setup_in_a_child(0, "not a number")[:2] == [str(driver), str(driver)]
