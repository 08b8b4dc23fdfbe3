"""brrm's CPU threading (issue 31, item 1): passive OpenMP waiting and the usable CPU count, set before torch
initialises, never over a user's own setting; checked on the real environment of a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from brrm.threads import MARKER, cgroup_cpu_limit, choose, usable_cpus

REPO = Path(__file__).resolve().parents[1]


def test_unset_variables_are_chosen_and_marked():
    env: dict[str, str] = {}
    c = choose(env, torch_loaded=False)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["OMP_NUM_THREADS"] == str(usable_cpus())
    assert (c.threads_by, c.wait_by) == ("brrm", "brrm") and env[MARKER] == f"{usable_cpus()}/PASSIVE"
    assert env["GOMP_SPINCOUNT"] == "1000"  # a brief spin before sleeping (libgomp): idle speed, busy grace
    mine = {"GOMP_SPINCOUNT": "50"}
    choose(mine, torch_loaded=False)
    assert mine["GOMP_SPINCOUNT"] == "50" and mine["OMP_WAIT_POLICY"] == "PASSIVE"  # the user's count wins
    again = dict(env)  # a child process inheriting them chooses again (they are brrm's, not the user's)
    assert choose(again, torch_loaded=False).threads_by == "brrm"


def test_the_users_settings_win():
    env = {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "active"}
    c = choose(env, torch_loaded=False)
    assert env == {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "active"}  # untouched, no marker
    assert (c.threads, c.threads_by, c.wait_policy, c.wait_by) == (3, "user", "ACTIVE", "user")
    assert "OMP_NUM_THREADS" in c.describe()


def test_torch_first_means_hands_off():
    env: dict[str, str] = {}
    c = choose(env, torch_loaded=True)
    assert env == {} and (c.threads_by, c.wait_by) == ("torch", "torch")


def test_cgroup_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_limit(tmp_path) == 0.5
    assert cgroup_cpu_limit(tmp_path / "absent") is None


def _fresh(env: dict[str, str]) -> dict[str, object]:
    code = ("import os, json, brrm, torch; print(json.dumps({'threads': torch.get_num_threads(), "
            "'policy': os.environ.get('OMP_WAIT_POLICY'), 'choice': brrm.threads.CHOICE.describe()}))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_")) and k != MARKER}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, "PYTHONPATH": str(REPO), **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_fresh_interpreter_gets_brrms_choice_and_a_users_wins():
    got = _fresh({})
    assert got["threads"] == usable_cpus() and got["policy"] == "PASSIVE" and "set by brrm" in str(got["choice"])
    mine = _fresh({"OMP_NUM_THREADS": "1"})
    assert mine["threads"] == 1 and "(OMP_NUM_THREADS)" in str(mine["choice"])
