"""``brrm arena --ray``: the example arena judged on a local Ray instance (a CPU actor, a tiny Qwen3) gives the
single-process battles and leaderboard exactly; a rerun judges nothing, and a store filled by a local run is
resumed on Ray without judging again.

The module's Ray tests share one local instance (:mod:`tests.ray_support`): starting Ray costs more than
a test's own work on it."""

from __future__ import annotations

import pytest

from brrm.arena import run_arena
from tests.audit_support import TINY_OPTS
from tests.conftest import REPO
from tests.ray_support import local_ray

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance (2 CPUs, 127.0.0.1) for this module's Ray tests, shut down after the last."""
    with local_ray(num_cpus=2) as ray:
        yield ray


@pytest.mark.slow  # a local Ray cluster: the slow tier (pyproject.toml, README)
def test_the_arena_on_ray_equals_the_local_arena_and_resumes(tmp_path, ray_instance):
    import torch

    import brrm
    from brrm.audit.ray_runner import RayOptions
    from brrm.testing import save_tiny_qwen3

    model = str(save_tiny_qwen3(tmp_path / "tiny"))
    opts = {**TINY_OPTS, "backend": "transformers"}
    spec = brrm.JudgeSpec.from_load(model, **opts)
    source = REPO / "examples/arena.jsonl"
    counted: list[float] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray actor (one CPU each): the same floats, bit for bit
    try:
        with brrm.load(model, **opts) as judge:
            local = run_arena(judge, source, baseline="baseline-bot", bootstrap=20, store=tmp_path / "local")
    finally:
        torch.set_num_threads(threads)
    # one actor: the 16 matchups are one block (an arena sends 64 a call), which one actor judges; a second actor
    # would load the model and get nothing (Ray Data warns so). tests/test_audit_ray.py judges on two.
    on_ray = run_arena(spec, source, baseline="baseline-bot", bootstrap=20, store=tmp_path / "ray",
                       ray=RayOptions(actors=1), progress=counted.append)
    again = run_arena(spec, source, baseline="baseline-bot", bootstrap=20, store=tmp_path / "ray",
                      ray=RayOptions(actors=1), progress=lambda n: counted.append(-n))
    from_local = run_arena(spec, source, baseline="baseline-bot", bootstrap=20, store=tmp_path / "local",
                           ray=RayOptions(actors=1), progress=lambda n: counted.append(-n))
    assert sum(counted) == 16 and min(counted) > 0  # the first Ray run judged all 16; the others nothing
    assert [b.to_dict() for b in on_ray.battles] == [b.to_dict() for b in local.battles]
    assert all(b.swapped for b in on_ray.battles) and any(b.ok for b in on_ray.battles)
    assert on_ray.leaderboard == local.leaderboard == again.leaderboard == from_local.leaderboard
    assert on_ray.markdown() == local.markdown()


def test_ray_needs_a_store_and_a_spec(tmp_path):
    from brrm import ConfigError
    from brrm.audit.ray_runner import RayOptions
    from brrm.types import JudgeSpec

    spec = JudgeSpec.from_load(None, kind="brrm")
    with pytest.raises(ConfigError, match="needs a store folder"):
        run_arena(spec, REPO / "examples/arena.jsonl", baseline="baseline-bot", ray=RayOptions())
    with pytest.raises(ConfigError, match="a JudgeSpec judges an arena on Ray"):
        run_arena(spec, REPO / "examples/arena.jsonl", baseline="baseline-bot")


@pytest.mark.slow  # a local Ray cluster: the slow tier (pyproject.toml, README)
def test_the_cli_judges_on_ray_and_a_rerun_judges_nothing(tmp_path, capsys, ray_instance):
    from brrm.cli import main
    from brrm.testing import save_tiny_qwen3
    from tests.audit_support import TINY_FLAGS

    model = str(save_tiny_qwen3(tmp_path / "tiny"))
    # the example's first 3 prompts (6 matchups): the flags' path is what this test is about; the equality of
    # Ray and local judging over the whole example is the test above
    lines = (REPO / "examples/arena.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "arena.jsonl").write_text("".join(lines[:9]), encoding="utf-8")
    argv = ["arena", "--input", str(tmp_path / "arena.jsonl"), "--baseline", "baseline-bot", "--output",
            str(tmp_path / "out"), "--model", model, *TINY_FLAGS, "--no-progress", "--bootstrap", "20",
            "--ray", "--actors", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "on Ray (local); each actor loads model" in first and "judged 6 matchups now" in first
    assert "judged 0 matchups now; 6 came from the store" in second
    assert (tmp_path / "out" / "leaderboard.csv").is_file() and (tmp_path / "out" / "report.html").is_file()


@pytest.mark.parametrize(("extra", "message"), [
    (["--ray"], "--ray needs --output FOLDER"),
    (["--actors", "2"], "--actors and --num-gpus-per-actor apply with --ray"),
])
def test_ray_flag_mistakes_are_one_line_before_a_model_loads(capsys, extra, message):
    from brrm.cli import main

    assert main(["arena", "--input", str(REPO / "examples/arena.jsonl"), "--baseline", "baseline-bot",
                 *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
