"""JudgeSpec: a value (JSON and pickle round trips), keyed by the weights it names (a folder overwritten in place
or a switched symlink is another spec), that rebuilds the same judge in this process and in a worker process."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import sqlite3
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

import brrm
from brrm import ConfigError, JudgeSpec
from brrm.fingerprint import weights_fingerprint
from brrm.testing import save_tiny_qwen3

OPTS = {"temperature": 0.0, "max_new_tokens": 450, "block_token_cap": 8, "thinking": "off", "decoding": "constrained"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRRM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_round_trips_equal_and_the_fingerprint_names_the_folder(tmp_path, cache):
    model = str(save_tiny_qwen3(tmp_path / "m"))
    spec = JudgeSpec(model, kind="brrm", options={"swap": True, "temperature": 0.0})
    assert spec.fingerprint.startswith("dir:") and len(spec.fingerprint) == 4 + 32
    assert JudgeSpec.from_json(spec.to_json()) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert hash(pickle.loads(pickle.dumps(spec))) == hash(spec)
    assert json.loads(spec.to_json())["options"] == {"swap": True, "temperature": 0.0}
    assert JudgeSpec(model, kind="brrm", options={"temperature": 0.0, "swap": True}) == spec  # order of options
    assert JudgeSpec(model, kind="brrm", options={"swap": False, "temperature": 0.0}) != spec
    with contextlib.closing(sqlite3.connect(cache / "fingerprints.sqlite")) as store:
        cached = [row[0] for row in store.execute("SELECT file FROM digests")]
    assert any(k.startswith(str((tmp_path / "m" / "model.safetensors").resolve())) for k in cached)


def test_different_weights_at_one_path_are_different_specs(tmp_path, cache):
    path = tmp_path / "m"
    save_tiny_qwen3(path, seed=0)
    before = JudgeSpec(str(path), kind="brrm")
    save_tiny_qwen3(path, seed=1)  # overwritten in place
    after = JudgeSpec(str(path), kind="brrm")
    assert before.fingerprint != after.fingerprint and before != after
    with pytest.raises(ConfigError, match="changed since this spec was made"):
        before.load()
    a, b = save_tiny_qwen3(tmp_path / "a", seed=0), save_tiny_qwen3(tmp_path / "b", seed=2)
    link = tmp_path / "current"
    link.symlink_to(a, target_is_directory=True)
    on_a = JudgeSpec(str(link), kind="brrm")
    link.unlink()
    link.symlink_to(b, target_is_directory=True)
    on_b = JudgeSpec(str(link), kind="brrm")
    assert on_a != on_b and on_a.fingerprint == weights_fingerprint(str(a))
    assert on_b.fingerprint == weights_fingerprint(str(b))


def test_invalid_specs_name_the_field(tmp_path, cache):
    with pytest.raises(ConfigError, match="kind 'judge' is not valid; expected one of auto, brrm, bt, principle"):
        JudgeSpec(None, kind="judge")
    with pytest.raises(ConfigError, match="backend 'tgi' is not valid"):
        JudgeSpec(None, backend="tgi")
    with pytest.raises(ConfigError, match="option 'dtype' of a JudgeSpec must be a JSON value"):
        JudgeSpec(str(save_tiny_qwen3(tmp_path / "m")), options={"dtype": object()})
    with pytest.raises(ConfigError, match="unknown JudgeSpec field 'weights'"):
        JudgeSpec.from_dict({"model": None, "weights": "x"})
    assert JudgeSpec("nvidia/Qwen3-Nemotron-14B-BRRM").fingerprint == "hub:nvidia/Qwen3-Nemotron-14B-BRRM@unresolved"


def _one_thread() -> None:
    """A forked worker's initializer: one intra-op thread (the parent's OpenMP pool does not survive the fork)."""
    import torch

    torch.set_num_threads(1)


def _judge_in_worker(text: str) -> tuple[str, str, float, str]:
    spec = pickle.loads(bytes.fromhex(text))
    with spec.load() as judge:
        j = judge.judge("What is 2+2?", "4", "5")
        return judge.info.fingerprint, j.winner.value, j.p_a, j.provenance.fingerprint


def test_a_worker_rebuilds_the_same_judge_from_a_pickled_spec(tmp_path, cache):
    """The worker is forked from this process (its imports done, ~10 s of CPU less than a spawned interpreter) after
    the judge here is closed: it holds no judge, only the spec's bytes, and builds its own from the folder (the
    fingerprint checked against the weights on disk). A fresh interpreter loading a judge is test_bitmask's."""
    model = str(save_tiny_qwen3(tmp_path / "m"))
    judge = brrm.load(model, kind="brrm", **OPTS)
    spec = judge.info.spec
    assert spec == JudgeSpec(model, kind="brrm", options=OPTS)
    assert judge.info.fingerprint == spec.fingerprint == weights_fingerprint(model)
    here = judge.judge("What is 2+2?", "4", "5")
    assert here.provenance.fingerprint == spec.fingerprint
    assert brrm.JudgeInfo.from_dict(judge.info.to_dict()).spec == spec
    judge.close()
    with ProcessPoolExecutor(1, mp_context=get_context("fork"), initializer=_one_thread) as pool:
        fp, winner, p_a, prov = pool.submit(_judge_in_worker, pickle.dumps(spec).hex()).result(timeout=240)
    assert (fp, winner, p_a, prov) == (spec.fingerprint, here.winner.value, here.p_a, spec.fingerprint)


def test_a_judge_over_a_hand_built_backend_has_no_spec(tiny):
    from brrm.backends.transformers import TransformersBackend

    model, tok = tiny
    judge = brrm.load(kind="brrm", backend=TransformersBackend(model, tok), **OPTS)
    assert judge.info.spec is None and judge.info.fingerprint == ""


def test_an_rlhf_reward_over_a_loaded_judge_travels_as_its_spec(tmp_path, cache):
    from brrm.rlhf import JudgeSource, trl_reward

    model = str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True))
    judge = brrm.load(model, kind="bt")
    source = pickle.loads(pickle.dumps(JudgeSource(judge)))
    assert not source.loaded and source.recipe == judge.info.spec
    rebuilt = source.get()
    assert rebuilt.info.fingerprint == judge.info.fingerprint == weights_fingerprint(model)
    assert rebuilt.score_one("q", "an answer").reward == judge.score_one("q", "an answer").reward
    reward = pickle.loads(pickle.dumps(trl_reward(judge)))
    assert reward(prompts=["q"], completions=["an answer"]) == pytest.approx(
        [judge.score_one("q", "an answer").reward], abs=1e-6)
    source.close()
    judge.close()


def test_concurrent_processes_share_the_digest_store(tmp_path, cache):
    """Four interpreters fingerprint one folder at once into one fresh store: no error, one fingerprint, one row per
    file (SQLite's locking, not a read-merge-replace of a whole table per digest)."""
    folder = tmp_path / "m"
    folder.mkdir()
    for i in range(40):
        (folder / f"f{i}.json").write_text("x" * i)
    code = f"from brrm.fingerprint import weights_fingerprint; print(weights_fingerprint({str(folder)!r}))"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "BRRM_CACHE_DIR": str(cache)}) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-500:] for _, err in outs]
    assert {out.strip() for out, _ in outs} == {weights_fingerprint(str(folder))}
    with contextlib.closing(sqlite3.connect(cache / "fingerprints.sqlite")) as store:
        assert store.execute("SELECT count(*) FROM digests").fetchone() == (40,)
