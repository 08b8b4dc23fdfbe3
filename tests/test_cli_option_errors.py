"""Options the CLI user typed are never silently ignored, and every bad value is one ``brrm: error:`` line that
names the flag the user typed (``--temperature``), never the Python keyword (``temperature``) or a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import brrm
from brrm.cli import build_parser, main
from brrm.cli.errors import error_line
from brrm.cli.records import check_output

pytestmark = pytest.mark.timeout(600)

PRINCIPLE = "The response is polite."


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("cli-option-errors")
    rm = save_tiny_qwen3(tmp / "rm", seed=1, sequence_classification=True)
    lm = save_tiny_qwen3(tmp / "lm", seed=3)
    rows = {"single": {"id": "s", "prompt": "Say hi.", "response": "Hi!"},
            "pairs": {"id": "p", "prompt": "Say hi.", "response_a": "Hi!", "response_b": "Go away."},
            "groups": {"id": "g", "prompt": "Say hi.", "responses": ["Hi!", "Go away."]}}
    paths = {}
    for shape, row in rows.items():
        paths[shape] = tmp / f"{shape}.jsonl"
        paths[shape].write_text(json.dumps(row) + "\n")
    return {"rm": str(rm), "lm": str(lm), "tmp": tmp, **{k: str(v) for k, v in paths.items()}}


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, (argv, err)
    assert lines and lines[-1].startswith("brrm: error: "), (argv, err)
    return lines[-1]


@pytest.fixture()
def no_loading(monkeypatch):
    """Fail the test if a model is loaded (the refusal must come first)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("brrm.load was called")

    monkeypatch.setattr(brrm, "load", refuse)


@pytest.mark.parametrize("kind", ["auto", "bt"])
def test_principle_for_a_bt_model_is_refused_by_score_judge_and_rank_before_loading(files, capsys, no_loading, kind):
    for verb, shape in (("score", "single"), ("judge", "pairs"), ("rank", "groups")):
        out = files["tmp"] / f"{verb}-{kind}.jsonl"
        line = _error(capsys, [verb, "-i", files[shape], "-o", str(out), "-m", files["rm"], "--kind", kind,
                               "--principle", PRINCIPLE, "--no-progress"])
        assert "Bradley–Terry models take no principle" in line and "drop --principle" in line, (verb, line)
        assert "--kind principle" in line and not out.exists(), (verb, line)


def test_score_refuses_principle_right_after_loading_when_the_config_did_not_tell(files, capsys, monkeypatch):
    monkeypatch.setattr("brrm.cli.flags.detected_kind", lambda model: "auto")  # as a model only loading tells
    out = files["tmp"] / "after-load.jsonl"
    line = _error(capsys, ["score", "-i", files["single"], "-o", str(out), "-m", files["rm"], "--principle",
                           PRINCIPLE, "--device", "cpu", "--no-progress"])
    assert line == (f"brrm: error: {files['rm']!r} is a Bradley–Terry model (kind bt) and Bradley–Terry models take "
                    "no principle; drop --principle (only principle models, --kind principle, take one)")
    assert not out.exists()


def test_python_callers_get_the_refusal_too(files):
    with pytest.raises(brrm.ConfigError, match="unknown option 'principle' for kind 'bt'"):
        brrm.load(files["rm"], principle=PRINCIPLE)
    judge = brrm.load(files["rm"], device="cpu")
    with pytest.raises(brrm.ConfigError, match="take no principle"):
        judge.score(["Say hi."], ["Hi!"], principles=PRINCIPLE)
    with pytest.raises(brrm.ConfigError, match="take no principle"):
        judge.rank("Say hi.", ["Hi!", "Go away."], principles=PRINCIPLE)
    judge.close()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (a folder no file can be made in)")
def test_an_output_that_cannot_be_written_is_refused_before_loading(files, capsys, no_loading):
    """A folder that exists but takes no new file (``/proc``) is one line naming --output, before any model loads
    (it was a FileNotFoundError traceback after the header); a file that exists keeps its bytes."""
    for verb, shape in (("judge", "pairs"), ("score", "single"), ("rank", "groups")):
        line = _error(capsys, [verb, "-i", files[shape], "-o", "/proc/brrm-test.jsonl", "-m", files["rm"],
                               "--no-progress"])
        assert line == "brrm: error: --output '/proc/brrm-test.jsonl' cannot be written (No such file or directory)"
    kept = files["tmp"] / "kept.jsonl"
    kept.write_text('{"line": 1}\n')
    check_output(str(kept))
    assert kept.read_text() == '{"line": 1}\n'
    check_output(str(files["tmp"] / "new.jsonl"))
    assert not (files["tmp"] / "new.jsonl").exists()


def _bad_values(files):
    """(argv, flag the message must name) for bad values of each subcommand's options."""
    pairs, single, groups, rm, lm = files["pairs"], files["single"], files["groups"], files["rm"], files["lm"]
    out = str(files["tmp"] / "x.jsonl")
    principle = ["--kind", "principle", "-m", lm, "--principle", PRINCIPLE]
    return [
        (["judge", "-i", pairs, "--temperature", "-1"], "--temperature"),
        (["judge", "-i", pairs, "--top-p", "0"], "--top-p"),
        (["judge", "-i", pairs, "--samples", "0"], "--samples"),
        (["judge", "-i", pairs, "--turn2-tokens", "nope"], "--turn2-tokens"),
        (["judge", "-i", pairs, "--batch-size", "0"], "--batch-size"),
        (["judge", "-i", pairs, "--limit", "0"], "--limit"),
        (["judge", "-i", pairs, "--decoding", "nope"], "--decoding"),
        (["judge", "-i", pairs, "-m", rm, "--margin", "-1"], "--margin"),
        (["judge", "-i", pairs, "-m", rm, "--recipe", "nope"], "--recipe"),
        (["judge", "-i", pairs, "-m", rm, "--temperature", "0.5"], "--temperature"),
        (["judge", "-i", pairs, "-m", rm, "--decoding", "faithful"], "--decoding"),
        (["judge", "-i", pairs, *principle, "--reward", "nope"], "--reward"),
        (["judge", "-i", pairs, *principle, "--recipe", "llama_reward", "--question", "no placeholder"], "--question"),
        (["score", "-i", single, "-m", rm, "--recipe", "nope"], "--recipe"),
        (["score", "-i", single, "-m", rm, "--max-length", "0"], "--max-length"),
        (["score", "-i", single, *principle, "--temperature", "-1"], "--temperature"),
        (["score", "-i", single, *principle, "--recipe", "nope"], "--recipe"),
        (["rank", "-i", groups, "--samples", "0"], "--samples"),
        (["rank", "-i", groups, "-m", rm, "--batch-size", "0"], "--batch-size"),
        (["calibrate", "-i", pairs, "-o", out, "--temperature", "-1"], "--temperature"),
        (["calibrate", "-i", pairs, "-o", out, "--heldout", "2"], "--heldout"),
        (["bench", "rewardbench", "--limit", "0"], "--limit"),
        (["bench", "rewardbench", "--sweep-samples", "0,x"], "--sweep-samples"),
        (["bench", "rewardbench", "-m", rm, "--temperature", "0.5"], "--temperature"),
        (["serve", "--temperature", "-1"], "--temperature"),
        (["serve", "--concurrency", "0"], "--concurrency"),
        (["serve", "--max-batch", "0"], "--max-batch"),
        (["serve", "--breaker-failures", "0"], "--breaker-failures"),
        (["serve", "--breaker-cooldown", "0"], "--breaker-cooldown"),
        (["serve", "-m", rm, "--principle", PRINCIPLE], "--principle"),
    ]


def test_every_bad_value_names_the_flag_and_no_python_keyword(files, capsys, busy_8000):
    """With port 8000 in use (``busy_8000``): ``brrm serve``'s bad values are named before it binds its port."""
    for argv, flag in _bad_values(files):
        line = _error(capsys, [*argv, "--device", "cpu"] if argv[0] != "bench" else argv)
        assert flag in line, (argv, line)
        keyword = flag[2:].replace("-", "_")
        python_name = re.compile(rf"(?<![\w-]){keyword}(?: must|=| ')|'{keyword}'")  # the keyword as an option
        assert not python_name.search(line), (argv, line)


def test_library_messages_keep_python_names_and_the_cli_names_the_field_by_lookup():
    """A ConfigError carries the option it refuses (and the options it lists); the CLI shows each as its flag, and
    leaves prose, record fields and request fields as they are (nothing is parsed out of a message)."""
    with pytest.raises(brrm.ConfigError, match="^temperature must be a finite number >= 0, got -1.0$") as caught:
        brrm.load(temperature=-1.0)
    assert caught.value.field == "temperature"
    parser = build_parser()
    with pytest.raises(brrm.ConfigError) as unknown:
        brrm.load(principle=PRINCIPLE, kind="brrm")
    assert str(unknown.value).startswith("unknown option 'principle' for kind 'brrm' with the transformers backend; "
                                         "valid options: batch_invariant, batch_size, ")
    cases = [
        (unknown.value, "unknown option '--principle' for kind 'brrm' with the transformers backend; valid options: "
                        "--batch-invariant, --batch-size, "),
        (brrm.ConfigError("recipe 'nope' is not valid; expected one of auto", field="recipe"),
         "--recipe 'nope' is not valid; expected one of auto"),
        (brrm.ConfigError("strip_thinking must be true or false", field="strip_thinking"),
         "--keep-thinking must be true or false"),
        (brrm.ConfigError("base_urls must be URLs", field="base_urls"), "--base-url must be URLs"),
        # prose, record fields and dotted request fields stay as they are
        (brrm.ConfigError("principle models need --principle or a 'principle' field"),
         "principle models need --principle or a 'principle' field"),
        (brrm.ConfigError("field 'response' must be a string", field="field"), "field 'response' must be a string"),
        (brrm.ConfigError("items[0].principle: only principle models take one"),
         "items[0].principle: only principle models take one"),
        (brrm.ConfigError("options.max_new_tokens 5 exceeds the server's limit"),
         "options.max_new_tokens 5 exceeds the server's limit"),
    ]
    for error, shown in cases:
        assert error_line(error, parser, "judge").startswith(shown), (error, shown)
    unnamed = brrm.ConfigError("api_key must be a string of at least 8 characters")  # raised without its field
    assert error_line(unnamed, parser, "serve") == "--api-key must be a string of at least 8 characters"
    # a subcommand's own flags name words only there: bench has no --split
    split = brrm.ConfigError("split 'x' is not in the data", field="split")
    assert error_line(split, parser, "audit") == "--split 'x' is not in the data"
    assert error_line(split, parser, "bench") == "split 'x' is not in the data"


def test_a_recipe_of_the_other_scalar_kind_is_refused_before_any_data_or_model_loads(files, capsys, no_loading,
                                                                                    monkeypatch):
    """``--recipe`` is one flag for two kinds' values (a Bradley–Terry recipe, a principle model's prompt format):
    once the kind is known (``--kind``, or the model's config under ``auto``) a value of the other kind is refused,
    naming the flag and the kind's values, before a benchmark's data or any record is read."""
    from brrm.bench import base

    def no_data(*_args, **_kwargs):
        raise AssertionError("benchmark data was read")

    monkeypatch.setattr(base.Benchmark, "load", no_data)
    line = _error(capsys, ["bench", "rewardbench", "--kind", "principle", "--recipe", "sequence_classification",
                           "--model", files["lm"], "--data-dir", str(files["tmp"] / "absent")])
    assert line == ("brrm: error: --recipe 'sequence_classification' is not valid; expected one of auto, qwen3_genrm, "
                    "llama_reward")
    out = files["tmp"] / "recipe.jsonl"
    line = _error(capsys, ["score", "-i", str(files["tmp"] / "absent.jsonl"), "-o", str(out), "-m", files["rm"],
                           "--recipe", "qwen3_genrm"])  # kind auto: the config says bt
    assert "--recipe 'qwen3_genrm' is not valid; expected one of auto, sequence_classification" in line
    assert not out.exists()


def test_a_file_that_is_not_its_input_format_is_one_error_line(files, capfd):
    """A JSONL file read as Parquet: the one ``brrm: error:`` line names the file and the format; the datasets
    library's own log line about the schema is not printed too (checked at the file descriptor)."""
    assert main(["judge", "-i", files["pairs"], "-o", str(files["tmp"] / "fmt.jsonl"), "--input-format",
                 "parquet"]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("brrm: error: pairs.jsonl: could not be read as parquet"), err
