"""service.run: typed jobs dispatched to a real tiny judge's batch methods — the same results as calling them
directly, chunks of the judge's batch size, every result streamed exactly once, and clear errors for mixed jobs."""

from __future__ import annotations

import pytest

import brrm
from brrm.service.items import GroupItem, PairItem, PairsCall, RankCall, ScoreCall, ScoreItem, failed_result
from brrm.service.run import make_runner, run

PROMPTS = ["What is 2+2?", "Name a colour.", "Say hi.", "2*3?", "Capital of France?"]
A = ["4", "Red.", "Hi!", "6", "Paris."]
B = ["5", "Blue is a colour.", "Hello there.", "six", "Lyon, I think."]


@pytest.fixture(scope="module")
def bt(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    path = save_tiny_qwen3(tmp_path_factory.mktemp("run") / "rm", sequence_classification=True)
    with brrm.load(str(path)) as judge:
        yield judge


def _counting(judge, monkeypatch, name):
    sizes: list[int] = []
    original = getattr(judge, name)
    monkeypatch.setattr(judge, name, lambda *a, **k: sizes.append(len(a[0])) or original(*a, **k))
    return sizes


def test_scores_equal_the_direct_call_in_chunks_streaming_each_result_once(bt, monkeypatch):
    want = bt.score(PROMPTS, A, ids=[f"i{k}" for k in range(5)])
    sizes = _counting(bt, monkeypatch, "score")
    seen, ticks = [], []
    got = run(bt, [ScoreItem(p, r, id=f"i{k}") for k, (p, r) in enumerate(zip(PROMPTS, A, strict=True))],
              chunk_size=2, progress=ticks.append, on_result=lambda i, r: seen.append((i, r.id)))
    assert sizes == [2, 2, 1]  # calls of at most chunk_size items
    assert [r.reward for r in got] == pytest.approx([r.reward for r in want], abs=1e-6)
    assert [r.id for r in got] == [f"i{k}" for k in range(5)]
    assert sorted(seen) == [(k, f"i{k}") for k in range(5)] and len(seen) == 5  # once each, global indices
    assert sum(ticks) == pytest.approx(5.0)  # each chunk's progress adds up to its items


def test_pairs_and_groups_go_to_judge_pairs_and_rank_groups(bt, monkeypatch):
    want = bt.judge_pairs(PROMPTS, A, B, swap=False)
    got = run(bt, [PairItem(p, a, b) for p, a, b in zip(PROMPTS, A, B, strict=True)], call=PairsCall(swap=False))
    assert [(g.winner, g.p_a) for g in got] == [(w.winner, pytest.approx(w.p_a, abs=1e-6)) for w in want]
    groups = [GroupItem(p, (a, b, "maybe")) for p, a, b in zip(PROMPTS, A, B, strict=True)]
    sizes = _counting(bt, monkeypatch, "rank_groups")
    ranked = run(bt, groups, call=RankCall("scores"), chunk_size=bt.cost("group", 3, strategy="scores") * 2)
    assert sizes == [2, 2, 1]  # groups worth about chunk_size model calls each
    direct = bt.rank_groups(PROMPTS, [list(g.responses) for g in groups], strategy="scores")
    assert [r.ranking for r in ranked] == [d.ranking for d in direct]


def test_a_judge_that_reports_nothing_early_gets_every_result_reported_at_return(bt):
    seen: list[int] = []
    groups = [GroupItem(p, (a, b)) for p, a, b in zip(PROMPTS[:2], A[:2], B[:2], strict=True)]
    run(bt, groups, on_result=lambda i, r: seen.append(i))
    assert seen == [0, 1]
    only_early: list[int] = []
    run(bt, groups, on_result=lambda i, r: only_early.append(i), returned=False)
    assert only_early == []  # rank_groups reports nothing early; the caller takes the returned list


def test_mixed_or_mismatched_jobs_and_bad_chunk_sizes_are_clear_errors(bt):
    with pytest.raises(brrm.ConfigError, match="PairItem, ScoreItem or GroupItem"):
        run(bt, [ScoreItem("q", "a"), PairItem("q", "a", "b")])
    with pytest.raises(brrm.ConfigError, match="matching call"):
        run(bt, [ScoreItem("q", "a")], call=PairsCall())
    with pytest.raises(brrm.ConfigError, match="chunk_size"):
        run(bt, [ScoreItem("q", "a")], chunk_size=0)
    with pytest.raises(brrm.ConfigError, match="reference must be given for every item"):
        run(bt, [ScoreItem("q", "a", reference="r"), ScoreItem("q", "b")], call=ScoreCall(references=True))
    assert run(bt, []) == []


def test_the_scheduler_runner_and_failed_results_use_the_typed_calls(bt):
    runner = make_runner(bt)
    out = runner(ScoreCall(), [ScoreItem("What is 2+2?", "4", id="x")], lambda _: None)
    assert len(out) == 1 and out[0].ok and out[0].id == "x"
    with pytest.raises(brrm.ConfigError, match="unknown judge call"):
        runner(("score", False, False), [ScoreItem("q", "a")], lambda _: None)
    failed = failed_result(RankCall("round_robin"), GroupItem("q", ("a", "b")), brrm.Status.BACKEND_ERROR, "boom")
    assert failed.strategy == "round_robin" and [r.status for r in failed.rewards] == [brrm.Status.BACKEND_ERROR] * 2
    pair = failed_result(PairsCall(), PairItem("q", "a", "b", id="p", label=brrm.Verdict.A),
                         brrm.Status.INVALID_INPUT, "bad")
    assert (pair.id, pair.label, pair.status, pair.reason) == ("p", brrm.Verdict.A, brrm.Status.INVALID_INPUT, "bad")
