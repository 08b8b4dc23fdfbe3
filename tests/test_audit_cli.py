"""``brrm audit`` command-line mistakes: one ``brrm: error:`` line naming the flag, exit 2, before any model loads."""

from __future__ import annotations

import json

import pytest

from brrm.cli import main
from tests.audit_support import pair_rows, write_jsonl


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def pairs(tmp_path):
    return str(write_jsonl(tmp_path / "pairs.jsonl", pair_rows(3)))


@pytest.mark.parametrize(("argv", "message"), [
    ([], "needs INPUT"),
    (["{pairs}"], "--output DIR is required"),
    (["{pairs}", "--output", "{out}", "--kind", "brrm", "--slice-by", "language"],
     "--slice-by 'language': no record has that column"),
    (["{pairs}", "--output", "{out}", "--kind", "brrm", "--strategy", "circular"], "--strategy applies to group"),
    (["{pairs}", "--output", "{out}", "--kind", "brrm", "--actors", "2"], "apply with --ray"),
    (["{pairs}", "--output", "{out}"], "is neither a folder nor a hub id"),
    (["{pairs}", "--output", "{out}", "--kind", "principle"], "--kind principle judging pairs needs --principle"),
    (["{single}", "--output", "{out}", "--kind", "brrm"], "single-response records need --kind bt or --kind principle"),
    (["{single}", "--output", "{out}", "--kind", "principle"], "or records with their own principles"),
    (["{pairs}", "--output", "{out}", "--kind", "brrm", "--low-margin", "0.7"], "--low-margin"),
    (["--status", "{out}"], "holds no audit store"),
])
def test_mistakes_are_one_clear_error_line(capsys, tmp_path, pairs, argv, message):
    single = write_jsonl(tmp_path / "single.jsonl", [{"prompt": "hi", "response": "hello"}])
    args = [a.format(pairs=pairs, single=single, out=tmp_path / "out") for a in argv]
    code, _, err = run(capsys, "audit", *args, "--model", str(tmp_path / "no-model-needed"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("brrm: error:") and message in lines[0], err
    assert not (tmp_path / "out" / "audit.sqlite").exists()  # nothing was written before the error


def test_output_that_is_a_file_is_refused(capsys, tmp_path, pairs):
    (tmp_path / "taken").write_text(json.dumps({}))
    code, _, err = run(capsys, "audit", pairs, "--output", str(tmp_path / "taken"))
    assert code == 2 and "is a file" in err


def test_a_bradley_terry_audit_says_it_ignores_records_principles(capsys, tmp_path):
    from brrm.testing import save_tiny_qwen3

    rm = save_tiny_qwen3(tmp_path / "rm", seed=1, sequence_classification=True)
    rows = [{"prompt": f"Question {i}?", "response": "An answer.", **({"principle": "Be brief."} if i < 2 else {})}
            for i in range(4)]
    single = write_jsonl(tmp_path / "single.jsonl", rows)
    code, _, err = run(capsys, "audit", str(single), "--output", str(tmp_path / "out"), "--model", str(rm),
                       "--kind", "bt", "--device", "cpu")
    assert code == 0, err
    assert "note: 2 records carry a 'principle' field (lines [1, 2]); kind bt takes no principle" in err
    assert (tmp_path / "out" / "audit.sqlite").exists()
