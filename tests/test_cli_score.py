"""``brrm score`` (scalar rewards of records) and scalar models behind ``brrm judge --kind bt|principle``."""

from __future__ import annotations

import json

import pytest

import brrm
from brrm.cli import main
from brrm.records import FieldMap, RecordError, read_pair_records, read_records
from brrm.testing import save_tiny_qwen3
from brrm.types import Verdict

from .conftest import REPO

PAIRS = REPO / "examples" / "pairs.jsonl"


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("rm") / "tiny-rm", seed=1, sequence_classification=True)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("lm") / "tiny-lm", seed=3)


def _run(capsys, *argv):
    code = main(["score", *argv, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_score_examples_pairs_and_bad_records(tmp_path, rm_dir, capsys):
    src = tmp_path / "in.jsonl"
    good = {"id": "c1", "conversation": [{"role": "user", "content": "Name a colour."}], "response": "Blue."}
    src.write_text("\n".join([
        json.dumps(good),
        "{not json",
        json.dumps({"id": "c3", "prompt": "Say hi."}),
        json.dumps({"prompt": "Say hi.", "response": ""}),
        json.dumps({"prompt": "Say hi.", "response": "<think>be brief</think>Hi!"}),
    ]) + "\n")
    out = tmp_path / "out.jsonl"
    code, stdout, stderr = _run(capsys, "-i", str(src), "-o", str(out), "-m", str(rm_dir), "--dtype", "float32",
                                "--device", "cpu")
    assert code == 0
    rows = _lines(out)
    assert [r["status"] for r in rows] == ["ok", "invalid_input", "invalid_input", "empty", "ok"]
    assert rows[1]["reason"].startswith("line 2:") and "missing field 'response'" in rows[2]["reason"]
    assert rows[0]["id"] == "c1" and rows[3]["id"] == "4" and rows[4]["thinking_stripped"] is True
    assert rows[1]["reward"] is None and isinstance(rows[0]["reward"], float)
    assert "skipped: line 2: not valid JSON" in stdout and "skipped: line 3:" in stdout  # reasons shown, not counted
    summary = stdout.split("summary:\n", 1)[1]  # a human summary, as brrm judge prints its own
    assert "responses 5; scored 2; invalid records 2" in summary and "failures: empty 1;" in summary
    assert "invalid: line 2, line 3" in summary and "rewards (ok only; failures never enter them): mean" in summary
    assert not stdout.strip().splitlines()[-1].startswith("{")

    pairs_out = tmp_path / "pairs.jsonl"
    assert _run(capsys, "-i", str(PAIRS), "-o", str(pairs_out), "-m", str(rm_dir), "--device", "cpu")[0] == 0
    rows = _lines(pairs_out)
    n = sum(1 for line in PAIRS.read_text().splitlines() if line.strip())
    assert len(rows) == 2 * n and all(r["status"] == "ok" for r in rows)
    assert rows[0]["id"] == "factual-capital:A" and rows[1]["id"] == "factual-capital:B"
    assert rows[0]["provenance"]["policies"]["recipe"] == "sequence_classification"
    assert rows[0]["provenance"]["model"] == str(rm_dir)


def test_score_with_principles_and_option_errors(tmp_path, lm_dir, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "What is 2+2?", "response": "4"}) + "\n"
                   + json.dumps({"prompt": "Say hi.", "response": "Hi!", "principle": "ignored"}) + "\n")
    out = tmp_path / "out.jsonl"
    code, _, _ = _run(capsys, "-i", str(src), "-o", str(out), "-m", str(lm_dir), "--kind", "principle", "--recipe",
                      "llama_reward", "--principle", "The answer is correct.", "--principle",
                      "The answer is short.", "--device", "cpu")
    assert code == 0
    rows = _lines(out)
    assert [r["principle"] for r in rows] == ["The answer is correct.", "The answer is short."] * 2
    assert all(r["status"] == "ok" and r["text"] in ("Yes", "No") for r in rows)
    code, _, stderr = _run(capsys, "-i", str(src), "-m", str(lm_dir), "--kind", "bt", "--principle", "x")
    assert code == 2 and "take no principle" in stderr
    code, _, stderr = _run(capsys, "-i", str(src), "-m", str(lm_dir), "--kind", "brrm")
    assert code == 2 and "needs a scalar model" in stderr
    code, stdout, stderr = _run(capsys, "-i", str(PAIRS), "-m", str(lm_dir), "--kind", "principle", "--principle", " ")
    assert code == 2 and not stdout  # refused before the header: the rule every verb's --principle meets
    assert stderr == "brrm: error: --principle must be a non-empty string or a list of them, got ' '\n"
    code, _, stderr = _run(capsys, "-i", str(PAIRS), "-m", str(lm_dir), "--kind", "principle", "--recipe",
                           "llama_reward", "--device", "cpu", "--limit", "3")
    assert code == 2 and "a 'principle' field; missing on lines [1, 2, 3]" in stderr  # each pair row's line once


def test_bt_serves_the_pairwise_judge_command(rm_dir):
    judge = brrm.load(str(rm_dir), batch_size=4, dtype="float32", device="cpu")
    records = [r for r in read_pair_records(PAIRS) if not isinstance(r, RecordError)]
    out = judge.judge_pairs([r.conversation for r in records], [r.response_a for r in records],
                            [r.response_b for r in records], ids=[r.id for r in records],
                            labels=[r.label for r in records])
    assert len(out) == len(records) and all(j.ok and j.winner in (Verdict.A, Verdict.B) for j in out)
    assert [j.id for j in out] == [r.id for r in records] and all(0 < j.p_a < 1 for j in out)
    assert out[0].provenance.decoding == "score"
    with pytest.raises(brrm.ConfigError, match="unknown option 'principle' for kind 'bt'"):
        brrm.load(str(rm_dir), principle="x")


def test_principle_model_serves_the_pairwise_judge_command(lm_dir):
    judge = brrm.load(str(lm_dir), kind="principle", principle=["correct", "short"], recipe="llama_reward",
                      device="cpu")
    (j,) = judge.judge_pairs(["What is 2+2?"], ["4"], ["5"])
    assert j.ok and j.winner in (Verdict.A, Verdict.B, Verdict.TIE)
    (r,) = judge.score(["What is 2+2?"], ["4"])
    singles = [judge.score(["What is 2+2?"], ["4"], principles=p)[0].reward for p in ("correct", "short")]
    assert r.reward == pytest.approx(sum(singles) / 2, abs=1e-5) and r.principle == "correct | short"
    bare = brrm.load(str(lm_dir), kind="principle", recipe="llama_reward", device="cpu")
    with pytest.raises(brrm.ConfigError, match="principle is required"):
        bare.score(["hi"], ["hello"])


def test_score_records_fields(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text('qid,question,answer\n7,"Name a colour.",Blue.\n8,Say hi.,\n')
    fields = FieldMap.from_overrides(["id=qid", "prompt=question", "response=answer"])
    recs = read_records(str(src), "single", fields=fields)
    assert (recs[0].id, recs[0].response, recs[0].conversation.messages[0].content) == ("7", "Blue.", "Name a colour.")
    assert recs[1].id == "8" and recs[1].response == ""  # an empty cell is an empty response (scored as empty)
    bad = read_records(str(src), "single", fields=FieldMap.from_overrides(["prompt=question",
                                                                           "response=missing_column"]))
    assert all(isinstance(r, RecordError) and "missing field 'missing_column'" in r.reason for r in bad)
    with pytest.raises(brrm.ConfigError, match="is not field=column"):
        FieldMap.from_overrides(["answer"])


def test_a_bradley_terry_score_says_it_ignores_records_principles(tmp_path, rm_dir, capsys):
    src = tmp_path / "in.jsonl"
    rows = [{"prompt": "Name a colour.", "response": "Blue.", "principle": "Be brief." if i % 2 else ""}
            for i in range(24)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "-i", str(src), "-o", str(out), "-m", str(rm_dir), "--device", "cpu")
    assert code == 0 and [r["status"] for r in _lines(out)] == ["ok"] * 24
    note = next(line for line in stdout.splitlines() if line.startswith("note:"))
    assert "12 records carry a 'principle' field (lines [2, 4, 6, 8, 10, 12, 14, 16, 18, 20] and 2 more)" in note
    assert "takes no principle" in note and "--kind principle" in note
    code, stdout, _ = _run(capsys, "-i", str(src), "-o", str(tmp_path / "o2.jsonl"), "-m", str(rm_dir),
                           "--device", "cpu", "--field", "principle=rule")
    assert code == 0 and "note:" not in stdout  # the column a principle is read from is absent: nothing ignored


def test_a_resumed_or_limited_score_writes_the_lines_an_unbroken_run_writes(tmp_path, rm_dir, capsys):
    """Bradley–Terry rewards depend on the record only, not on which records share the call (length buckets):
    a run resumed from 3 or 10 lines, and a ``--limit 3`` run, write an unbroken run's bytes."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"Question {i}?", "response": f"Answer {i} " * i})
                           + "\n" for i in range(24)))
    flags = ("-m", str(rm_dir), "--device", "cpu", "--batch-size", "1")
    full = tmp_path / "full.jsonl"
    assert _run(capsys, "-i", str(src), "-o", str(full), *flags)[0] == 0
    lines = full.read_text().splitlines(keepends=True)
    for kept in (3, 10):
        part = tmp_path / f"resumed{kept}.jsonl"
        part.write_text("".join(lines[:kept]))
        assert _run(capsys, "-i", str(src), "-o", str(part), "--resume", *flags)[0] == 0
        assert part.read_bytes() == full.read_bytes()
    limited = tmp_path / "limited.jsonl"
    assert _run(capsys, "-i", str(src), "-o", str(limited), "--limit", "3", *flags)[0] == 0
    assert limited.read_text() == "".join(lines[:3])


def test_a_resumed_rank_says_what_is_left_and_writes_an_unbroken_runs_bytes(tmp_path, rm_dir, capsys):
    src = tmp_path / "groups.jsonl"
    src.write_text("".join(json.dumps({"id": f"g{i}", "prompt": f"Question {i}?",
                                       "responses": [f"Answer {i}.", "No.", f"Maybe {i}."]}) + "\n" for i in range(5)))
    flags = ("-m", str(rm_dir), "--device", "cpu", "--no-progress")
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    assert main(["rank", "-i", str(src), "-o", str(full), *flags]) == 0
    assert "15 scalar rewards" in capsys.readouterr().out
    part.write_text("".join(full.read_text().splitlines(keepends=True)[:2]))
    assert main(["rank", "-i", str(src), "-o", str(part), "--resume", *flags]) == 0
    out = capsys.readouterr().out
    assert f"resuming: 2 of 5 lines already in {part}; 3 to run" in out and "; 9 scalar rewards" in out
    assert part.read_bytes() == full.read_bytes()
    assert main(["rank", "-i", str(src), "-o", str(part), "--resume", *flags]) == 0
    assert "no group left to rank" in capsys.readouterr().out and part.read_bytes() == full.read_bytes()


def test_a_causal_lm_under_kind_bt_loads_as_one_and_reads_its_recipes_vocabulary_logit(tmp_path, lm_dir, capsys):
    """Llama-3.1-Nemotron-70B-Reward-HF is a ``LlamaForCausalLM`` whose reward is vocabulary logit 0: ``--kind bt
    --recipe llama_nemotron`` loads a causal LM as a causal LM (not as a classifier with a fresh head) and scores
    what the recipe reads in process; without the recipe the error names ``--recipe``."""
    import torch

    from brrm.reward_models.bradley_terry import BradleyTerryRewardModel

    out = tmp_path / "nemotron.jsonl"
    code, _, _ = _run(capsys, "-i", str(PAIRS), "-o", str(out), "-m", str(lm_dir), "--kind", "bt", "--recipe",
                      "llama_nemotron", "--device", "cpu")
    rows = _lines(out)
    assert code == 0 and rows and all(r["status"] == "ok" for r in rows)
    assert rows[0]["provenance"]["policies"]["recipe"] == "llama_nemotron"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(lm_dir, dtype=torch.float32).eval()
    rm = BradleyTerryRewardModel.from_model(model, AutoTokenizer.from_pretrained(lm_dir), recipe="llama_nemotron")
    first = read_records(str(PAIRS), "single")[0]
    assert rows[0]["reward"] == pytest.approx(rm.score([first.conversation], [first.response])[0].reward, abs=1e-5)
    code, _, err = _run(capsys, "-i", str(PAIRS), "-o", str(tmp_path / "no.jsonl"), "-m", str(lm_dir), "--kind", "bt")
    assert code == 2 and "is a causal LM; pass --recipe llama_nemotron" in err
