"""One reward interface: scalar ↔ pairwise adapters and group ranking strategies.

Scalar models are the tiny real Bradley–Terry RM; the BR-RM judge runs its real code over a scripted
backend (outputs chosen on purpose: a deterministic preference, a backend error on one response).
Cases: C04 (failures never averaged), C19 (empty responses), C27 (ties in win rates).
"""

from __future__ import annotations

import math
from itertools import permutations

import pytest

from brrm.backends.fake import FakeBackend
from brrm.compose import (
    PairwiseRewardJudge,
    ScalarRewardJudge,
    adjusted_win_rate,
    as_reward_judge,
    pairwise_from_rewards,
    rank_by_win_rate,
    sigmoid,
)
from brrm.errors import ConfigError
from brrm.judges.brrm import BRRMConfig
from brrm.reward_models.bradley_terry import BradleyTerryRewardModel
from brrm.testing import brrm_judge, build_tiny_qwen3, build_tiny_tokenizer
from brrm.types import RewardJudge, ScalarReward, ScalarRewardModel, Status, Verdict

GROUP = [f"Answer {k}: " + "detail " * (3 * k % 8) for k in range(8)]  # 8 distinct responses
CONV = "Give the most complete answer."


@pytest.fixture(scope="module")
def bt():
    model, tok = build_tiny_qwen3(seed=1, sequence_classification=True)
    return BradleyTerryRewardModel.from_model(model, tok, model_id="tiny-rm")


def ok(x):
    return ScalarReward(x, Status.OK)


# ---------------------------------------------------------------------------------------------- adapters
def test_scalar_to_pairwise_is_bradley_terry_with_ties_within_the_margin():
    j = pairwise_from_rewards(ok(2.0), ok(0.5))
    assert j.winner is Verdict.A and j.ok and j.p_a == pytest.approx(1 / (1 + math.exp(-1.5)))
    assert pairwise_from_rewards(ok(0.5), ok(2.0)).winner is Verdict.B
    tie = pairwise_from_rewards(ok(1.0), ok(1.2), margin=0.25)
    assert tie.winner is Verdict.TIE and tie.ok and tie.p_a == pytest.approx(sigmoid(-0.2))
    assert pairwise_from_rewards(ok(1.0), ok(1.0), on_tie=Verdict.B).winner is Verdict.B
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0
    with pytest.raises(ConfigError, match="margin"):
        pairwise_from_rewards(ok(1.0), ok(0.0), margin=-1)
    with pytest.raises(ConfigError, match="on_tie"):
        pairwise_from_rewards(ok(1.0), ok(0.0), on_tie=Verdict.NONE)


def test_failed_rewards_never_give_a_winner_and_empty_loses_in_both_orders():
    err = ScalarReward.failed(Status.BACKEND_ERROR, "HTTP 503 after retries")
    j = pairwise_from_rewards(ok(1.0), err)
    assert j.status is Status.BACKEND_ERROR and j.winner is Verdict.NONE and "HTTP 503" in j.reason
    empty = ScalarReward.failed(Status.EMPTY, "response is empty")
    assert pairwise_from_rewards(empty, ok(-3.0)).winner is Verdict.B  # C19: the non-empty one wins
    assert pairwise_from_rewards(ok(-3.0), empty).winner is Verdict.A
    assert pairwise_from_rewards(empty, empty).winner is Verdict.TIE
    assert pairwise_from_rewards(empty, err).status is Status.BACKEND_ERROR
    with pytest.raises(ConfigError, match="NaN"):
        ScalarReward(-1.0, Status.BACKEND_ERROR, "sentinel")  # no -1 sentinel for a failed reward
    with pytest.raises(ConfigError, match="finite"):
        ScalarReward(math.nan, Status.OK)


def test_adjusted_win_rate_counts_ties_half():
    """C27: model_y (40 wins, 60 ties) ranks above model_x (40 wins, 60 losses); raw counts are kept."""
    rows = rank_by_win_rate(
        {"model_x": {"win": 40, "tie": 0, "loss": 60}, "model_y": {"win": 40, "tie": 60, "loss": 0}}
    )
    assert [r["name"] for r in rows] == ["model_y", "model_x"]
    assert rows[0]["win_rate"] == pytest.approx(0.70) and rows[1]["win_rate"] == pytest.approx(0.40)
    assert (rows[0]["win"], rows[0]["tie"], rows[0]["loss"], rows[0]["total"]) == (40, 60, 0, 100)
    assert math.isnan(adjusted_win_rate(0, 0, 0))
    with pytest.raises(ConfigError):
        rank_by_win_rate({"m": {"win": 1}})


def test_scalar_judge_pairs_from_one_scoring_pass(bt):
    judge = ScalarRewardJudge(bt)
    assert isinstance(bt, ScalarRewardModel) and isinstance(judge, RewardJudge)
    convs = ["What is 2+2?", "Name a colour."]
    out = judge.judge_pairs(
        convs, ["4", "Red."], ["5", "Red."], ids=["p1", "p2"], labels=[Verdict.A, Verdict.TIE]
    )
    ra, rb = bt.score(convs * 2, ["4", "Red.", "5", "Red."])[:2], bt.score(convs, ["5", "Red."])
    assert out[0].p_a == pytest.approx(sigmoid(ra[0].reward - rb[0].reward), abs=1e-6)
    assert out[0].id == "p1" and out[0].label is Verdict.A and out[0].provenance.model == "tiny-rm"
    assert out[1].winner is Verdict.TIE and out[1].correct is True  # identical responses: equal rewards
    assert [j.winner for j in judge.judge_pairs(convs, ["5", "Red."], ["4", "Red."], swap=True)] == [
        out[0].winner.mirrored(),
        Verdict.TIE,
    ]


# ------------------------------------------------------------------------------------------ scalar groups
def test_bt_group_of_8_scores_round_robin_knockout_circular_reference(bt):
    judge = ScalarRewardJudge(bt)
    raw = [r.reward for r in bt.score([CONV] * 8, GROUP)]
    order = tuple(sorted(range(8), key=lambda i: -raw[i]))
    g = judge.rank(CONV, GROUP)  # strategy "scores"
    assert g.strategy == "scores" and g.reward_range == (-math.inf, math.inf)
    assert [r.reward for r in g.rewards] == pytest.approx(raw, abs=1e-6) and g.ranking == order
    assert g.n_scored == 8 and g.n_judgments == 56 and g.failed == 0 and g.best == order[0]
    for i, j in permutations(range(8), 2):
        assert g.wins[i][j] == (2 if raw[i] > raw[j] else 0)  # both orders of every pair
    assert sum(map(sum, g.ties)) == 0
    rr = judge.rank(CONV, GROUP, strategy="round_robin")
    assert rr.reward_range == (0.0, 1.0) and rr.n_judgments == 56 and rr.ranking == order
    assert sorted(r.reward for r in rr.rewards) == pytest.approx([k / 7 for k in range(8)])
    ko = judge.rank(CONV, GROUP, strategy="knockout")
    assert ko.best == order[0] and ko.n_judgments == 7 and ko.rewards[order[0]].reward == 1.0
    assert circ_ok(judge.rank(CONV, GROUP, strategy="circular"))
    ref = judge.rank(CONV, GROUP, strategy="reference", reference="A plain reference answer.")
    ref_reward = bt.score([CONV], ["A plain reference answer."])[0].reward
    assert ref.n_judgments == 8 and ref.n_scored == 9
    assert [r.reward for r in ref.rewards] == pytest.approx([sigmoid(x - ref_reward) for x in raw], abs=1e-6)


def circ_ok(g):
    assert g.n_judgments == 8 and g.reward_range == (0.0, 1.0)
    assert all(sum(g.wins[k]) + sum(r[k] for r in g.wins) + sum(g.ties[k]) == 2 for k in range(8))
    return True


def test_failures_never_enter_group_rewards(bt):
    """C04: a response that cannot be scored keeps its status; others are rated on ok judgments only."""
    small = BradleyTerryRewardModel(bt.backend, max_length=40)
    group = ["Short.", "Also short.", "word " * 100, "Brief!"]
    g = ScalarRewardJudge(small).rank(CONV, group, strategy="round_robin")
    bad = g.rewards[2]
    assert bad.status is Status.TRUNCATED and math.isnan(bad.reward) and "never cut" in bad.reason
    assert g.failed == 6 and g.n_judgments == 12 and 2 not in g.ranking
    clean = ScalarRewardJudge(small).rank(CONV, [group[0], group[1], group[3]], strategy="round_robin")
    assert [g.rewards[k].reward for k in (0, 1, 3)] == pytest.approx([r.reward for r in clean.rewards])
    assert math.isnan(g.win_rates()[2]) and g.to_dict()["rewards"][2]["reward"] is None


# ----------------------------------------------------------------------------------------- BR-RM groups
def _brrm(tok, *, broken="", swap=False):
    """BR-RM over scripted outputs: the longer response wins; one containing ``broken`` errors."""
    t1 = (
        "[Quality Assessment Focus]\nResponse Completeness\n[End of Quality Assessment Focus]\n\n"
        "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n"
        "[End of Quality Analysis for Response 1]\n\n[Quality Analysis for Response 2]\n- Critical Issues: "
        "None identified\n[End of Quality Analysis for Response 2]"
    )

    def script(prompt, request):
        first = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]
        second = prompt.split("[The Begin of Response 2]\n", 1)[1].split("\n[The End of Response 2]", 1)[0]
        if broken and broken in first + second:
            return RuntimeError("HTTP 503 after retries")
        if "Evaluation Hierarchies" not in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return t1
        k = 1 if len(first) >= len(second) else 2
        return f"[The Begin of Ranking Score]\n\\boxed{{{k}}}\n[The End of Ranking Score]"

    backend = FakeBackend(tok, script, model_id="scripted-brrm")
    return brrm_judge(backend, BRRMConfig(decoding="faithful", swap=swap)), backend


def test_brrm_group_of_8_round_robin_both_orders():
    tok = build_tiny_tokenizer()
    judge, backend = _brrm(tok)
    wrapped = as_reward_judge(judge)
    assert wrapped is judge and isinstance(wrapped, PairwiseRewardJudge) and isinstance(wrapped, RewardJudge)
    assert isinstance(as_reward_judge(judge.model), PairwiseRewardJudge)
    g = wrapped.rank(CONV, GROUP, strategy="round_robin")
    lengths = [len(r) for r in GROUP]
    assert (
        g.n_judgments == 56 and g.failed == 0 and g.n_scored == 0 and len(backend.prompts) == 112
    )  # 2 turns
    for i, j in permutations(range(8), 2):  # each ordered pair judged once; the longer one always wins
        assert g.wins[i][j] == (2 if lengths[i] > lengths[j] else 0) + (1 if lengths[i] == lengths[j] else 0)
    ties = sum(map(sum, g.ties))
    assert ties == 0 and g.reward_range == (0.0, 1.0)
    rates = [r.reward for r in g.rewards]
    assert rates == pytest.approx(list(g.win_rates()))
    assert g.best == max(range(8), key=lambda i: (lengths[i], -i))
    assert all(0.0 <= x <= 1.0 for x in rates) and g.ranking[0] == g.best


def test_brrm_swap_disagreement_is_a_tie_in_the_matrix():
    tok = build_tiny_tokenizer()
    judge, _ = _brrm(tok, swap=True)  # equal lengths: position 1 always wins, so the two orders disagree
    g = judge.rank(
        CONV, ["Same length A.", "Same length B.", "Longer answer here."], strategy="circular"
    )
    assert g.n_judgments == 3 and g.ties[0][1] == g.ties[1][0] == 1
    assert g.rewards[2].reward == 1.0 and g.best == 2


def test_brrm_failures_knockout_and_reference():
    tok = build_tiny_tokenizer()
    judge, _ = _brrm(tok, broken="BROKEN")
    pw = judge
    group = ["a", "bbbb", "BROKEN cc", "ddddddd", "ee"]
    rr = pw.rank(CONV, group, strategy="round_robin")  # C04: the 8 failed judgments are counted, not averaged
    assert (
        rr.failed == 8 and rr.rewards[2].status is Status.BACKEND_ERROR and math.isnan(rr.rewards[2].reward)
    )
    assert rr.rewards[3].reward == 1.0 and rr.rewards[0].reward == 0.0
    ko = pw.rank(CONV, group, strategy="knockout")
    # round 1: a-bbbb -> bbbb, BROKEN-ddddddd fails (both out), ee bye; final: bbbb-ee -> bbbb
    assert ko.n_judgments == 3 and ko.failed == 1 and ko.best == 1
    assert ko.rewards[3].status is Status.BACKEND_ERROR and ko.rewards[2].status is Status.BACKEND_ERROR
    assert [ko.rewards[k].reward for k in (0, 1, 4)] == pytest.approx([0.0, 2 / 3, 1 / 3])
    scores = pw.score([CONV] * 3, ["dddd", "a", "BROKEN"], references=["bb"] * 3)
    assert [s.reward for s in scores[:2]] == [1.0, 0.0] and scores[2].status is Status.BACKEND_ERROR
    ref = pw.rank(CONV, group, strategy="reference", reference="ccc")
    assert ref.n_judgments == 5 and ref.failed == 1 and [r.reward for r in ref.rewards][:2] == [0.0, 1.0]
    with pytest.raises(ConfigError, match="references"):
        pw.score([CONV], ["x"])
    with pytest.raises(ConfigError, match="no scalar score"):
        pw.rank(CONV, group, strategy="scores")
    alone = pw.rank(CONV, ["only"], strategy="round_robin")  # nothing to compare with: a status, not a crash
    assert alone.n_judgments == 0 and alone.rewards[0].status is Status.INVALID_INPUT and not alone.ranking
    with pytest.raises(ConfigError, match="not valid"):
        pw.rank(CONV, group, strategy="swiss")
    with pytest.raises(ConfigError, match="neither"):
        as_reward_judge(object())
