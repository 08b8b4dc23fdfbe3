"""Output that never lies, and unix manners (issue 49 items 2 and 3), through the real CLI on a tiny Qwen3.

Progress counts units finished and stored (a judge's turns are shown as turns, beside the count); an ETA comes
from stored work; the audit report names why its two accuracies differ; a sampled verdict says it was sampled;
an output file is never replaced without ``--resume`` or ``--overwrite``; ``brrm probe`` shows progress.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from brrm.cli import main
from tests.audit_support import TINY_FLAGS, pair_rows, write_jsonl

TINY = ["--kind", "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


@pytest.fixture()
def pairs(tmp_path):
    return str(write_jsonl(tmp_path / "pairs.jsonl", pair_rows(4)))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brrm: error: "), err
    return lines[0]


@pytest.mark.parametrize(("verb", "argv", "resume"), [
    ("judge", ["--input", "{pairs}", "--output", "{out}"], True),
    ("score", ["--input", "{pairs}", "--output", "{out}", "--kind", "bt"], True),
    ("rank", ["--input", "{pairs}", "--output", "{out}"], True),
    ("probe", ["{pairs}", "--output", "{out}"], False),
    ("calibrate", ["--input", "{pairs}", "--output", "{out}"], False),
])
def test_an_existing_output_is_refused_before_any_model_loads(capsys, tmp_path, pairs, verb, argv, resume):
    out = tmp_path / "taken.out"
    out.write_text('{"id": "kept"}\n{"id": "kept too"}\n', encoding="utf-8")
    before = out.read_bytes()
    args = [a.format(pairs=pairs, out=out) for a in argv] + ["--model", str(tmp_path / "no-such-model")]
    code, _, err = run(capsys, verb, *args)
    line = one_error(err)
    assert code == 2 and f"--output '{out}' already exists (2 lines)" in line and "--overwrite" in line
    assert ("pass --resume to continue it, or --overwrite to replace it" in line) is resume
    assert out.read_bytes() == before  # kept, byte for byte
    code, _, err = run(capsys, verb, *args, "--overwrite")  # the refusal lifted: the next check is the model's
    assert code == 2 and "already exists" not in err and out.read_bytes() == before
    if resume:
        code, _, err = run(capsys, verb, *args, "--overwrite", "--resume")
        assert code == 2 and "give one of them" in one_error(err)


def test_a_rerun_without_resume_keeps_the_finished_file(capsys, tmp_path, pairs, tiny_dir):
    out = tmp_path / "judgments.jsonl"
    argv = ["judge", "--input", pairs, "--output", out, "--model", tiny_dir, *TINY, "--temperature", "0",
            "--no-progress"]
    code, stdout, _ = run(capsys, *argv)
    assert code == 0 and len(out.read_text().splitlines()) == 4
    assert "sampled(" not in stdout  # greedy verdicts are not marked
    before = out.read_bytes()
    code, _, err = run(capsys, *argv)
    assert code == 2 and "already exists (4 lines); pass --resume to continue it, or --overwrite" in one_error(err)
    assert out.read_bytes() == before
    code, _, _ = run(capsys, *argv, "--overwrite")
    assert code == 0 and out.read_bytes() == before  # the same judgments, written again on request


def test_a_sampled_verdict_says_so_in_its_line_and_the_summary(capsys, tmp_path, pairs, tiny_dir):
    out = tmp_path / "sampled.jsonl"
    code, stdout, _ = run(capsys, "judge", "--input", pairs, "--output", out, "--model", tiny_dir, *TINY,
                          "--temperature", "1", "--no-progress")
    assert code == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    verdicts = [x for x in stdout.splitlines() if "winner=" in x]
    assert len(verdicts) == 4 and all("sampled(T=1)" in x for x in verdicts), stdout
    against = sum((r["winner"] == "A" and r["p_a"] < 0.5) or (r["winner"] == "B" and r["p_a"] > 0.5)
                  for r in rows if r["status"] == "ok")
    ok = sum(r["status"] == "ok" for r in rows)
    assert (f"sampled verdicts (temperature 1): each winner is one draw from the judge, P(A>B) its probability; "
            f"{against} of {ok} drawn winners go against P(A>B)") in stdout


def test_the_audit_bar_at_ctrl_c_counts_the_rows_stored(capsys, monkeypatch, tmp_path, tiny_dir):
    import brrm.audit.runner as runner

    real, seen = runner.judge_records, []

    def interrupted_after_two(*args, on_result, **kwargs):
        def finished(i, result):
            on_result(i, result)  # committed to the store
            seen.append(i)
            if len(seen) == 2:
                raise KeyboardInterrupt  # as a Ctrl-C between two items, with turns of the others done
        return real(*args, on_result=finished, **kwargs)

    monkeypatch.setattr(runner, "judge_records", interrupted_after_two)
    src = write_jsonl(tmp_path / "pairs.jsonl", pair_rows(6))
    out = tmp_path / "audit"
    code, _, err = run(capsys, "audit", src, "--output", out, "--model", tiny_dir, *TINY_FLAGS,
                       "--summary-every", "0.000001")
    assert code == 130
    conn = sqlite3.connect(str(out / "audit.sqlite"))
    stored = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]
    conn.close()
    assert stored == 2 and "audit interrupted: 2 of 6 rows are in the store" in err
    counts = re.findall(r"auditing \(items stored\):.*?\| (\d+(?:\.\d+)?)/6 ", err)
    assert counts and counts[-1] == "2" and all("." not in c for c in counts), err  # whole items, as stored
    lines = [x for x in err.splitlines() if x.startswith("audit ") and "rows done" in x]
    assert lines and not [x for x in lines if re.search(r"judged \d+\.\d", x)]  # never half an item
    assert all("ETA when the first item is stored" in x for x in lines if "judged 0 this run" in x)


def test_an_eta_comes_from_stored_items_only():
    from brrm.audit.runner import progress_line

    p = {"total": 10, "done": 0, "judged_this_run": 0, "by_status": {}}
    assert "ETA when the first item is stored" in progress_line(p, 60.0)
    p = {"total": 10, "done": 4, "judged_this_run": 2, "by_status": {"ok": 4}}
    assert "judged 2 this run in 1m00s (0.03/s), ETA 3m00s" in progress_line(p, 60.0)  # 6 left at 2 a minute
    assert "ETA" not in progress_line(p, 60.0, final=True)


def test_the_audit_report_names_why_its_two_accuracies_differ(capsys, tmp_path, tiny_dir):
    src = write_jsonl(tmp_path / "pairs.jsonl", pair_rows(4))
    out = tmp_path / "audit"
    flags = [f for f in TINY_FLAGS if f not in ("--temperature", "0.0", "0")]
    code, _, err = run(capsys, "audit", src, "--output", out, "--model", tiny_dir, *flags, "--temperature", "1",
                       "--no-progress")
    assert code == 0, err
    assert "sampled verdicts (temperature 1): each is one draw" in err  # marked as sampled on the terminal
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["sampled"] == {"sampled": True, "temperature": 1.0}  # and in the record's summary
    overall = summary["overall"]
    a, c = overall["agreement"], overall["calibration"]
    html = (out / "report.html").read_text()
    verdicts = f"{a['accuracy']:.3f} ({a['correct']}/{a['labelled_ok']})"
    if c["measured"]["accuracy"] == a["accuracy"] and c["labelled"] == a["labelled_ok"]:
        assert f"equals the overview&#39;s accuracy of the verdicts, {verdicts}" in html
    else:
        assert f"the overview&#39;s accuracy of the verdicts is {verdicts}. They differ because" in html
    if c["against"]:
        assert f"{c['against']} of these {c['labelled']} winner" in html
    assert "accuracy of the verdicts vs labels" in html


def test_probe_shows_progress_and_takes_no_progress(capsys, tmp_path, pairs, tiny_dir):
    argv = ["probe", pairs, "--probes", "position", "--limit", "1", "--model", tiny_dir, *TINY, "--temperature", "0",
            "--bootstrap", "10"]
    code, _, err = run(capsys, *argv, "--no-progress", "--progress")  # the last one says
    assert code == 0 and "probing (pairs judged: originals, then each probe's)" in err and "| 2/2 " in err, err
    assert "cost: (1 original + 1 probe) x [1 pair x 1 order x 1 sample = 1 judgment (2 generations)] = 2 " \
           "judgments" in err and "probes over 1 pair (" in err  # counts in words, never "1 pairs"
    code, _, err = run(capsys, *argv, "--no-progress")
    assert code == 0 and "probing" not in err and "flip rate" in err


def test_every_command_list_names_every_command():
    from brrm.cli import SUBCOMMANDS
    from tests.conftest import REPO

    verbs = [entry.split(":")[0].rsplit(".", 1)[1] for entry in SUBCOMMANDS]
    (comment,) = [x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("brrm --help ")]
    assert comment.split("# ", 1)[1].split(", ") == verbs
    table = (REPO / "docs/cli.md").read_text()
    assert [v for v in verbs if f"| `brrm {v}` |" not in table] == []


def test_install_lines_use_one_form_and_say_which_torch(capsys):
    from tests.conftest import REPO

    code, out, _ = run(capsys, "audit", "--help")
    assert code == 0 and "Ray (pip install -e '.[ray]' in the brrm clone)" in out and "brrm[" not in out

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert [p.name for p in pages if "pip install 'brrm[" in p.read_text()] == []  # no such package is published
    readme = (REPO / "README.md").read_text()
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "a plain `pip install torch==2.13.0` from PyPI installs the CUDA build" in readme
    assert "pip install -q torch==2.13.0 && " in (REPO / ".ci/run").read_text()  # CI keeps its own line


def test_a_pair_file_scored_counts_its_records_and_their_responses(capsys, tmp_path):
    from brrm.testing import save_tiny_qwen3

    rm = save_tiny_qwen3(tmp_path / "rm", seed=1, sequence_classification=True)
    src = write_jsonl(tmp_path / "pairs.jsonl", pair_rows(2))
    code, out, _ = run(capsys, "score", "--input", src, "--output", tmp_path / "r.jsonl", "--model", rm, "--kind", "bt",
                       "--device", "cpu", "--no-progress")
    assert code == 0 and len((tmp_path / "r.jsonl").read_text().splitlines()) == 4
    assert f"brrm score: 2 records (4 responses: each pair record's two) from {src}" in out


def test_a_rank_bar_counts_groups_and_its_turns_the_pairs_the_cost_names(capsys, tmp_path, tiny_dir):
    src = write_jsonl(tmp_path / "groups.jsonl", [{"id": "g", "prompt": "2+2?", "responses": ["4", "5", "four"]}])
    code, out, err = run(capsys, "rank", "--input", src, "--output", tmp_path / "ranks.jsonl", "--model", tiny_dir,
                         *TINY, "--temperature", "0", "--strategy", "circular")
    assert code == 0
    assert "strategy circular: 3 two-turn judgments in total (e.g. 3 for a group of 3), of 3 pairs" in out
    assert "ranking (groups written)" in err and "| 1/1 " in err and "turns done: 3 of 3 pairs" in err


def test_a_note_while_a_bar_runs_gets_a_line_of_its_own(capsys, monkeypatch):
    import sys

    import brrm.constraints.compile as compile_module
    from brrm.cli.common import _note_first_compile, end_compile_note
    from brrm.progress import Progress

    listeners = []
    monkeypatch.setattr(compile_module, "on_compile", lambda f: listeners.append(f) or (lambda: None))
    _note_first_compile(sys.stderr)
    with Progress(2, desc="judging (pairs written)", unit="pair", disable=False) as bar:
        bar.done(1)
        listeners[0]()  # the first grammar compile, mid-run
    end_compile_note()
    err = capsys.readouterr().err
    note = "note: compiling the output grammar for this tokenizer once"
    (line,) = [x for x in err.split("\n") if note in x]
    assert line.split("\r")[-1].startswith(note)  # the bar's line was cleared first, and is drawn again below
    assert err.rindex("| 1/2 ") > err.index(note)


def test_the_interrupted_line_names_a_rerun_that_is_not_refused(tmp_path):
    import argparse

    from brrm.cli.records import interrupted

    out = tmp_path / "o.jsonl"
    args = argparse.Namespace(output=str(out), resume=False, overwrite=False)
    out.write_text("")
    assert interrupted(args).endswith("rerun the same command to start over")  # an empty file is written over
    out.write_text('{"id": "torn')
    assert interrupted(args).endswith("rerun the same command with --resume to start over")
    out.write_text('{"id": "a"}\n')
    assert "rerun the same command with --resume to continue" in interrupted(args)


def test_greedy_and_scalar_audits_are_not_marked_sampled():
    from brrm.audit.summary import sampled

    assert sampled({"options": {"sampling": {"temperature": 0.0}}}) == {"sampled": False, "temperature": 0.0}
    assert sampled({"kind": "bt", "options": {}}) == {"sampled": False, "temperature": None}  # decodes nothing
