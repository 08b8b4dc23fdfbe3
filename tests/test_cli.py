"""``brrm judge`` and ``brrm rank`` end to end on a saved tiny Qwen3 (tier 1) and on the embedded SmolLM2
(tier 3), and the CLI as a new user meets it: every mistake is one line naming the flag, before any model loads."""

from __future__ import annotations

import contextlib
import json
import re

import pytest

from brrm.cli import main
from tests.conftest import REPO

TINY_ARGS = ["--kind", "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off",
             "--no-progress"]
PAIRS = str(REPO / "examples/pairs.jsonl")


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
    assert rows[0]["provenance"]["model"] == tiny_dir
    assert "invalid records 3" in stdout and "parse failures 0" in stdout and "accuracy" in stdout
    # the first bad records' reasons are printed (line, field, valid options), not only counted
    assert "skipped: line 2: not valid JSON" in stdout and "'bot' is not valid; expected one of system" in stdout


def test_a_causal_lm_of_unknown_kind_is_named_not_guessed(capsys, tiny_dir):
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir)
    assert "cannot tell the kind" in line and "Qwen3ForCausalLM" in line and "--kind" in line


def test_judge_swap_prints_probability_and_consistency(tmp_path, capsys, tiny_dir):
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "judge", "--input", PAIRS, "--limit", "3", "--swap", "--output", str(out),
                           "--model", tiny_dir, *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    for r in rows:
        assert len(r["sub_judgments"]) == 2 and isinstance(r["consistent"], bool)
        assert 0.0 <= r["p_a"] <= 1.0 and all(s["id"] == r["id"] for s in r["sub_judgments"])
    assert stdout.count("P(A>B)=") == 3 and stdout.count("consistent=") == 3
    assert "swap consistency rate" in stdout and "order-averaged accuracy" in stdout
    # the cost of both orders, turn by turn, in every row and in the summary
    for r in rows:
        assert len(r["turns"]) == 2 and r["turns"][1]["cached"] >= r["turns"][0]["prompt"] // 2
        assert sum(t["prompt"] for t in r["turns"]) == r["prompt_tokens"]
    assert re.search(r"tokens per judgment: mean [\d,]+ \(p95 [\d,]+; prompt [\d,]+, cached [\d,]+, generated", stdout)
    assert "judgments/s" in stdout


def test_judge_to_stdout_keeps_jsonl_clean(capsys, tiny_dir):
    code, stdout, stderr = _run(capsys, "judge", "--input", PAIRS, "--limit", "1", "--model", tiny_dir,
                                "--kind", "brrm", "--decoding", "faithful", "--max-new-tokens", "16", "--no-progress")
    assert code == 0
    (row,) = [json.loads(line) for line in stdout.splitlines()]
    assert row["status"] in ("truncated", "parse_failure", "ok") and "summary:" in stderr
    assert row["consistent"] is None  # only one order was judged


def test_progress_counts_pairs_written_and_labels_turns(tmp_path, capsys, tiny_dir):
    code, _, stderr = _run(capsys, "judge", "--input", PAIRS, "--limit", "4", "--output", str(tmp_path / "o.jsonl"),
                           "--model", tiny_dir, "--kind", "brrm", "--batch-size", "4", "--max-new-tokens", "420",
                           "--block-token-cap", "8", "--thinking", "off", "-q")
    assert code == 0
    import re

    assert not re.findall(r"\| \d+\.\d/4 ", stderr)  # the count is whole pairs written, never half a pair per turn
    assert {int(x) for x in re.findall(r"\| (\d+)/4 ", stderr)} <= {0, 1, 2, 3, 4} and "| 4/4 " in stderr
    assert "judging (pairs written)" in stderr and "turns done: 4 of 4 pairs" in stderr  # turns, said as turns


def test_rank_groups_prints_ranking_and_cost(tmp_path, capsys, tiny_dir):
    src = tmp_path / "groups.jsonl"
    src.write_text("\n".join([
        json.dumps({"id": "g1", "prompt": "2+2?", "responses": ["4", "5", "four"]}),
        json.dumps({"id": "g2", "prompt": "Name a colour.", "responses": "not a list"}),
        json.dumps({"id": "g3", "prompt": "Say hi.", "responses": ["Hi!", "Hello."]}),
    ]) + "\n")
    out = tmp_path / "ranks.jsonl"
    code, stdout, _ = _run(capsys, "rank", "--input", str(src), "--output", str(out), "--model", tiny_dir,
                           "--strategy", "circular", "--swap", *TINY_ARGS[:-1])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["g1", "g2", "g3"] and rows[1]["status"] == "invalid_input"
    assert rows[0]["strategy"] == "circular" and rows[0]["n_judgments"] == 3 and len(rows[0]["rewards"]) == 3
    assert all(r["status"] == "ok" for r in rows[0]["rewards"]) and len(rows[0]["wins"]) == 3
    assert "strategy circular with swap: 8 two-turn judgments in total" in stdout  # 3 × 2 orders + one pair × 2
    assert rows[2]["n_judgments"] == 1 and rows[2]["judgments"][0]["consistent"] is not None
    assert "g1" in stdout and "ranking #" in stdout
    assert "judgments 3 (0 failed; 6 two-turn runs, as the cost line counts)" in stdout  # the header's unit too


def test_rank_reference_without_a_reference_is_one_invalid_row_and_the_rest_are_ranked(tmp_path, capsys, tiny_dir):
    src = tmp_path / "groups.jsonl"
    src.write_text("\n".join([json.dumps({"id": "no-ref", "prompt": "2+2?", "responses": ["4", "5"]}),
                              json.dumps({"id": "ref", "prompt": "2+2?", "responses": ["4", "5"], "reference": "4"})])
                   + "\n")
    out = tmp_path / "ranks.jsonl"
    code, stdout, _ = _run(capsys, "rank", "--input", str(src), "--output", str(out), "--model", tiny_dir,
                           "--strategy", "reference", *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r.get("status")) for r in rows] == [("no-ref", "invalid_input"), ("ref", "ok")]
    assert rows[0]["reason"].startswith("line 1: strategy 'reference' needs a 'reference' field")
    assert rows[1]["strategy"] == "reference" and all(r["status"] == "ok" for r in rows[1]["rewards"])
    assert "skipped: line 1: strategy 'reference' needs a 'reference' field" in stdout
    assert _refused(capsys, "rank", "--input", str(src), "--output", str(out), "--model", tiny_dir, "--limit", "1",
                    "--strategy", "reference", "--overwrite", *TINY_ARGS).startswith("brrm: error: --input ")


def test_rank_a_one_response_group_first_is_an_invalid_row_not_a_crash(tmp_path, capsys, tiny_dir):
    """A group of one response costs no judgment; first in the file it once left the run's chunk list empty
    (IndexError after the header). It is now one invalid_input row, and the groups after it are ranked."""
    src = tmp_path / "groups.jsonl"
    src.write_text("\n".join([json.dumps({"id": "one", "prompt": "p", "responses": ["only"]}),
                              json.dumps({"id": "two", "prompt": "Say hi.", "responses": ["Hi!", "Hello."]})]) + "\n")
    out = tmp_path / "ranks.jsonl"
    code, stdout, _ = _run(capsys, "rank", "--input", str(src), "--output", str(out), "--model", tiny_dir,
                           "--strategy", "circular", *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["one", "two"]
    assert [r["status"] for r in rows[0]["rewards"]] == ["invalid_input"]
    assert "nothing to compare" in rows[0]["rewards"][0]["reason"]
    assert rows[1]["n_judgments"] == 2 and all(r["status"] == "ok" for r in rows[1]["rewards"])  # 0 vs 1, 1 vs 0


def test_rank_with_a_scalar_model_uses_its_scores(tmp_path, capsys):
    from brrm.testing import save_tiny_qwen3

    rm = save_tiny_qwen3(tmp_path / "rm", seed=1, sequence_classification=True)
    src = tmp_path / "groups.jsonl"
    src.write_text(json.dumps({"prompt": "2+2?", "responses": ["4", "5", "6", ""]}) + "\n")
    out = tmp_path / "ranks.jsonl"
    code, stdout, _ = _run(capsys, "rank", "--input", str(src), "--output", str(out), "--model", str(rm),
                           "--no-progress")
    assert code == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["strategy"] == "scores" and row["rewards"][3]["status"] == "empty" and len(row["ranking"]) == 3
    assert "4 scalar rewards" in stdout


# ------------------------------------------------------------------------------------ the CLI a new user meets
def _refused(capsys, *argv):
    from unittest import mock

    import transformers

    loads: list[tuple[str, tuple]] = []

    def loader(name: str):
        def load(*args, **kwargs):  # every model, tokenizer or config load (and so any hub request) starts here
            loads.append((name, args))
            raise RuntimeError(f"a refused command loaded {name}")
        return load

    with contextlib.ExitStack() as patches:
        for name in ("AutoConfig", "AutoTokenizer", "AutoModelForCausalLM", "AutoModelForSequenceClassification"):
            patches.enter_context(mock.patch.object(getattr(transformers, name), "from_pretrained", loader(name)))
        code, stdout, stderr = _run(capsys, *argv)
    assert loads == [], loads  # refused before any model loads
    assert code == 2 and "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("brrm: error: "), stderr
    return lines[0]


def test_options_are_validated_before_any_model_loads_and_name_flags(capsys, tiny_dir):
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--kind", "brrm", "--batch-size", "0")
    assert "--batch-size must be an integer >= 1" in line and "batch_size" not in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--kind", "brrm", "--max-new-tokens", "0")
    assert "--max-new-tokens must be an integer >= 1" in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--field", "prompt")
    assert "--field 'prompt' is not field=column" in line
    line = _refused(capsys, "score", "--input", PAIRS, "--model", tiny_dir, "--kind", "principle",
                    "--recipe", "fancy", "--principle", "x")
    assert "recipe 'fancy' is not valid; expected one of auto, qwen3_genrm, llama_reward" in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--kind", "bt", "--decoding", "faithful")
    assert "--decoding does not apply to --kind bt" in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--kind", "brrm", "--decoding", "fast")
    assert "invalid choice: 'fast'" in line and "see brrm judge --help" in line  # argparse mistakes: one line too


def test_paths_and_models_that_do_not_exist_are_one_line(tmp_path, capsys, tiny_dir):
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", tiny_dir, "--output",
                    str(tmp_path / "missing" / "out.jsonl"))
    assert "--output" in line and "does not exist" in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", str(tmp_path / "my-modle"), "--kind", "brrm")
    assert "not a local directory" in line and "config.json" in line
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", str(tmp_path / "my-modle"))
    assert "not a local directory" in line  # named before the kind is asked for
    line = _refused(capsys, "judge", "--input", PAIRS, "--model", "nvidia/no-such-model-xyz", "--kind", "brrm")
    assert "not in the Hugging Face cache" in line and "local directory" in line  # offline: no 52 s of retries
    line = _refused(capsys, "judge", "--input", str(tmp_path / "nope.jsonl"))
    assert "does not exist" in line


def test_empty_or_all_bad_input_exits_nonzero_without_loading_the_model(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert "holds no records" in _refused(capsys, "judge", "--input", str(empty))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n" + json.dumps({"prompt": "x"}) + "\n")
    line = _refused(capsys, "judge", "--input", str(bad))
    assert "none of its 2 records is valid" in line and "line 1" in line


def test_version_and_help_show_real_defaults(capsys):
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("brrm 0.")
    from brrm.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, cmd in sub.choices.items():
        for action in cmd._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help.strip(), (name, action.dest)
    judge_help = " ".join(sub.choices["judge"].format_help().split())
    assert "8192 (published), 400 for the embedded demo" in judge_help and "default: transformers" in judge_help


def test_scalar_kind_without_model_is_a_clear_error(capsys):
    line = _refused(capsys, "judge", "--input", PAIRS, "--kind", "bt", "--no-progress")
    assert "the embedded demo model is a chat model, not a Bradley–Terry reward model" in line
    line = _refused(capsys, "score", "--input", PAIRS)
    assert "--principle" in line  # the demo runs as a principle judge and needs a principle


def test_embedded_model_judges_example_pairs(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "judge", "--input", PAIRS, "--limit", "1", "--output", str(out),
                           "--block-token-cap", "8", "--no-progress")
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok"]  # one pair: the demo model's real path through the CLI
    assert all(r["winner"] in ("A", "B") and r["dimensions"] for r in rows)
    assert "SmolLM2" in stdout and "published: 8192 per turn" in stdout
    assert "400 new tokens per turn, 4096 total" in stdout  # the README's demo budgets
    assert rows[0]["provenance"]["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # a name, not a cache path


def test_the_embedded_demo_has_the_budgets_the_readme_states():
    """README: "400 new tokens per turn, 4096 in total, free-text blocks capped at 32 tokens"."""
    import brrm

    with brrm.load() as judge:
        sampling, config = judge.info.sampling, judge.info.config
        assert (sampling.max_new_tokens, sampling.max_total_tokens, config.block_token_cap) == (400, 4096, 32)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "400 new tokens per turn, 4096 in total, free-text blocks capped at 32 tokens" in readme


def test_embedded_model_scores_with_a_principle(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    code, stdout, _ = _run(capsys, "score", "--input", PAIRS, "--limit", "1", "--output", str(out),
                           "--principle", "The response is factually correct.", "--no-progress")
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["text"] in ("Yes", "No") for r in rows)
    assert rows[0]["provenance"]["policies"]["format"] == "llama_reward"


def test_llmbar_natural_records_through_the_cli(shared, tmp_path, capsys, tiny_dir):
    out = tmp_path / "out.jsonl"
    path = shared / "data/LLMBar/LLMBar/Natural/dataset.json"
    code, stdout, _ = _run(capsys, "judge", "--input", str(path), "--limit", "4", "--output", str(out),
                           "--model", tiny_dir, *TINY_ARGS)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["label"] in ("A", "B") for r in rows)
    assert "accuracy" in stdout and "/4 labelled ok pairs" in stdout


def test_the_interrupted_line_says_how_many_lines_the_output_holds(tmp_path):
    from argparse import Namespace

    from brrm.cli.records import complete_lines, interrupted

    out = tmp_path / "o.jsonl"
    args = Namespace(output=str(out), resume=False)
    assert interrupted(args) == (f"brrm: interrupted before the first line was written to {out}; rerun the same "
                                 "command to start over")
    out.write_text('{"line": 1}\n{"line": 2}\n{"li')  # a torn last line is not counted (resume cuts it off)
    assert interrupted(args) == (f"brrm: interrupted: 2 lines, in input order, are in {out}; rerun the same command "
                                 "with --resume to continue (an unbroken run's bytes)")
    assert interrupted(Namespace(output="-", resume=False)).startswith("brrm: interrupted (the lines went to stdout")
    one = out.with_name("one.jsonl")
    one.write_text('{"line": 1}\n')
    assert interrupted(Namespace(output=str(one), resume=False)).startswith(
        f"brrm: interrupted: 1 line, in input order, is in {one};")
    whole = len('{"line": 1}\n{"line": 2}\n')
    for chunk in (1, 3, 12, 13, 1 << 20):  # lines and torn tails across chunk boundaries
        assert complete_lines(out, chunk) == (2, whole), chunk
