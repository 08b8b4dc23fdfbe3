"""Duplicate ids in an input are said by name and count (issue 47, item 4), through the real CLI.

``brrm judge`` and ``brrm audit`` keep every record apart (results filed by position or content) and say which ids
repeat on the terminal, in the judge summary and in the audit's summary.json and report; ``brrm bench`` notes them
in its result; and where a metric or table joins by id (RewardBench 2's Ties score, an arena's answers per prompt,
PandaLM's replay) the input is refused naming every repeated id with its count: one ``brrm: error:`` line, no
traceback. The models are tiny random Bradley–Terry heads (brrm.testing): each run takes a second or two.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.rewardbench2 import ties_score
from brrm.cli import main
from brrm.errors import ConfigError
from brrm.records.duplicates import duplicate_ids

RB2 = Path(__file__).parent / "fixtures" / "rewardbench2"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> str:
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("dup-rm") / "rm", sequence_classification=True))


IDS = ["a", "b", "a", "c", "b", "a"]
SAID = "2 ids appear more than once: a (×3), b (×2)"


def test_the_description_names_each_repeated_id_with_its_count_in_first_seen_order():
    found = duplicate_ids(IDS)
    assert found.describe() == SAID and found.to_dict() == {"a": 3, "b": 2} and found.ids == ("a", "b")
    assert not duplicate_ids(["a", "b"]) and duplicate_ids(["a", "b"]).describe() == ""
    assert duplicate_ids(["x", "x"], what="item ids").describe() == "1 item id appears more than once: x (×2)"
    many = duplicate_ids([str(k // 2) for k in range(30)])  # 15 ids, each twice: 10 named, the rest counted
    assert many.describe().endswith("9 (×2), … and 5 more")
    with pytest.raises(ConfigError, match=r"^in\.jsonl: 2 ids appear more than once: a \(×3\), b \(×2\); joins"):
        found.refuse("in.jsonl", "joins by id")


def test_judge_names_repeated_ids_and_keeps_every_record(capsys, tmp_path, tiny_rm):
    rows = [{"id": i, "prompt": f"Question {k}?", "response_a": "Yes.", "response_b": f"No {k}."}
            for k, i in enumerate(IDS)]
    out = tmp_path / "out.jsonl"
    code, term, err = _cli(capsys, "judge", "--input", _write(tmp_path / "pairs.jsonl", rows), "--model", tiny_rm,
                           "--kind", "bt", "--device", "cpu", "--output", out, "--no-progress", "-q")
    assert code == 0, err
    assert f"note: {SAID}; each record keeps its own result and output line" in term  # JSONL to a file: stdout
    assert f"duplicate ids: {SAID} (each record has its own line)" in term.split("summary:")[1]  # and the summary
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == IDS and [x["line"] for x in lines] == [1, 2, 3, 4, 5, 6]


def test_audit_names_repeated_ids_in_its_summary_and_report(capsys, tmp_path, tiny_rm):
    rows = [{"id": i, "prompt": f"Question {k}?", "response": f"Answer {k}."} for k, i in enumerate(IDS)]
    folder = tmp_path / "audit"
    code, _, err = _cli(capsys, "audit", _write(tmp_path / "single.jsonl", rows), "--output", folder,
                        "--model", tiny_rm, "--kind", "bt", "--device", "cpu", "--no-progress")
    assert code == 0, err
    assert f"note: {SAID}" in err
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["run"]["duplicate_ids"] == {"count": 2, "description": SAID, "ids": {"a": 3, "b": 2}}
    assert summary["run"]["rows"] == 6  # every row is its own item
    assert f"{SAID}; each row is judged and shown as its own item" in (folder / "report.html").read_text()


def test_audit_of_unique_ids_says_none(capsys, tmp_path, tiny_rm):
    rows = [{"id": f"r{k}", "prompt": f"Question {k}?", "response": "Answer."} for k in range(2)]
    folder = tmp_path / "audit"
    code, _, err = _cli(capsys, "audit", _write(tmp_path / "single.jsonl", rows), "--output", folder,
                        "--model", tiny_rm, "--kind", "bt", "--device", "cpu", "--no-progress")
    assert code == 0, err
    assert "more than once" not in err
    assert json.loads((folder / "summary.json").read_text())["run"]["duplicate_ids"]["count"] == 0


def test_bench_notes_repeated_item_ids_in_its_result(capsys, tmp_path, tiny_rm):
    rows = [json.loads(x) for x in (RB2 / "test.jsonl").read_text().splitlines() if x.strip()]
    math_rows = [r for r in rows if r["subset"] == "Math"]
    for r in math_rows:
        r["id"] = "m"  # both Math items share one id: kept apart (Math is scored per item, not joined by id)
    folder = tmp_path / "out"
    code, out, err = _cli(capsys, "bench", "rewardbench2", "--data", _write(tmp_path / "rb2.jsonl", rows),
                          "--model", tiny_rm, "--subset", "Math", "--output", folder, "--no-progress")
    assert code == 0, err
    said = "1 item id appears more than once: m (×2); each is judged and scored as its own item"
    assert f"note: {said}" in out
    result = json.loads((folder / "result.json").read_text())
    assert any(n.startswith(said) for n in result["notes"]) and result["rows"][0]["n"] == 2
    assert len((folder / "judgments.jsonl").read_text().splitlines()) == 2


def test_bench_refuses_repeated_ties_ids_where_the_score_joins_by_id(capsys, tmp_path):
    scores = json.loads((RB2 / "scores.json").read_text())
    scores["id"][scores["id"].index("ref:1")] = "ref:0"  # ref:0 twice: one prompt's statistics would overwrite
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(scores))
    code, _, err = _cli(capsys, "bench", "rewardbench2", "--predictions", path)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert ("RewardBench 2 Ties: 1 Ties id appears more than once: ref:0 (×2); the Ties score pairs 'ref:N' with "
            "'tied:N' by id") in lines[0]
    with pytest.raises(ConfigError, match=r"ref:1 \(×2\)"):  # the same id spelled two ways is one id
        ties_score([("ref:1", [1.0, 0.0], 1), ("ref:01", [1.0, 0.0], 1)])
    rows = [json.loads(x) for x in (RB2 / "test.jsonl").read_text().splitlines() if x.strip()]
    rows[10]["id"] = "ref:01"  # row 11; row 13 is ref:1: refused when the data is read, before a model loads
    code, _, err = _cli(capsys, "bench", "rewardbench2", "--data", _write(tmp_path / "rb2.jsonl", rows),
                        "--model", tmp_path / "no-model-needed")
    assert code == 2 and err.count("\n") == 1, err
    assert "rows 11 and 13: Ties id 'ref:1' appears twice (row 11 spells it 'ref:01')" in err


def test_pandalm_replay_refuses_repeated_idx_where_it_joins_by_idx(tmp_path, shared):
    stored = [{"idx": 1, "gpt_result": 1}, {"idx": 2, "gpt_result": 2}, {"idx": 1, "gpt_result": 0}]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match=r"1 idx value appears more than once: 1 \(×2\); the replay joins"):
        get_benchmark("pandalm").replay([path], root=shared / "data")
    path.write_text(json.dumps({"idx": 1}))  # other bad files: one clear error or a failed item, no traceback
    with pytest.raises(ConfigError, match="expected a JSON list of records"):
        get_benchmark("pandalm").replay([path], root=shared / "data")
    path.write_text(json.dumps([{"idx": 1, "gpt_result": [1]}, {"idx": 2, "gpt_result": "2"}]))
    assert get_benchmark("pandalm").replay([path], root=shared / "data").row("Overall").failures == 1


def test_arena_refuses_repeated_prompt_and_model_naming_each_with_count_and_lines(capsys, tmp_path):
    rows = [{"prompt_id": p, "model": m, "prompt": f"Q{p}?", "response": r}
            for p, m, r in [(1, "x", "a"), (1, "y", "b"), (1, "x", "c"), (2, "y", "d"), (2, "x", "e"),
                            (2, "y", "f"), (2, "y", "g")]]
    code, _, err = _cli(capsys, "arena", "--input", _write(tmp_path / "arena.jsonl", rows), "--round-robin",
                        "--kind", "bt", "--model", tmp_path / "no-model-needed")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert ("2 pairs appear more than once: ('1', 'x') (×2, on lines 1 and 3), ('2', 'y') (×3, on lines 4, 6 and "
            "7); the arena joins each model's answer to a prompt by prompt_id") in lines[0]
