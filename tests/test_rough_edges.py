"""Rough edges a new user met (issue 29): each one fixed and held here, through the real CLI."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from brrm.cli import main
from tests.forked_cli import ForkedCLI

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "examples" / "pairs.jsonl"


def test_usage_mistakes_name_the_verb_once(capsys):
    assert main(["--bogus"]) == 2
    assert capsys.readouterr().err == "brrm: error: unrecognized arguments: --bogus (see brrm --help)\n"
    assert main(["judge", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("brrm: error: judge: ") and "brrm: error: brrm" not in err and err.count("\n") == 1


def test_a_flag_is_never_taken_for_a_longer_one(capsys):
    assert main(["probe", "--input", str(PAIRS)]) == 2  # probe reads its input as an argument; --input-format …
    assert "unrecognized arguments: --input" in capsys.readouterr().err


def test_a_json_document_on_one_jsonl_line_is_said_so(tmp_path, capsys):
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    (tmp_path / "doc.jsonl").write_text(json.dumps({"pairs": rows[:3]}) + "\n")
    assert main(["judge", "--input", str(tmp_path / "doc.jsonl"), "--model", "x/y"]) == 2
    err = capsys.readouterr().err
    assert "an object of record lists ('pairs': 3 records), not one record" in err and "--input-format json" in err
    from brrm.records import read_records

    assert len(read_records(tmp_path / "doc.jsonl", "pairs", format="json")) == 3  # the way the line points to


def test_the_hub_hint_names_the_hf_command(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["judge", "--input", str(PAIRS), "--model", "someone/not-a-model"]) == 2
    err = capsys.readouterr().err
    assert "hf download someone/not-a-model --local-dir DIR" in err and "huggingface-cli" not in err


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("lm"), seed=3))


def test_sigterm_ends_a_probe_run_with_one_line_and_143(lm):
    """A real process gets the signal: the console script forked from this one (:mod:`tests.forked_cli`, the imports
    done), as ``python -m brrm probe`` runs."""
    proc = ForkedCLI(["probe", str(PAIRS), "--model", lm, "--kind", "brrm", "--temperature", "0",
                      "--max-new-tokens", "450", "--limit", "3"], stderr=True)
    assert proc.stderr is not None
    start, seen = time.monotonic(), []
    line = proc.stderr.readline()  # "cost: …" (on the terminal stream): the judge is loaded, judging has begun
    while line and not line.startswith("cost:") and time.monotonic() - start < 300:
        seen.append(line)
        line = proc.stderr.readline()
    assert line.startswith("cost:"), "".join(seen)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # a hang guard: the child is killed and the test fails after 60 s
    assert proc.wait(1) == 143 and err.strip().splitlines()[-1] == "brrm: interrupted", err[-2000:]
    assert "Traceback" not in err


def test_the_grammar_note_only_when_a_grammar_compiles(lm, tmp_path, monkeypatch, capsys):
    from brrm.constraints import compile as grammar

    monkeypatch.setenv(grammar.INDEX_CACHE_ENV, str(tmp_path / "cache"))  # an empty disk cache
    monkeypatch.setattr(grammar, "_INDEX_CACHE", {})  # and nothing in memory: the first run compiles
    argv = ["judge", "--input", str(PAIRS), "--limit", "1", "--model", lm, "--kind", "brrm", "--temperature", "0",
            "--max-new-tokens", "450", "--block-token-cap", "8", "--thinking", "off", "--no-progress", "--quiet"]
    assert main(argv) == 0
    assert capsys.readouterr().err.count("note: compiling the output grammar") == 1
    monkeypatch.setattr(grammar, "_INDEX_CACHE", {})  # a new process: the disk cache holds every grammar now
    assert main(argv) == 0
    assert "output grammar" not in capsys.readouterr().err
