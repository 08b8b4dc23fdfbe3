"""No line holds a run hostage: a JSONL line over the byte limit is that line's ``invalid_input`` (the rest is read
and judged), and a binary or non-UTF-8 input is one error line naming the file, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import brrm.records._io as records_io
from brrm.cli import main
from brrm.errors import ConfigError
from brrm.records import RecordError, read_records
from tests.conftest import REPO

LIMIT = 4096
"""The line limit the tests set (the real one, 16 MiB, is the same code path with a larger number)."""


def _pair(k: int, pad: int = 0) -> str:
    return json.dumps({"id": f"p{k}", "prompt": "2+2?" + " " * pad, "response_a": "4", "response_b": "5",
                       "label": "A"})


def test_the_limit_is_exact_in_bytes_and_the_following_lines_keep_their_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(records_io, "MAX_LINE_BYTES", LIMIT)
    at = _pair(2)
    at = _pair(2, LIMIT - len(at.encode()))  # exactly LIMIT bytes
    over = _pair(3, LIMIT - len(_pair(3).encode()) + 1)  # one byte more
    huge = _pair(5, 3 * (1 << 20))  # 3 MiB: skipped in chunks
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\r\n".join([_pair(1), at, over, "", huge, _pair(6)]) + "\r\n").encode())
    got = read_records(path, "pairs")
    assert [type(r).__name__ for r in got] == ["PairRecord", "PairRecord", "RecordError", "RecordError", "PairRecord"]
    assert [r.line for r in got] == [1, 2, 3, 5, 6] and [r.id for r in got] == ["p1", "p2", "3", "5", "p6"]
    assert isinstance(got[2], RecordError) and got[2].reason.startswith(f"line 3: longer than the {LIMIT}-byte")
    assert records_io.MAX_LINE_BYTES == LIMIT and 16 << 20 == 16 * 1024 * 1024  # the documented default: 16 MiB


def test_an_over_limit_line_is_invalid_input_and_the_rest_is_judged(tmp_path, capsys, monkeypatch):
    from brrm.testing import save_tiny_qwen3

    monkeypatch.setattr(records_io, "MAX_LINE_BYTES", LIMIT)
    tiny = str(save_tiny_qwen3(tmp_path / "tiny"))
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([_pair(1), _pair(2, 5 * LIMIT), _pair(3)]) + "\n")
    code = main(["judge", "--input", str(src), "--output", str(out), "--model", tiny, "--kind", "brrm",
                 "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off", "--no-progress"])
    stdout = capsys.readouterr().out
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["status"]) for r in rows] == [(1, "ok"), (2, "invalid_input"), (3, "ok")]
    assert f"line 2: longer than the {LIMIT}-byte line limit" in rows[1]["reason"]
    assert "invalid records 1" in stdout


@pytest.mark.parametrize(("name", "data"), [("bin.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
                                            ("latin1.jsonl", '{"prompt": "caf\u00e9"}\n'.encode("latin-1")),
                                            ("nul.jsonl", b'{"prompt": "a"}\n\x00\x00\x00\n'),
                                            ("bin.json", b"\xff\xfe[\x00{\x00")])
def test_a_binary_or_non_utf8_file_is_one_error_line(tmp_path, name, data, capsys):
    """Each file through ``main(argv)`` (its exit code and stderr); the first also as a real ``python -m brrm``
    process, whose whole stderr (import-time output included) must be that one line."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=f"{name}: not a UTF-8 text file"):
        read_records(path, "pairs")
    argv = ["judge", "--input", str(path), "--model", str(tmp_path / "no-model")]
    capsys.readouterr()
    code = main(argv)
    runs = [(code, capsys.readouterr().err)]
    if name == "bin.jsonl":
        done = subprocess.run([sys.executable, "-m", "brrm", *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        runs.append((done.returncode, done.stderr))
    for returncode, stderr in runs:
        assert returncode != 0 and "Traceback" not in stderr, stderr
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("brrm: error: ") and name in lines[0], stderr
