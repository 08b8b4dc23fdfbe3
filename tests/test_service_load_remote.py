"""``brrm.load(url, backend="serve")`` and ``JudgeSpec(url, backend="serve")``: the one HTTP client (RemoteJudge)
through the one door, with clear errors for what does not apply over HTTP — and an audit judged by a running tiny
``brrm serve`` gives the local audit's results."""

from __future__ import annotations

import json
import pickle

import pytest

import brrm
from brrm.audit import AuditOptions, plan_items, run_audit
from brrm.records import read_records
from brrm.service import RemoteJudge
from tests.audit_support import pair_rows, write_jsonl
from tests.serve_helpers import serving_in_process

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("load-remote")
    path = str(save_tiny_qwen3(tmp / "rm", sequence_classification=True))
    with serving_in_process(["--model", path], tmp) as srv:
        yield srv.url, path


def test_load_with_backend_serve_is_a_remote_judge_equal_to_the_local_one(served):
    url, path = served
    with brrm.load(url, backend="serve", timeout_s=30) as remote, brrm.load(path) as local:
        assert isinstance(remote, RemoteJudge) and isinstance(remote, brrm.RewardJudge)
        assert remote.info.pairwise is False and remote.info.concurrent is True
        assert remote.info.fingerprint == local.info.fingerprint  # the served weights' own fingerprint
        assert remote.info.spec == brrm.JudgeSpec(url, backend="serve", options={"timeout_s": 30})
        got, want = remote.score(["What is 2+2?"], ["4"]), local.score(["What is 2+2?"], ["4"])
        assert got[0].reward == pytest.approx(want[0].reward, abs=1e-6)
        assert "scalar" in repr(remote)


def test_what_does_not_apply_over_http_is_a_clear_error(served):
    url, _ = served
    with pytest.raises(brrm.ConfigError, match="pass backend='serve'"):
        brrm.load(url)
    with pytest.raises(brrm.ConfigError, match="pass backend='serve'"):
        brrm.load(url, backend="vllm")
    with pytest.raises(brrm.ConfigError, match="needs the http"):
        brrm.load("some/model", backend="serve")
    with pytest.raises(brrm.ConfigError, match="option 'dtype' does not apply to backend='serve'"):
        brrm.load(url, backend="serve", dtype="float16")
    with pytest.raises(brrm.ConfigError, match="kind 'brrm' does not apply"):
        brrm.load(url, backend="serve", kind="brrm")
    with pytest.raises(brrm.ConfigError, match="calibration does not apply"):
        brrm.load(url, backend="serve", calibration="calib.json")
    with pytest.raises(brrm.ConfigError, match="timeout_s"):
        brrm.load(url, backend="serve", timeout_s=0)
    assert brrm.load(url, backend="serve", kind="bt").info.takes_principle is False


def test_a_serve_spec_round_trips_loads_and_never_keeps_the_key(served, monkeypatch):
    url, _ = served
    spec = brrm.JudgeSpec(url, backend="serve", options={"retries": 1})
    assert brrm.JudgeSpec.from_json(spec.to_json()) == spec == pickle.loads(pickle.dumps(spec))
    assert spec.fingerprint == "serve:" + url
    judge = spec.load()
    assert isinstance(judge, RemoteJudge) and judge.retries == 1 and judge.info.spec == spec
    keyed = brrm.load(url, backend="serve", api_key="not-needed-here")
    assert "api_key" not in keyed.info.spec.options and "not-needed-here" not in json.dumps(keyed.info.to_dict())


def test_an_audit_judged_by_brrm_serve_equals_the_local_audit(served, tmp_path):
    url, path = served
    rows = pair_rows(8)
    items = plan_items(read_records(write_jsonl(tmp_path / "in.jsonl", rows), "pairs"), "pairs")
    opts = AuditOptions(shape="pairs", progress=False)
    remote = run_audit(items, tmp_path / "remote", opts, spec=brrm.JudgeSpec(url, backend="serve"))
    local = run_audit(items, tmp_path / "local", opts, spec=brrm.JudgeSpec(path))
    assert remote.judged == local.judged == 8

    def results(directory):
        lines = (directory / "results.jsonl").read_text().splitlines()
        return {r["id"]: r["result"] for r in map(json.loads, lines)}

    got, want = results(tmp_path / "remote"), results(tmp_path / "local")
    assert got.keys() == want.keys() == {r["id"] for r in rows}
    for rid in want:
        assert (got[rid]["winner"], got[rid]["status"]) == (want[rid]["winner"], want[rid]["status"]), rid
        assert got[rid]["p_a"] == pytest.approx(want[rid]["p_a"], abs=1e-6)
    again = run_audit(items, tmp_path / "remote", opts, spec=brrm.JudgeSpec(url, backend="serve"))
    assert again.judged == 0  # resumed: nothing judged twice


def test_a_remote_judge_refuses_replies_from_other_weights_behind_the_same_url(tmp_path):
    """The server restarted on other weights at the same URL: the judge loaded before refuses its replies (naming
    both fingerprints) instead of returning the new model's rewards as its own."""
    from brrm.testing import save_tiny_qwen3
    from tests.serve_helpers import free_port

    first = str(save_tiny_qwen3(tmp_path / "rm1", sequence_classification=True, seed=1))
    second = str(save_tiny_qwen3(tmp_path / "rm2", sequence_classification=True, seed=2))
    port = free_port()
    with serving_in_process(["--model", first, "--kind", "bt"], tmp_path, port=port) as srv:
        judge = brrm.load(srv.url, backend="serve")
        before = judge.score(["q"], ["a response"])[0]
        assert before.ok and before.provenance.fingerprint == judge.info.fingerprint
    with serving_in_process(["--model", second, "--kind", "bt"], tmp_path, port=port):
        with pytest.raises(brrm.ConfigError, match="now judges with other weights"):
            judge.score(["q"], ["a response"])
        again = brrm.load(srv.url, backend="serve")  # loading it again is the way on
        assert again.info.fingerprint != judge.info.fingerprint and again.score(["q"], ["a response"])[0].ok
