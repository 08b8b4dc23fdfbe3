"""Audit runs on scripted judges: resume after crashes (N14, N15), no model call on rerun, configuration keys,
bad input that loses nothing at 10,000 records, and aggregation that keeps failures out of averages (C04, C27).
"""

from __future__ import annotations

import json
import math

import pytest

from brrm.audit import AuditOptions, AuditStore, plan_items, run_audit
from brrm.audit.store import STORE_FILE
from brrm.records import read_records
from tests.audit_support import (
    Crash,
    ScriptedBRRM,
    ScriptedPairJudge,
    fake_brrm,
    pair_rows,
    store_items,
    write_jsonl,
)

PAIRS = AuditOptions(shape="pairs", slice_by=("source",), progress=False)


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


def plan(tmp_path, rows, shape="pairs", **kw):
    path = write_jsonl(tmp_path / f"in-{len(rows)}.jsonl", rows)
    return plan_items(read_records(path, shape), shape, **kw)


def summary(directory):
    return json.loads((directory / "summary.json").read_text())


def test_rerun_makes_no_model_call_and_changed_options_are_new_keys(tmp_path, tok):
    items = plan(tmp_path, pair_rows(6), slice_by=["source"])
    script = ScriptedBRRM()
    judge = fake_brrm(tok, script)
    first = run_audit(items, tmp_path / "a", PAIRS, judge=judge)
    backend_calls = judge.model.backend.calls
    assert first.judged == 6 and sum(script.calls.values()) == 6 and backend_calls > 0
    again = run_audit(items, tmp_path / "a", PAIRS, judge=judge)
    assert again.judged == 0 and again.pending_at_start == 0
    assert judge.model.backend.calls == backend_calls and sum(script.calls.values()) == 6  # no model call at all
    reseeded = run_audit(items, tmp_path / "a", PAIRS, judge=fake_brrm(tok, script, seed=7))
    assert reseeded.judged == 6 and sum(script.calls.values()) == 12  # a new configuration is never a stale reuse
    rows = store_items(tmp_path / "a")
    assert len(rows) == 12 and len({c for _, c in rows}) == 2 and len({h for h, _ in rows}) == 6
    relabelled = [dict(r, label="B") for r in pair_rows(6)]
    changed = run_audit(plan(tmp_path, relabelled), tmp_path / "a", PAIRS, judge=judge)
    assert changed.judged == 4  # the rows whose label changed are new items; the others are reused
    assert summary(tmp_path / "a")["run"]["judged_this_run"] == 4


def test_crash_resume_cycles_judge_every_item_exactly_once(tmp_path, tok):
    """N14: crash after 12 items, crash right after resuming, crash after one new item, then finish."""
    items = plan(tmp_path, pair_rows(20), slice_by=["source"])
    script = ScriptedBRRM(lambda first, second: 1 if "It is" in first else 2)
    out = tmp_path / "audit"
    script.crash_after = 12
    with pytest.raises(Crash):
        run_audit(items, out, PAIRS, judge=fake_brrm(tok, script, chunk_size=4))
    after_first = store_items(out)
    assert len(after_first) == 12
    with pytest.raises(Crash):  # resume loaded prior state, then fails before any new item is scored
        run_audit(items, out, PAIRS, judge=fake_brrm(tok, script, chunk_size=4))
    assert store_items(out) == after_first
    script.crash_after = 13
    with pytest.raises(Crash):  # one new item gets committed, then the next call dies
        run_audit(items, out, PAIRS, judge=fake_brrm(tok, script, chunk_size=1))
    assert len(store_items(out)) == 13
    script.crash_after = None
    final = run_audit(items, out, PAIRS, judge=fake_brrm(tok, script, chunk_size=4))
    rows = store_items(out)
    assert final.judged == 7 and len(rows) == 20 and len({h for h, _ in rows}) == 20
    assert sorted(script.calls.values()) == [1] * 20  # every item's model call happened exactly once in 4 runs
    assert all(rows[k] == v for k, v in after_first.items())  # rows of run 1 never rewritten
    with AuditStore(out) as store:
        assert [r["state"] for r in store.runs()] == ["failed", "failed", "failed", "finished"]
        assert "Crash" in store.runs()[0]["message"]
    reference = tmp_path / "uninterrupted"
    run_audit(items, reference, PAIRS, judge=fake_brrm(tok, ScriptedBRRM(script.verdict), chunk_size=4))
    assert summary(out)["overall"] == summary(reference)["overall"]
    assert summary(out)["slices"] == summary(reference)["slices"]


def test_crash_between_batch_write_and_the_next_resumes_without_duplicates(tmp_path, tok, monkeypatch):
    """N15: 100 items in batches of 10; the writer dies right after the 3rd batch is committed; resume."""
    items = plan(tmp_path, pair_rows(100))
    opts = AuditOptions(shape="pairs", chunk_size=10, progress=False)
    judge = ScriptedPairJudge()
    real_put = AuditStore.put_results
    writes = []

    def put_then_crash(self, *args, **kwargs):
        out = real_put(self, *args, **kwargs)
        writes.append(out)
        if len(writes) == 3:
            raise Crash("writer died after its 3rd batch was committed")
        return out

    monkeypatch.setattr(AuditStore, "put_results", put_then_crash)
    with pytest.raises(Crash):
        run_audit(items, tmp_path / "audit", opts, judge=judge)
    monkeypatch.setattr(AuditStore, "put_results", real_put)
    assert len(store_items(tmp_path / "audit")) == 30
    run_audit(items, tmp_path / "audit", opts, judge=judge)
    rows = [json.loads(line) for line in (tmp_path / "audit" / "results.jsonl").read_text().splitlines()]
    ids = [r["id"] for r in rows]
    assert len(rows) == 100 and len(set(ids)) == 100 and len(store_items(tmp_path / "audit")) == 100
    assert max(judge.calls.values()) == 1 and len(judge.calls) == 100  # no item judged twice
    run_audit(items, tmp_path / "reference", opts, judge=ScriptedPairJudge())
    ref = [json.loads(line) for line in (tmp_path / "reference" / "results.jsonl").read_text().splitlines()]
    assert [r["result"] for r in rows] == [r["result"] for r in ref]


def test_ten_thousand_records_with_bad_lines_lose_nothing(tmp_path):
    rows = pair_rows(10_000)
    bad = {17: "{not json", 4321: json.dumps({"id": "no-b", "prompt": "hi", "response_a": "a"}),
           9998: json.dumps({"id": "bad-role", "conversation": [{"role": "bot", "content": "x"}],
                             "response_a": "a", "response_b": "b"})}
    lines = [bad.get(k, r) for k, r in enumerate(rows)]
    items = plan(tmp_path, lines, slice_by=["source"])
    judge = ScriptedPairJudge()
    out = run_audit(items, tmp_path / "audit", PAIRS, judge=judge)
    assert out.total == 10_000 and out.judged == 9_997
    good_ids = {r["id"] for k, r in enumerate(rows) if k not in bad}
    assert set(judge.calls) == good_ids and max(judge.calls.values()) == 1
    s = summary(tmp_path / "audit")
    assert s["overall"]["by_status"] == {"invalid_input": 3, "ok": 9_997}
    assert s["flagged"]["counts"]["invalid_input"] == 3
    invalid = [json.loads(line) for line in (tmp_path / "audit" / "results.jsonl").read_text().splitlines()
               if '"invalid_input"' in line]
    assert [(r["line"], r["status"]) for r in invalid] == [(18, "invalid_input"), (4322, "invalid_input"),
                                                           (9999, "invalid_input")]
    assert "line 18: not valid JSON" in invalid[0]["reason"] and "response_b" in invalid[1]["reason"]
    assert "'bot'" in invalid[2]["reason"]
    report = (tmp_path / "audit" / "report.html").read_text()
    assert report.count('<tr><td>4322</td><td>no-b</td>') == 1 and "line 18: not valid JSON" in report


def test_backend_error_is_counted_apart_and_never_averaged(tmp_path, tok):
    """C04: one of three rewards fails with a backend error; the mean is over the two scored; a rerun retries
    only the failed item."""
    import brrm
    from brrm.backends.fake import FakeBackend

    rows = [{"id": "quick", "prompt": "Give one synonym for 'quick'.", "response": "Fast."},
            {"id": "happy", "prompt": "Give one synonym for 'happy'.", "response": "Glad."},
            {"id": "big", "prompt": "Give one synonym for 'big'.", "response": "Small."}]
    answers = {"Fast.": 8.0, "Glad.": RuntimeError("HTTP 503 after retries"), "Small.": 2.0}
    seen = []

    def score(prompt):
        response = next(r for r in answers if r in prompt)
        seen.append(response)
        return answers[response]

    judge = brrm.load(kind="bt", backend=FakeBackend(tok, score_script=score))
    items = plan(tmp_path, rows, "single", principle_kind=False)
    run_audit(items, tmp_path / "audit", AuditOptions(shape="single", progress=False), judge=judge)
    s = summary(tmp_path / "audit")["overall"]
    assert s["by_status"] == {"backend_error": 1, "ok": 2} and s["scored"] == 2
    assert s["reward"]["mean"] == 5.0 and s["reward"]["min"] == 2.0
    assert s["rates"]["backend_error"] == pytest.approx(1 / 3)
    exported = [json.loads(line) for line in (tmp_path / "audit" / "results.jsonl").read_text().splitlines()]
    assert exported[1]["result"]["reward"] is None and "HTTP 503" in exported[1]["reason"]
    assert exported[1]["flags"] == ["backend_error"]
    seen.clear()
    answers["Glad."] = 7.0  # the server is back
    again = run_audit(items, tmp_path / "audit", AuditOptions(shape="single", progress=False), judge=judge)
    assert again.judged == 1 and seen == ["Glad."]
    assert summary(tmp_path / "audit")["overall"]["reward"]["mean"] == pytest.approx(17 / 3)


def test_slice_win_rates_count_ties_as_half_with_raw_counts(tmp_path, tok):
    """C27: model_x wins 4 / loses 6, model_y wins 4 / ties 6: adjusted win rates 0.40 and 0.70, y ranked first."""
    import brrm
    from brrm.backends.fake import FakeBackend

    rows = []
    for model, outcomes in (("model_x", "W" * 4 + "L" * 6), ("model_y", "W" * 4 + "T" * 6)):
        for k, o in enumerate(outcomes):
            rows.append({"id": f"{model}-{k}", "prompt": f"Question {model} {k}?", "model": model,
                         "response_a": f"{o}-answer {model} {k}", "response_b": f"reference {model} {k}"})
    scores = {"W": 2.0, "L": -2.0, "T": 0.0}

    def score(prompt):
        return next((value for o, value in scores.items() if f"{o}-answer" in prompt), 0.0)

    judge = brrm.load(kind="bt", backend=FakeBackend(tok, score_script=score), margin=0.5)
    items = plan(tmp_path, rows, slice_by=["model"])
    run_audit(items, tmp_path / "audit", AuditOptions(shape="pairs", slice_by=("model",), progress=False),
              judge=judge)
    sl = summary(tmp_path / "audit")["slices"]["model"]
    x, y = sl["values"]["model_x"]["win_rate_a"], sl["values"]["model_y"]["win_rate_a"]
    assert (x["A"], x["tie"], x["B"], x["rate"]) == (4, 0, 6, 0.4)
    assert (y["A"], y["tie"], y["B"], y["rate"]) == (4, 6, 0, 0.7)
    assert sl["ranked_by_win_rate_a"] == ["model_y", "model_x"]
    assert sl["values"]["model_x"]["position"]["applies"] is False  # a scalar model has no position bias


def test_groups_audit_ranks_and_flags_failed_judgments(tmp_path, tok):
    rows = [{"id": f"g{k}", "prompt": f"Pick the best answer to {k}.", "responses": [f"good {k}", f"bad {k}",
                                                                                     f"odd {k}"],
             "lang": "en" if k % 2 else "fr"} for k in range(3)]

    def verdict(first, second):
        if "odd 2" in (first, second):
            return "no verdict here"
        return 1 if first.startswith("good") or second.startswith("bad") else 2

    script = ScriptedBRRM(verdict)
    items = plan(tmp_path, rows, "groups", slice_by=["lang"], strategy="round_robin")
    opts = AuditOptions(shape="groups", strategy="round_robin", slice_by=("lang",), progress=False)
    run_audit(items, tmp_path / "audit", opts, judge=fake_brrm(tok, script))
    s = summary(tmp_path / "audit")
    assert s["overall"]["judgments"]["total"] == 18 and s["overall"]["judgments"]["by_status"]["parse_failure"] == 4
    assert s["overall"]["best_position"] == {"0": 3}
    assert s["flagged"]["counts"]["parse_failure"] == 1 and s["flagged"]["items"][0]["id"] == "g2"
    assert set(s["slices"]["lang"]["values"]) == {"en", "fr"}
    assert math.isclose(s["overall"]["dimensions"]["frequencies"]["Information Accuracy"], 1.0)
    assert (tmp_path / "audit" / STORE_FILE).is_file() and (tmp_path / "audit" / "results.parquet").is_file()
