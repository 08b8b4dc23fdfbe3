"""Every benchmark result names its data (issue 32, item 4): the hub revision or a sha256 of the local files, and
the items scored, in ``run.json``, ``result.json`` and the :class:`~brrm.bench.BenchResult`; a subset spelled like
a known one only up to case (RewardBench 2 ``ties`` for ``Ties``) is refused naming the known one, before any
model loads."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.core import BenchItem, ItemResult, known_subset
from brrm.bench.data import data_revision, files_sha256, items_sha256
from brrm.cli import main
from brrm.errors import ConfigError
from brrm.types import ScalarReward, Status

RB2 = Path(__file__).parent / "fixtures" / "rewardbench2"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _rows() -> list[dict]:
    return [json.loads(x) for x in (RB2 / "test.jsonl").read_text().splitlines() if x.strip()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_local_file_is_named_by_the_sha256_of_its_bytes_and_a_folder_by_its_files(tmp_path):
    (tmp_path / "a").mkdir()
    one = _write(tmp_path / "a" / "x.jsonl", [{"id": 0}])
    assert files_sha256(one) == hashlib.sha256(b'{"id": 0}\n').hexdigest()
    (tmp_path / "a" / "y.jsonl").write_text('{"id": 1}\n')
    before = files_sha256(tmp_path / "a")
    (tmp_path / "a" / "SOURCE.md").write_text("- **Commit:** `abc`\n")  # notes do not rename the data
    assert files_sha256(tmp_path / "a") == before
    (tmp_path / "a" / "y.jsonl").write_text('{"id": 2}\n')
    assert files_sha256(tmp_path / "a") != before and len(before) == 64
    rev = data_revision("a", root=tmp_path)
    assert rev["commit"] == "abc" and rev["sha256"] == files_sha256(tmp_path / "a")


def test_a_hub_id_records_the_revision_asked_for():
    commit = "0" * 39 + "1"
    rev = data_revision(None, source="nobody/not-a-cached-dataset", revision=commit)
    assert rev["commit"] == commit and rev["revision"] == commit and "--revision" in str(rev["from"])
    rev = data_revision(None, source="nobody/not-a-cached-dataset", revision="main")
    assert rev["commit"] is None and rev["revision"] == "main"


def test_the_shared_data_folder_has_both_its_upstream_commit_and_its_digest(shared):
    rev = data_revision("RM-Bench", root=shared / "data")
    assert rev["commit"] == "73c52d7b27b361621361ec959ac6c0eb9bb7a689"
    assert rev["sha256"] == files_sha256(shared / "data" / "RM-Bench") and len(str(rev["sha256"])) == 64


def test_the_items_digest_follows_the_content():
    a = BenchItem("1", "Math", "2+2?", ("4", "5"), ())
    b = BenchItem("1", "Math", "2+2?", ("4", "6"), ())
    assert items_sha256([a]) == items_sha256([a]) and items_sha256([a]) != items_sha256([b])


def test_a_subset_spelled_up_to_case_is_refused_naming_the_known_one():
    assert known_subset("Ties", ("Math", "Ties"), "row 1") == "Ties"
    with pytest.raises(ConfigError, match=r"row 3: the subset 'ties' is not a known subset; the known one is 'Ties'"):
        known_subset("ties", ("Math", "Ties"), "row 3")
    with pytest.raises(ConfigError, match=r"the subset 'Chat' is not one of Math, Ties"):
        known_subset("Chat", ("Math", "Ties"), "row 3")


def test_rewardbench2_data_with_ties_lower_case_stops_before_the_model_loads(tmp_path, capsys):
    rows = _rows()
    ties = next(k for k, r in enumerate(rows) if r["subset"] == "Ties")
    rows[ties]["subset"] = "ties"
    data = _write(tmp_path / "rb2.jsonl", rows)
    code, _, err = _cli(capsys, "bench", "rewardbench2", "--data", str(data), "--model", "/nonexistent-model")
    assert code == 2 and f"row {ties + 1}: the subset 'ties' is not a known subset; the known one is 'Ties'" in err


def test_an_official_score_file_with_ties_lower_case_is_refused(tmp_path, capsys):
    scores = json.loads((RB2 / "scores.json").read_text())
    k = scores["subset"].index("Ties")
    scores["subset"][k] = "ties"
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    code, _, err = _cli(capsys, "bench", "rewardbench2", "--predictions", str(tmp_path / "scores.json"))
    assert code == 2 and "the known one is 'Ties'" in err


def test_rewardbench2_overall_counts_only_the_items_of_its_rows():
    item = BenchItem("1", "Math", "q", ("a", "b"), (), {"num_correct": 1})
    rewards = (ScalarReward(1.0, Status.OK), ScalarReward(0.0, Status.OK))
    result = get_benchmark("rewardbench2").score([ItemResult(item, (), rewards)])
    assert result.row("Overall").n == 1
    stray = ItemResult(BenchItem("2", "math", "q", ("a", "b"), (), {"num_correct": 1}), (), rewards)
    with pytest.raises(ConfigError, match="the known one is 'Math'"):
        get_benchmark("rewardbench2").score([ItemResult(item, (), rewards), stray])


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> str:
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-rm") / "rm", sequence_classification=True))


def test_run_json_and_result_json_name_the_data_and_a_changed_file_does_not_resume(tiny_rm, tmp_path, capsys):
    data = _write(tmp_path / "rb2.jsonl", _rows())
    out_dir = tmp_path / "out"
    argv = ("bench", "rewardbench2", "--data", str(data), "--model", tiny_rm, "--subset", "Math", "--limit", "1",
            "--output", str(out_dir), "--no-progress")
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    run = json.loads((out_dir / "run.json").read_text())
    result = json.loads((out_dir / "result.json").read_text())
    assert run["data_revision"]["sha256"] == digest and result["data_revision"]["sha256"] == digest
    assert result["data_revision"]["items_sha256"] == run["data_revision"]["items_sha256"]
    assert len(run["data_revision"]["items_sha256"]) == 64 and f"files sha256 {digest}" in out
    rows = _rows()
    rows[-1]["prompt"] += " (edited)"
    _write(data, rows)
    code, _, err = _cli(capsys, *argv)
    assert code == 2 and "other settings (data_revision)" in err


def test_the_bench_result_itself_carries_the_data_revision_and_digests(tiny_rm, tmp_path):
    import brrm
    from brrm.bench import evaluate
    from brrm.bench.data import run_revision
    from brrm.bench.protocol import score_both

    data = _write(tmp_path / "rb2.jsonl", _rows())
    bench = get_benchmark("rewardbench2")
    with brrm.load(tiny_rm, kind="bt", device="cpu") as judge:
        result = evaluate(bench, judge, subsets=["Math"], limit=2, data=str(data))
    items = bench.load(["Math"], limit=2, source=str(data))
    assert result.data_revision == run_revision(bench, items, source=str(data))  # what run.json records
    assert result.data_revision["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert result.data_revision["items_sha256"] == items_sha256(items)
    assert result.to_dict()["data_revision"] == result.data_revision
    # the figure over parsed items names the same data
    ok = (ScalarReward(1.0, Status.OK), ScalarReward(0.0, Status.OK))
    failed = (ScalarReward.failed(Status.BACKEND_ERROR, "down"), ScalarReward(0.0, Status.OK))
    judged = [ItemResult(items[0], (), ok), ItemResult(items[1], (), failed)]
    both = score_both(bench, judged, None, replace(bench.score(judged), data_revision=result.data_revision))
    assert both.n_parsed == 1 and both.parsed is not None and both.parsed.data_revision == result.data_revision
