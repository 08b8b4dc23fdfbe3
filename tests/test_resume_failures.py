"""Issue 28 §6: transient failures are retried on resume; parse failures and truncations only when the retry can
differ (sampled decoding, under a new seed) or when asked (``--retry-failed``); in-run retries never repeat an
identical greedy request.

A scripted backend (brrm/backends/fake.py) stands in for the model: no real model fails on demand. Responses
holding ``FLAKY`` make turn 2 fail (a backend error) while the flag says the server is down; responses holding
``GARBLE`` never get a verdict (a parse failure).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import brrm.cli.common as common
from brrm.audit import AuditOptions, plan_items, run_audit
from brrm.cli import main
from brrm.records import read_records
from brrm.seeds import retry_id
from brrm.types import Status
from brrm.types.retry import TRANSIENT, is_transient, retry_statuses
from tests.audit_support import T1, fake_brrm, is_turn2, ranking, responses_in, store_items, write_jsonl

pytestmark = pytest.mark.timeout(600)


class Flaky:
    """Turn 1 writes T1; turn 2 fails for FLAKY while ``down``, never parses for GARBLE, else prefers the longer.
    Records every turn-1 call's first response and seed."""

    def __init__(self) -> None:
        self.down = True
        self.calls: Counter[str] = Counter()
        self.seeds: dict[str, list[int | None]] = {}

    def __call__(self, prompt: str, request: Any) -> Any:
        first, second = responses_in(prompt)
        both = first + second
        if not is_turn2(prompt):
            self.calls[both] += 1
            self.seeds.setdefault(both, []).append(request.seed)
            return T1
        if "FLAKY" in both and self.down:
            return RuntimeError("HTTP 503: the server is restarting")
        if "GARBLE" in both:
            return "I cannot decide."
        return ranking(1 if len(first) >= len(second) else 2)

    def judged(self, marker: str) -> int:
        return sum(n for text, n in self.calls.items() if marker in text)


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


ROWS = [{"id": "ok", "prompt": "Q1?", "response_a": "a fine long answer", "response_b": "short"},
        {"id": "flaky", "prompt": "Q2?", "response_a": "FLAKY answer", "response_b": "x"},
        {"id": "garble", "prompt": "Q3?", "response_a": "GARBLE answer", "response_b": "y"},
        {"id": "ok2", "prompt": "Q4?", "response_a": "s", "response_b": "another longer answer"}]


def test_the_policy_transient_always_final_only_when_it_can_differ():
    assert is_transient("backend_error") and is_transient("timeout") and not is_transient("parse_failure")
    assert retry_statuses(sampled=False, retry_failed=False) == TRANSIENT
    assert {"parse_failure", "truncated"} <= retry_statuses(sampled=True, retry_failed=False)
    assert {"parse_failure", "truncated"} <= retry_statuses(sampled=False, retry_failed=True)
    assert "invalid_input" not in retry_statuses(sampled=True, retry_failed=True)


# ------------------------------------------------------------------------------------------------ audit
def _audit(tmp_path: Path, judge: Any, **options: Any) -> dict[str, str]:
    items = plan_items(read_records(write_jsonl(tmp_path / "in.jsonl", ROWS), "pairs"), "pairs")
    run_audit(items, tmp_path / "audit", AuditOptions(shape="pairs", progress=False, **options), judge=judge)
    return {v["result"]["id"]: v["status"] for v in store_items(tmp_path / "audit").values()}


def test_an_audit_resume_retries_transient_failures_only(tmp_path, tok, capsys):
    script = Flaky()
    judge = fake_brrm(tok, script, temperature=0)
    assert _audit(tmp_path, judge) == {"ok": "ok", "flaky": "backend_error", "garble": "parse_failure", "ok2": "ok"}
    script.down = False
    capsys.readouterr()
    assert _audit(tmp_path, judge) == {"ok": "ok", "flaky": "ok", "garble": "parse_failure", "ok2": "ok"}
    assert script.judged("FLAKY") == 2 and script.judged("GARBLE") == 1 and script.judged("fine") == 1
    err = capsys.readouterr().err
    assert "1 to judge" in err and "1 items kept their parse_failure/truncated result" in err
    assert "--retry-failed" in err
    _audit(tmp_path, judge)
    assert script.judged("GARBLE") == 1  # greedy: never asked again without the flag
    assert _audit(tmp_path, judge, retry_failed=True)["garble"] == "parse_failure"
    assert script.judged("GARBLE") == 2 and script.judged("fine") == 1


def test_a_sampled_audit_retries_a_parse_failure_under_a_new_seed(tmp_path, tok):
    script = Flaky()
    script.down = False
    judge = fake_brrm(tok, script, temperature=1.0)
    _audit(tmp_path, judge)
    _audit(tmp_path, judge)
    seeds = next(v for k, v in script.seeds.items() if "GARBLE" in k)
    assert len(seeds) == 2 and seeds[0] != seeds[1] and None not in seeds
    assert script.judged("fine") == 1  # an ok result is never judged again
    stored = next(v for v in store_items(tmp_path / "audit").values() if v["result"]["id"] == "garble")
    assert stored["result"]["provenance"]["seed"] == seeds[1]  # the record's own id, the retry's seed


# ------------------------------------------------------------------------------------------- brrm judge
def _judge(tmp_path: Path, capsys: Any, *flags: str) -> tuple[list[str], str]:
    data = write_jsonl(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "out.jsonl"
    code = main(["judge", "--input", str(data), "--output", str(out), "--no-progress", "-q", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return out.read_text().splitlines(keepends=True), captured.out


def _use(monkeypatch: Any, judge: Any) -> None:
    monkeypatch.setattr(common, "load_judge", lambda args, **kw: judge)


def test_judge_resume_retries_a_backend_error_in_place_and_keeps_a_greedy_parse_failure(tmp_path, tok, capsys,
                                                                                        monkeypatch):
    script = Flaky()
    _use(monkeypatch, fake_brrm(tok, script, temperature=0))
    first, _ = _judge(tmp_path, capsys)
    assert [json.loads(x)["status"] for x in first] == ["ok", "backend_error", "parse_failure", "ok"]
    script.down = False
    again, out = _judge(tmp_path, capsys, "--resume")
    assert [json.loads(x)["status"] for x in again] == ["ok", "ok", "parse_failure", "ok"]
    assert again[0] == first[0] and again[2] == first[2] and again[3] == first[3]  # kept lines byte for byte
    assert json.loads(again[1])["id"] == "flaky" and json.loads(again[1])["line"] == 2
    assert "1 kept lines failed" in out and "1 kept lines kept their parse_failure" in out
    assert script.judged("FLAKY") == 2 and script.judged("GARBLE") == 1 and script.judged("fine") == 1
    assert not (tmp_path / "out.jsonl.resume-tmp").exists()
    retried, _ = _judge(tmp_path, capsys, "--resume", "--retry-failed")
    assert script.judged("GARBLE") == 2 and retried[:2] == again[:2] and len(retried) == 4


def test_judge_resume_under_sampling_gives_a_parse_failure_a_new_seed(tmp_path, tok, capsys, monkeypatch):
    script = Flaky()
    script.down = False
    _use(monkeypatch, fake_brrm(tok, script, temperature=1.0))
    first, _ = _judge(tmp_path, capsys)
    again, out = _judge(tmp_path, capsys, "--resume")
    assert "under new seeds" in out
    seeds = next(v for k, v in script.seeds.items() if "GARBLE" in k)
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    row = json.loads(again[2])
    assert row["id"] == "garble" and row["provenance"]["seed"] == seeds[1]
    assert again[0] == first[0] and script.judged("fine") == 1
    assert retry_id("garble", seeds[0]) == f"garble#retry:{seeds[0]}"


def test_an_interrupted_rewrite_keeps_every_line_in_input_order(tmp_path, tok, capsys, monkeypatch):
    script = Flaky()
    _use(monkeypatch, fake_brrm(tok, script, temperature=0))
    first, _ = _judge(tmp_path, capsys)
    script.down = False

    def interrupt(prompt: str, request: Any) -> Any:
        raise KeyboardInterrupt

    _use(monkeypatch, fake_brrm(tok, interrupt, temperature=0))
    data = tmp_path / "in.jsonl"
    code = main(["judge", "--input", str(data), "--output", str(tmp_path / "out.jsonl"), "--no-progress", "-q",
                 "--resume"])
    assert code == 130
    assert (tmp_path / "out.jsonl").read_text().splitlines(keepends=True) == first


# ------------------------------------------------------------------------------------------- brrm bench
def _rb2(k: int, marker: str) -> dict:
    return {"id": str(k), "prompt": f"Question {k}?", "chosen": [f"{marker} the right answer {k}"],
            "rejected": [f"wrong {k}", f"also wrong {k}", f"no {k}"], "num_correct": 1, "num_incorrect": 3,
            "total_completions": 4, "models": ["a", "b", "c", "d"], "subset": "Factuality",
            "additional_metadata": {}}


def _bench(tmp_path: Path, capsys: Any, *flags: str) -> tuple[list[dict], str]:
    data = write_jsonl(tmp_path / "rb2.jsonl", [_rb2(0, "plain"), _rb2(1, "FLAKY"), _rb2(2, "GARBLE")])
    code = main(["bench", "rewardbench2", "--data", str(data), "--output", str(tmp_path / "run"), "--no-progress",
                 *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [json.loads(x) for x in (tmp_path / "run" / "judgments.jsonl").read_text().splitlines()], captured.out


def _statuses(line: dict) -> set[str]:
    return {r["status"] for r in line["rewards"]}


def test_bench_resume_retries_transient_failures_and_retry_failed_the_rest(tmp_path, tok, capsys, monkeypatch):
    script = Flaky()
    _use(monkeypatch, fake_brrm(tok, script, temperature=0))
    first, _ = _bench(tmp_path, capsys)
    assert [ln["id"] for ln in first] == ["0", "1", "2"]
    assert _statuses(first[0]) == {"ok"} and "backend_error" in _statuses(first[1])
    assert "parse_failure" in _statuses(first[2])
    calls = dict(script.calls)
    script.down = False
    again, out = _bench(tmp_path, capsys)
    assert "(1 failed items judged again)" in out and "1 items kept their parse_failure" in out
    assert sorted(ln["id"] for ln in again) == ["0", "1", "2"] and len(again) == 3
    by_id = {ln["id"]: ln for ln in again}
    assert _statuses(by_id["1"]) == {"ok"} and by_id["0"] == first[0] and by_id["2"] == first[2]
    assert script.judged("GARBLE") == sum(n for t, n in calls.items() if "GARBLE" in t)  # no new call
    assert script.judged("plain") == sum(n for t, n in calls.items() if "plain" in t)
    _, out = _bench(tmp_path, capsys, "--retry-failed")
    assert "(1 failed items judged again)" in out
    assert script.judged("GARBLE") > sum(n for t, n in calls.items() if "GARBLE" in t)


# ------------------------------------------------------------------------------------------ in-run retries
def test_in_run_retries_never_repeat_an_identical_greedy_request(tok):
    script = Flaky()
    greedy = fake_brrm(tok, script, temperature=0, max_retries=2)
    garble, flaky = greedy.judge_pairs(["Q?", "R?"], ["GARBLE a", "FLAKY b"], ["b", "c"])
    assert garble.status is Status.PARSE_FAILURE and garble.attempts == 1 and script.judged("GARBLE") == 1
    assert flaky.status is Status.BACKEND_ERROR and flaky.attempts == 3 and script.judged("FLAKY") == 3
    sampled = fake_brrm(tok, script, temperature=1.0, max_retries=2)
    (again,) = sampled.judge_pairs(["S?"], ["GARBLE c"], ["d"])
    assert again.attempts == 3
    seeds = next(v for k, v in script.seeds.items() if "GARBLE c" in k)
    assert len(set(seeds)) == 3  # each sampled retry draws fresh streams


def test_rank_resume_ranks_a_failed_group_again_in_place(tmp_path, tok, capsys, monkeypatch):
    script = Flaky()
    _use(monkeypatch, fake_brrm(tok, script, temperature=0))
    groups = [{"id": "g1", "prompt": "Q1?", "responses": ["a long answer", "b", "cc"]},
              {"id": "g2", "prompt": "Q2?", "responses": ["FLAKY one", "two", "three!"]},
              {"id": "g3", "prompt": "Q3?", "responses": ["x", "yy", "zzz"]}]
    data = write_jsonl(tmp_path / "groups.jsonl", groups)
    out = tmp_path / "ranked.jsonl"
    argv = ["rank", "-i", str(data), "-o", str(out), "--strategy", "knockout", "--no-progress"]
    assert main(argv) == 0
    first = out.read_text().splitlines(keepends=True)
    members = [{r["status"] for r in json.loads(x)["rewards"]} for x in first]
    assert members == [{"ok"}, {"ok", "backend_error"}, {"ok"}]  # the group ranks; two members failed
    before = script.judged("a long")
    script.down = False
    assert main([*argv, "--resume"]) == 0
    again = out.read_text().splitlines(keepends=True)
    assert "1 kept lines failed: ranked again in place" in capsys.readouterr().out
    assert [{r["status"] for r in json.loads(x)["rewards"]} for x in again] == [{"ok"}] * 3
    assert again[0::2] == first[0::2]
    assert script.judged("a long") == before  # the ok groups are not ranked again


def test_an_audit_resume_ranks_a_group_with_a_failed_member_again(tmp_path, tok):
    script = Flaky()
    judge = fake_brrm(tok, script, temperature=0)
    groups = [{"id": "g1", "prompt": "Q1?", "responses": ["a long answer", "b", "cc"]},
              {"id": "g2", "prompt": "Q2?", "responses": ["FLAKY one", "two", "three!"]}]
    items = plan_items(read_records(write_jsonl(tmp_path / "g.jsonl", groups), "groups"), "groups",
                       strategy="knockout")
    options = AuditOptions(shape="groups", strategy="knockout", progress=False)

    def members() -> list[set[str]]:
        rows = sorted(store_items(tmp_path / "audit").values(), key=lambda v: v["result"]["rewards"][0]["id"])
        return [{r["status"] for r in v["result"]["rewards"]} for v in rows]

    run_audit(items, tmp_path / "audit", options, judge=judge)
    before = script.judged("a long")
    assert sorted(map(sorted, members())) == [["backend_error", "ok"], ["ok"]]
    script.down = False
    again = run_audit(items, tmp_path / "audit", options, judge=judge)
    assert again.pending_at_start == 1 and again.judged == 1
    assert members() == [{"ok"}, {"ok"}] and script.judged("a long") == before


def test_score_resume_scores_a_backend_error_again_in_place(tmp_path, tok, capsys, monkeypatch):
    import brrm
    from brrm.backends.fake import FakeBackend

    answers: dict[str, Any] = {"Fast.": 8.0, "Glad.": RuntimeError("HTTP 503 after retries"), "Small.": 2.0}
    seen: list[str] = []

    def score(prompt: str) -> Any:
        response = next(r for r in answers if r in prompt)
        seen.append(response)
        return answers[response]

    _use(monkeypatch, brrm.load(kind="bt", backend=FakeBackend(tok, score_script=score)))
    rows = [{"id": "s", "prompt": "Synonym for quick?", "response": "Fast."},
            {"id": "s", "prompt": "Synonym for happy?", "response": "Glad."},
            {"id": "s", "prompt": "Synonym for big?", "response": "Small."}]
    data = write_jsonl(tmp_path / "single.jsonl", rows)
    out = tmp_path / "scores.jsonl"
    argv = ["score", "-i", str(data), "-o", str(out), "--kind", "bt", "--no-progress"]
    assert main(argv) == 0
    first = out.read_text().splitlines(keepends=True)
    assert [json.loads(x)["status"] for x in first] == ["ok", "backend_error", "ok"]
    answers["Glad."] = 7.0
    seen.clear()
    assert main([*argv, "--resume"]) == 0
    again = out.read_text().splitlines(keepends=True)
    assert seen == ["Glad."] and [json.loads(x)["reward"] for x in again] == [8.0, 7.0, 2.0]
    assert again[0] == first[0] and again[2] == first[2] and [json.loads(x)["id"] for x in again] == ["s"] * 3


def test_a_bench_retry_under_its_retry_id_draws_new_streams_and_keeps_the_item_id(tok):
    """The benchmark runner keys a resumed sampled retry's streams by :func:`brrm.seeds.retry_id` (what
    ``brrm bench`` passes for a failed item of a pairwise benchmark); the result keeps the item's own ids."""
    from brrm.bench.core import BenchItem, Pair, item_keys
    from brrm.bench.runner import run
    from brrm.types import Verdict

    script = Flaky()
    judge = fake_brrm(tok, script, temperature=1.0)
    item = BenchItem("9", "s", "Q?", ("GARBLE a", "b"), (Pair(0, 1, Verdict.A),))
    (first,), _ = run(judge, [item], orders="given")
    (again,), _ = run(judge, [item], orders="given", seed_ids={item_keys([item])[0]: retry_id("9", 123)})
    seeds = next(v for k, v in script.seeds.items() if "GARBLE" in k)
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    assert first.shown[0].judgment.id == again.shown[0].judgment.id == "9#0AB"
    assert again.key == first.key == item_keys([item])[0]
