"""JudgeBench's official reward-model outputs replayed through the scalar → pairwise adapter.

Expected numbers: ``../shared/data/JudgeBench/SOURCE.md`` ("Validation numbers recomputed here from the copied
official outputs (official formula, two games)").
"""

from __future__ import annotations

import math

import pytest

from brrm.bench import judgebench as jb
from brrm.types import Status, Verdict

PREFIX = "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=reward_model,judge_model="

# judge_model file suffix -> (Knowledge, Reasoning, Math, Coding, Overall), SOURCE.md
EXPECTED = {
    "Skywork_Skywork-Reward-Llama-3.1-8B": (59.09, 64.29, 76.79, 50.00, 62.29),
    "internlm_internlm2-20b-reward": (62.34, 69.39, 66.07, 50.00, 63.43),
    "Ray2333_GRM-Gemma-2B-rewardmodel-ft": (62.99, 53.06, 64.29, 54.76, 59.43),
}
ORDER = ("Knowledge", "Reasoning", "Math", "Coding", "Overall")


@pytest.fixture(scope="module")
def results(shared):
    folder = shared / "data" / "JudgeBench" / "official_results"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found: JudgeBench official outputs are only on developer and CI machines")
    return {name: jb.read_outputs(folder / f"{PREFIX}{name}.jsonl") for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replay_reproduces_every_official_decision_and_score(results, name):
    rows = results[name]
    assert len(rows) == 350
    replayed = jb.replay_reward_model(rows)
    official = [tuple(g["decision"] for g in row["judgments"]) for row in rows]
    assert [p.decisions for p in replayed] == official  # all 700 games, decision by decision
    got = jb.replay_scores(replayed)
    assert tuple(round(got[k], 2) for k in ORDER) == EXPECTED[name]
    assert jb.official_scores(rows) == got  # the metric over stored decisions agrees exactly


def test_scores_and_probabilities_come_from_the_stored_rewards(results):
    row = results["Skywork_Skywork-Reward-Llama-3.1-8B"][0]
    first, second = jb.replay_reward_model([row])[0].games
    assert row["judgments"][0]["judgment"]["scores"] == [5.625, 14.625]
    assert first.winner is Verdict.B and first.p_a == pytest.approx(1 / (1 + math.exp(9.0)))
    assert second.winner is Verdict.A and second.p_a == pytest.approx(1 - first.p_a)


def test_equal_scores_follow_the_official_rule_or_stay_ties(results):
    """Skywork has one pair with equal scores (20.75, 20.75): officially B>A in both games (a 0 sum)."""
    rows = results["Skywork_Skywork-Reward-Llama-3.1-8B"]
    tied = [r for r in rows if len(set(r["judgments"][0]["judgment"]["scores"])) == 1]
    assert len(tied) == 1
    official = jb.replay_reward_model(tied)[0]
    assert official.decisions == ("B>A", "B>A")
    assert all(g.reason.startswith("tie") for g in official.games)
    as_ties = jb.replay_reward_model(tied, on_tie=Verdict.TIE)[0]
    assert as_ties.decisions == ("A=B", "A=B") and all(g.p_a == 0.5 for g in as_ties.games)
    # a tie counts 0 in the official sum, like the B>A/A>B pair it replaces: the scores do not move
    assert jb.replay_scores(jb.replay_reward_model(rows, on_tie=Verdict.TIE))["Overall"] == pytest.approx(
        100 * 218 / 350
    )


def test_official_metric_on_the_arena_hard_file_with_null_judgments(shared):
    name = (
        "dataset=judgebench,response_model=claude-3-5-sonnet-20240620,judge_name=arena_hard,"
        "judge_model=claude-3-haiku-20240307.jsonl"
    )
    path = shared / "data" / "JudgeBench" / "official_results" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    got = jb.official_scores(jb.read_outputs(path))
    assert tuple(round(got[k], 2) for k in ORDER) == (37.66, 29.41, 32.35, 9.68, 32.22)


def test_metric_rules():
    assert jb.pair_correct("A>B", "A>B", "B>A")  # both games right (second is in the swapped frame)
    assert not jb.pair_correct("A>B", "A>B", "A>B")  # one right, one wrong: sum 0
    assert jb.pair_correct("B>A", "B>A", "A=B")  # right + tie
    assert not jb.pair_correct("B>A", None, None)
    assert jb.category("mmlu-pro-law") == "Knowledge" and jb.category("livecodebench") == "Coding"
    bad = jb.replay_reward_model(
        [
            {
                "pair_id": "x",
                "source": "livebench-math",
                "label": "A>B",
                "judgments": [{"judgment": {"scores": [None, 1.0]}}, {"judgment": {"scores": [1.0, 2.0]}}],
            }
        ]
    )[0]
    assert bad.games[0].status is Status.BACKEND_ERROR and bad.decisions == (None, "B>A")
