"""Issue 28 §5: results are keyed by position and content, never by the user's ids.

A RewardBench 2 file whose ids repeat (30, 31, 30, 31) goes through ``brrm bench`` and its resume: every item
gets exactly the result it gets when judged alone (a tiny real Bradley–Terry head, and a scripted BR-RM judge
ranking by knockout). Duplicate ids in audit and judge inputs are kept apart as documented; a repeated Ties id
is refused before any model call, naming both rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import brrm.cli.common as common
from brrm.audit import AuditOptions, plan_items, run_audit
from brrm.bench.core import BenchItem, Pair, item_keys
from brrm.cli import main
from brrm.records import read_records
from brrm.types import Verdict
from tests.audit_support import ScriptedBRRM, fake_brrm, store_items, write_jsonl

pytestmark = pytest.mark.timeout(600)


def rb2_row(rid: str, k: int, subset: str = "Factuality") -> dict:
    """An RB2 row whose completions differ with ``k`` (a row judged with another row's results shows)."""
    chosen = [f"Paris is the capital, answer {k}." + " Indeed." * k]
    rejected = [f"Lyon {k}.", f"Marseille, {k} times over.", "Berlin." * (k + 1)]
    return {"id": rid, "prompt": f"Question {k}: what is the capital of France?" + " Please." * k, "chosen": chosen,
            "rejected": rejected, "num_correct": 1, "num_incorrect": 3, "total_completions": 4,
            "models": ["a", "b", "c", "d"], "subset": subset, "additional_metadata": {}}


REPEATING = [rb2_row("30", 0), rb2_row("31", 1), rb2_row("30", 2), rb2_row("31", 3)]


def _bench(capsys, data: Path, out: Path, *flags: str) -> tuple[list[dict], str]:
    code = main(["bench", "rewardbench2", "--data", str(data), "--output", str(out), "--no-progress", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    return lines, captured.out


def _rewards(line: dict) -> list:
    return [(r["status"], r["reward"]) for r in line["rewards"]]


def _alone(capsys, tmp_path: Path, flags: tuple[str, ...]) -> list[list]:
    """Each row judged alone, in a file of its own."""
    out = []
    for k, row in enumerate(REPEATING):
        data = write_jsonl(tmp_path / f"alone{k}.jsonl", [row])
        lines, _ = _bench(capsys, data, tmp_path / f"alone{k}", *flags)
        out.append(_rewards(lines[0]))
    return out


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> str:
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("rm") / "rm", sequence_classification=True))


def test_repeating_rb2_ids_never_swap_results_in_a_run_or_its_resume(tiny_rm, tmp_path, capsys):
    flags = ("--model", tiny_rm)
    alone = _alone(capsys, tmp_path, flags)
    assert len({json.dumps(a) for a in alone}) == 4  # the four rows really score differently
    data = write_jsonl(tmp_path / "rb2.jsonl", REPEATING)
    lines, _ = _bench(capsys, data, tmp_path / "one", *flags)
    assert [ln["id"] for ln in lines] == ["30", "31", "30", "31"]
    assert [_rewards(ln) for ln in lines] == alone
    assert len({ln["key"] for ln in lines}) == 4
    # interrupted after two items (a run of --limit 2), then resumed over all four
    first, _ = _bench(capsys, data, tmp_path / "two", *flags, "--limit", "2")
    assert [_rewards(ln) for ln in first] == alone[:2]
    resumed, out = _bench(capsys, data, tmp_path / "two", *flags)
    assert "resuming: 2 items already judged" in out and "8 rewards to run" in out
    assert [_rewards(ln) for ln in resumed] == alone  # items 2 and 3 are judged, not given items 0 and 1's


def _prefers_longer(first: str, second: str) -> int:
    return 1 if len(first) >= len(second) else 2


def test_a_pairwise_judge_ranks_repeating_ids_apart(tmp_path, capsys, monkeypatch):
    """BR-RM knockout over the same file: each item's per-completion rewards equal its own alone."""
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    monkeypatch.setattr(common, "load_judge",
                        lambda args, **kw: fake_brrm(tok, ScriptedBRRM(_prefers_longer), temperature=0))
    alone = _alone(capsys, tmp_path, ())
    assert len({json.dumps(a) for a in alone}) > 1
    data = write_jsonl(tmp_path / "rb2.jsonl", REPEATING)
    lines, _ = _bench(capsys, data, tmp_path / "run", "--limit", "3")
    resumed, _ = _bench(capsys, data, tmp_path / "run")
    assert [_rewards(ln) for ln in lines] == alone[:3]
    assert [_rewards(ln) for ln in resumed] == alone


def test_the_pairwise_benchmark_runner_files_repeating_ids_by_position(tmp_path):
    from brrm.bench.runner import run
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    texts = [(f"a much longer answer {k}", f"short {k}") for k in range(4)]
    items = [BenchItem("7", "s", f"Question {k}?", t if k % 2 == 0 else t[::-1], (Pair(0, 1, Verdict.A),))
             for k, t in enumerate(texts)]
    judge = fake_brrm(tok, ScriptedBRRM(_prefers_longer), temperature=0)
    together, _ = run(judge, items, orders="both")
    for it, got in zip(items, together, strict=True):
        (alone,), _ = run(judge, [it], orders="both")
        assert got.item == it and [s.judgment.winner for s in got.shown] == [s.judgment.winner for s in alone.shown]
    assert [r.verdict(0) for r in together] == [Verdict.A, Verdict.B, Verdict.A, Verdict.B]
    twins = [items[0], items[0]]
    assert item_keys(twins)[0] != item_keys(twins)[1]  # equal content and id: still two results


def test_a_repeated_ties_id_is_one_error_naming_both_rows(tmp_path, capsys):
    rows = [rb2_row("ref:1", 0, "Ties"), rb2_row("tied:1", 1, "Ties"), rb2_row("ref:1", 2, "Ties")]
    data = write_jsonl(tmp_path / "ties.jsonl", rows)
    code = main(["bench", "rewardbench2", "--data", str(data), "--model", "/nonexistent-model", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "rows 1 and 3: Ties id 'ref:1' appears twice" in err and err.count("\n") == 1


def test_an_old_judgments_file_without_keys_is_refused_on_resume(tiny_rm, tmp_path, capsys):
    data = write_jsonl(tmp_path / "rb2.jsonl", REPEATING[:2])
    lines, _ = _bench(capsys, data, tmp_path / "run", "--model", tiny_rm, "--limit", "1")
    path = tmp_path / "run" / "judgments.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in ln.items() if k != "key"}) + "\n" for ln in lines))
    code = main(["bench", "rewardbench2", "--data", str(data), "--output", str(tmp_path / "run"), "--model", tiny_rm,
                 "--no-progress"])
    assert code == 2 and "filed items by id (repeated ids could swap results)" in capsys.readouterr().err


def test_duplicate_ids_in_an_audit_are_kept_apart_by_content(tmp_path):
    """Audit: two rows with one id and other texts are two items with their own results; two identical rows share
    one stored result (the same input to the same judge), each row shown."""
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    rows = [{"id": "x", "prompt": "Q?", "response_a": "a long answer here", "response_b": "no"},
            {"id": "x", "prompt": "Q?", "response_a": "no", "response_b": "a long answer here"},
            {"id": "x", "prompt": "Q?", "response_a": "a long answer here", "response_b": "no"}]
    items = plan_items(read_records(write_jsonl(tmp_path / "in.jsonl", rows), "pairs"), "pairs")
    script = ScriptedBRRM(_prefers_longer)
    run_audit(items, tmp_path / "audit", AuditOptions(shape="pairs", progress=False),
              judge=fake_brrm(tok, script, temperature=0))
    stored = store_items(tmp_path / "audit")
    assert len(stored) == 2 and sum(script.calls.values()) == 2
    exported = [json.loads(line) for line in (tmp_path / "audit" / "results.jsonl").read_text().splitlines()]
    assert [e["result"]["winner"] for e in exported] == ["A", "B", "A"]
    assert [e["result"]["id"] for e in exported] == ["x", "x", "x"]


def test_duplicate_ids_in_brrm_judge_each_get_their_own_line(tmp_path, capsys, monkeypatch):
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    monkeypatch.setattr(common, "load_judge",
                        lambda args, **kw: fake_brrm(tok, ScriptedBRRM(_prefers_longer), temperature=0))
    rows = [{"id": "x", "prompt": "Q?", "response_a": "a long answer here", "response_b": "no"},
            {"id": "x", "prompt": "Q?", "response_a": "no", "response_b": "a long answer here"}]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(data), "--output", str(out), "--no-progress", "-q"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(ln["id"], ln["line"], ln["winner"]) for ln in lines] == [("x", 1, "A"), ("x", 2, "B")]
