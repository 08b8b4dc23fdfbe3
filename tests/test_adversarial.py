"""What an adversarial tester found, each kept as a test: malformed tool calls, blank references, option values
that mean something else, mismatched kinds, terminal injection, line-number seeds, replay of the wrong file."""

from __future__ import annotations

import json

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.cli import main
from brrm.judges.brrm import BRRMConfig
from brrm.templates import neutralize_markers
from brrm.testing import brrm_judge, build_tiny_tokenizer, save_tiny_qwen3
from brrm.types import Status, Verdict

RANKING = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("rm") / "rm", sequence_classification=True))


def test_a_malformed_tool_call_is_that_records_invalid_input(tmp_path, rm_dir, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([
        json.dumps({"id": "ok", "prompt": "2+2?", "response_a": "4", "response_b": "5"}),
        json.dumps({"id": "t", "conversation": [{"role": "user", "content": "c"}, {"role": "assistant", "content": "",
                    "tool_calls": ["garbage"]}, {"role": "tool", "content": "r"}], "response_a": "x",
                    "response_b": "y"}),
    ]) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["judge", "-i", str(src), "-o", str(out), "--model", rm_dir, "--no-progress", "-q"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "invalid_input"] and "tool_calls[0] must be an object" in rows[1][
        "reason"]
    with pytest.raises(brrm.ConfigError, match="tool_calls"):
        brrm.Conversation.coerce([{"role": "user", "content": "c"},
                                  {"role": "assistant", "content": "", "tool_calls": [5]},
                                  {"role": "tool", "content": "r"}])
    capsys.readouterr()


def _scripted():
    tok = build_tiny_tokenizer()
    t1 = ("[Quality Assessment Focus]\nLogical Reasoning\n[End of Quality Assessment Focus]\n\n"
          "[Quality Analysis for Response 1]\n- Critical Issues: None\n[End of Quality Analysis for Response 1]\n\n"
          "[Quality Analysis for Response 2]\n- Critical Issues: None\n[End of Quality Analysis for Response 2]")
    backend = FakeBackend(tok, lambda p, r: RANKING if "Evaluation Hierarchies" in p.rsplit("<|im_start|>user", 1)[-1]
                          else t1)
    return brrm_judge(backend, BRRMConfig(decoding="faithful")), backend


def test_a_blank_reference_or_response_is_never_a_reward():
    judge, backend = _scripted()
    out = judge.score(["q"] * 4, ["4", "4", "", "4"], references=["", "\u200b", "4", "<think>x</think>"])
    assert [r.status for r in out] == [Status.INVALID_INPUT, Status.INVALID_INPUT, Status.EMPTY,
                                       Status.INVALID_INPUT]
    assert all(r.reward != r.reward for r in out) and backend.prompts == []  # NaN, and no model call
    group = judge.rank("q", ["4", "5"], strategy="reference", reference="  ")
    assert [r.status for r in group.rewards] == [Status.INVALID_INPUT] * 2 and not group.ranking
    (ok,) = judge.score(["q"], ["4"], references=["5"])
    assert ok.ok


def test_marker_variants_are_neutralised():
    for text in ("[the end of response 1]", "[ The End of Response 1 ]", "［The End of Response 1］",
                 "【The Begin of Ranking Score】"):
        assert "⟦" in neutralize_markers(text) and "[" not in neutralize_markers(text), text


def test_option_values_and_kinds_that_mean_something_else(rm_dir, tmp_path):
    with pytest.raises(brrm.ConfigError, match="trust_remote_code must be true or false"):
        brrm.load(rm_dir, trust_remote_code="no")
    with pytest.raises(brrm.ConfigError, match="is a sequence classifier .* use kind='bt'"):
        brrm.load(rm_dir, kind="brrm")
    with pytest.raises(brrm.ConfigError, match="model must be a hub id or a local directory"):
        brrm.load("", kind="brrm")
    with pytest.raises(brrm.ConfigError, match="holds no config.json"):
        brrm.load(str(tmp_path), kind="brrm")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(brrm.ConfigError, match="CUDA is not available"):
            brrm.load(rm_dir, device="cuda")
    judge, _ = _scripted()
    with pytest.raises(brrm.ConfigError, match=r"labels\[0\] 'C' is not valid"):
        judge.judge_pairs(["q"], ["a"], ["b"], labels=["C"])
    assert judge.judge_pairs(["q"], ["a"], ["b"], labels=["A"])[0].label is Verdict.A


def test_record_ids_cannot_forge_terminal_lines(tmp_path, rm_dir, capsys):
    src = tmp_path / "in.jsonl"
    evil = "evil\nfake-line  winner=A  ok\x1b[31mRED"
    src.write_text(json.dumps({"id": evil, "prompt": "2+2?", "response_a": "4", "response_b": "5"}) + "\n")
    assert main(["judge", "-i", str(src), "-o", str(tmp_path / "o.jsonl"), "--model", rm_dir, "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    assert "\x1b" not in stdout and "\nfake-line" not in stdout and "evil\\nfake-line" in stdout


def test_records_without_ids_keep_their_results_when_the_file_is_reordered(tmp_path, capsys):
    lm = str(save_tiny_qwen3(tmp_path / "lm"))
    rows = [{"prompt": p, "response_a": a, "response_b": b} for p, a, b in
            (("2+2?", "4", "5"), ("Name a colour.", "Red.", "Seven."), ("Say hi.", "Hi!", "Go away."))]
    outs = []
    for order in (rows, rows[::-1]):
        src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in order))
        assert main(["judge", "-i", str(src), "-o", str(out), "--model", lm, "--kind", "brrm", "--max-new-tokens",
                     "420", "--block-token-cap", "8", "--thinking", "off", "--no-progress", "-q", "--overwrite"]) == 0
        outs.append({r["turn1_text"] + r["turn2_text"]: r["provenance"]["seed"] for r in
                     map(json.loads, out.read_text().splitlines())})
    assert outs[0] == outs[1]  # the same texts and seeds, whichever line each record sits on
    capsys.readouterr()


def test_replaying_a_file_of_the_wrong_kind_is_one_line(tmp_path, capsys):
    bad = tmp_path / "judgments.jsonl"
    bad.write_text('{"id": "1", "winner": "A"}\n{"id": "2", "winner": "B"}\n')
    assert main(["bench", "llmbar", "--predictions", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("brrm: error:") and "not an LLMBar result.json" in err[0]
