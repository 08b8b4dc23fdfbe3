"""``brrm judge`` end to end on a saved tiny Qwen3 (tier 1) and on the embedded SmolLM2 (tier 3)."""

from __future__ import annotations

import json

import pytest

from brrm.cli import main
from tests.conftest import REPO

TINY_ARGS = ["--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_judge_reports_bad_records_by_line_and_judges_the_rest(tmp_path, capsys, tiny_dir):
    records = tmp_path / "in.jsonl"
    records.write_text("\n".join([
        json.dumps({"id": "good-1", "prompt": "2+2?", "response_a": "4", "response_b": "5", "label": "A"}),
        "{not json",
        json.dumps({"id": "bad-role", "conversation": [{"role": "bot", "content": "hi"}],
                    "response_a": "a", "response_b": "b"}),
        json.dumps({"id": "no-b", "prompt": "hi", "response_a": "a"}),
        json.dumps({"id": "good-2", "conversation": [{"role": "user", "content": "Name a colour."}],
                    "response_a": "Red.", "response_b": "Red.", "label": "tie"}),
    ]) + "\n")
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "judge", "--input", str(records), "--output", str(out), "--model", tiny_dir,
                           *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["status"] for r in rows] == ["ok", "invalid_input", "invalid_input", "invalid_input", "ok"]
    assert "line 2" in rows[1]["reason"] and "'bot'" in rows[2]["reason"] and "response_b" in rows[3]["reason"]
    assert rows[4]["winner"] == "tie" and rows[4]["correct"] is True
    assert rows[0]["winner"] in ("A", "B") and rows[0]["provenance"]["decoding"] == "constrained"
    assert "invalid records 3" in stdout and "parse failures 0" in stdout and "accuracy" in stdout


def test_judge_swap_prints_probability_and_consistency(tmp_path, capsys, tiny_dir):
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "judge", "--input", str(REPO / "examples/pairs.jsonl"), "--limit", "3",
                           "--swap", "--output", str(out), "--model", tiny_dir, *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    for r in rows:
        assert len(r["sub_judgments"]) == 2 and isinstance(r["consistent"], bool)
        assert 0.0 <= r["p_a"] <= 1.0
    assert stdout.count("P(A>B)=") == 3 and stdout.count("consistent=") == 3
    assert "swap consistency rate" in stdout and "order-averaged accuracy" in stdout


def test_judge_to_stdout_keeps_jsonl_clean(tmp_path, capsys, tiny_dir):
    code, stdout, stderr = _run(capsys, "judge", "--input", str(REPO / "examples/pairs.jsonl"), "--limit", "1",
                                "--model", tiny_dir, "--decoding", "faithful", "--max-new-tokens", "16",
                                "--no-progress")
    assert code == 0
    (row,) = [json.loads(line) for line in stdout.splitlines()]
    assert row["status"] in ("truncated", "parse_failure", "ok") and "summary:" in stderr


def test_bad_option_is_a_clear_error(capsys, tiny_dir):
    code, _, stderr = _run(capsys, "judge", "--input", str(REPO / "examples/pairs.jsonl"), "--model", tiny_dir,
                           "--field", "prompt", "--no-progress")
    assert code == 2 and "prompt" in stderr


@pytest.mark.slow
def test_embedded_model_judges_example_pairs(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "judge", "--input", str(REPO / "examples/pairs.jsonl"), "--limit", "2",
                           "--output", str(out), "--block-token-cap", "8", "--no-progress")
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["winner"] in ("A", "B") and r["dimensions"] for r in rows)
    assert "SmolLM2" in stdout and "published: 8192 per turn" in stdout
    assert "smollm2-135m-instruct" in rows[0]["provenance"]["model"]


@pytest.mark.slow
def test_llmbar_natural_records_through_the_cli(shared, tmp_path, capsys, tiny_dir):
    out = tmp_path / "out.jsonl"
    path = shared / "data/LLMBar/LLMBar/Natural/dataset.json"
    code, stdout, _ = _run(capsys, "judge", "--input", str(path), "--limit", "4", "--output", str(out),
                           "--model", tiny_dir, *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["label"] in ("A", "B") for r in rows)
    assert "accuracy" in stdout and "/4 labelled ok pairs" in stdout


def test_scalar_model_type_without_model_is_a_clear_error(capsys):
    code, _, stderr = _run(capsys, "judge", "--input", str(REPO / "examples/pairs.jsonl"), "--model-type", "bt",
                           "--no-progress")
    assert code == 2 and "--model-type bt needs --model" in stderr
