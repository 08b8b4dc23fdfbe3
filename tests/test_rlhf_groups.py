"""brrm.rlhf group rewards: grouping checks, failures kept out of the baseline, cost and budget (no trainer).

Scripted backends (brrm.backends.fake) appear only for failures a real model cannot produce on demand: a judge
error on one completion (N01), a backend returning the wrong number of scores (N19). The rest uses the tiny
real judge and reward model.
"""

from __future__ import annotations

import math

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.rlhf import check_groups, judgments_per_step, trl_reward
from brrm.rlhf.trl import restore_prefill, split_completion
from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3

T1 = ("[Quality Assessment Focus]\nResponse Completeness\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: None identified\n"
      "[End of Quality Analysis for Response 2]")


def scripted_brrm(*, fail: str = "<<FAIL>>", swap: bool = False, prefer: str = "longer"):
    """A BR-RM judge over scripted outputs: the longer response wins (``prefer="first"``: position 1 always
    wins); any comparison involving ``fail`` is a backend error. Returns (judge, backend)."""
    tok = build_tiny_tokenizer()

    def script(prompt, request):
        first = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]
        second = prompt.split("[The Begin of Response 2]\n", 1)[1].split("\n[The End of Response 2]", 1)[0]
        if fail and fail in first + second:
            return RuntimeError("judge server returned HTTP 503")
        if "[The Begin of Analysis on Response 1]" not in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return T1
        k = 1 if prefer == "first" or len(first) >= len(second) else 2
        return f"[The Begin of Ranking Score]\n\\boxed{{{k}}}\n[The End of Ranking Score]"

    backend = FakeBackend(tok, script, model_id="scripted-brrm")
    # brrm's shortcuts (identical/blank pairs decided without the model) on: faithful alone calls the model
    return brrm.load(kind="brrm", backend=backend, decoding="faithful", shortcuts=True, swap=swap), backend


N01_PROMPTS = ["Q1"] * 4
N01_COMPLETIONS = ["good answer", "ok answer", "<<FAIL>>", "bad answer"]


@pytest.mark.parametrize("strategy,swap,soft", [("circular", False, False), ("circular", True, False),
                                                ("round_robin", False, False), ("circular", False, True)])
def test_n01_unjudgeable_completion_is_none_and_siblings_match_the_smaller_group(strategy, swap, soft):
    judge, _ = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy=strategy, num_generations=4, swap=swap, soft=soft)
    metrics = {}
    r = reward(prompts=N01_PROMPTS, completions=N01_COMPLETIONS, log_metric=metrics.__setitem__)
    three = trl_reward(judge, mode="group", strategy=strategy, num_generations=3, swap=swap, soft=soft)
    r3 = three(prompts=["Q1"] * 3, completions=["good answer", "ok answer", "bad answer"])
    assert len(r) == 4 and r[2] is None
    assert [r[0], r[1], r[3]] == pytest.approx(r3, abs=1e-6)
    assert all(isinstance(x, float) and math.isfinite(x) for x in r3)
    assert r3[0] > r3[2] > r3[1]  # longer wins: "good answer" > "bad answer" > "ok answer"
    assert metrics["brrm_group/failed_items"] == 1.0 and metrics["brrm_group/status/backend_error"] == 1.0
    assert metrics["brrm_group/groups_repaired"] == (1.0 if strategy == "circular" else 0.0)


def test_knockout_failed_match_leaves_both_sides_unscored_and_others_ranked():
    judge, _ = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy="knockout", num_generations=4)
    r = reward(prompts=N01_PROMPTS, completions=N01_COMPLETIONS)
    assert r[2] is None and r[3] is None  # a failed match cannot say which side failed
    assert r[0] == 1.0 and r[1] == 0.0  # the survivors' bracket: "good answer" beats "ok answer"


def test_every_judgment_failing_gives_all_none_and_counts_them():
    judge, _ = scripted_brrm(fail="answer")
    reward = trl_reward(judge, mode="group", strategy="circular", num_generations=4, swap=True)
    metrics = {}
    r = reward(prompts=N01_PROMPTS, completions=N01_COMPLETIONS, log_metric=metrics.__setitem__)
    assert r == [None, None, None, None]
    assert metrics["brrm_group/failed_items"] == 4.0 and metrics["brrm_group/backend_errors"] > 0
    assert math.isnan(metrics["brrm_group/reward_mean"])


def test_grouping_is_checked_never_assumed():
    judge, backend = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy="circular", num_generations=4)
    with pytest.raises(brrm.ConfigError, match="not a multiple of num_generations=4"):
        reward(prompts=["Q"] * 6, completions=["a"] * 6)
    with pytest.raises(brrm.ConfigError, match=r"prompts 0\.\.3 are not one prompt.*row 2 differs"):
        reward(prompts=["Q1", "Q1", "Q2", "Q2"], completions=["a", "b", "c", "d"])
    assert backend.calls == 0
    assert check_groups(["a", "a", "b", "b"], 2) == 2
    with pytest.raises(brrm.ConfigError, match="needs num_generations"):
        trl_reward(judge, mode="group")


def test_identical_completions_tie_without_model_calls():
    judge, backend = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy="circular", num_generations=4, swap=True)
    assert reward(prompts=["Q"] * 4, completions=["same"] * 4) == [0.5] * 4
    assert backend.calls == 0


def test_num_generations_one_needs_reference_and_scores_against_it():
    judge, _ = scripted_brrm()
    with pytest.raises(brrm.ConfigError, match="num_generations=1 leaves nothing to compare"):
        trl_reward(judge, mode="group", strategy="circular", num_generations=1)
    reward = trl_reward(judge, mode="group", strategy="reference", num_generations=1, reference_column="ref")
    r = reward(prompts=["Q1", "Q2"], completions=["a much longer answer", "no"], ref=["medium ref", "medium ref"])
    assert r == [1.0, 0.0]


def test_budget_refuses_before_any_model_call_and_cost_is_stated():
    judge, backend = scripted_brrm()
    assert judgments_per_step(judge, "circular", 8, 8, swap=True) == 128
    with pytest.raises(brrm.ConfigError, match="one group needs 16 judgments"):
        trl_reward(judge, mode="group", strategy="circular", num_generations=8, swap=True, max_judgments_per_step=10)
    reward = trl_reward(judge, mode="group", strategy="circular", num_generations=4, swap=True,
                        max_judgments_per_step=12)
    assert reward.judgments_per_group() == 8
    with pytest.raises(brrm.ConfigError, match="this step needs 16 judgments"):
        reward(prompts=["Q1"] * 4 + ["Q2"] * 4, completions=[f"answer {i}" for i in range(8)])
    assert backend.calls == 0


class _MiscountingBackend(FakeBackend):
    """Returns one score too few (``drop_last``) or too many (``extra``); score = item index + 0.5."""

    def __init__(self, tok, mode):
        super().__init__(tok, score_script=lambda p: 0.0)
        self.mode = mode

    def classify(self, sequences, *, token_id=None):
        scores = super().classify(sequences, token_id=token_id)
        from brrm.backends.base import Score

        scores = [Score(i + 0.5) for i in range(len(scores))]
        return scores[:-1] if self.mode == "drop_last" else [*scores, Score(99.5)]


@pytest.mark.parametrize("mode", ["drop_last", "extra"])
def test_n19_wrong_number_of_scores_raises_never_misaligns(mode):
    judge = brrm.load(kind="bt", backend=_MiscountingBackend(build_tiny_tokenizer(), mode))
    reward = trl_reward(judge)
    with pytest.raises(RuntimeError, match=r"returned (2|4) scores for 3"):  # a backend bug, not an input error
        reward(prompts=["p", "p", "p"], completions=["c0", "c1", "c2"])


@pytest.fixture(scope="module")
def tiny_bt(tmp_path_factory):
    return brrm.load(str(save_tiny_qwen3(tmp_path_factory.mktemp("bt"), sequence_classification=True)))


def test_c13_prefilled_think_is_restored_before_judging(tiny_bt):
    completions = ["Two plus two.\n</think>\nThe answer is 4.", "<think>Two plus two.</think>\nThe answer is 4.",
                   "The answer is 4."]
    assert restore_prefill(completions[0]) == "<think>" + completions[0]
    assert [restore_prefill(c) for c in completions[1:]] == completions[1:]
    r = trl_reward(tiny_bt)(prompts=["What is 2+2?"] * 3, completions=completions)
    alone = tiny_bt.score(["What is 2+2?"], ["The answer is 4."])[0].reward
    assert r[0] == pytest.approx(r[1], abs=1e-6) and r[0] == pytest.approx(alone, abs=1e-5)
    with pytest.warns(UserWarning, match="same reward"):
        trl_reward(tiny_bt)(prompts=["Q"] * 2, completions=["<think>x</think>same", "same"])


def test_c20_conversational_completion_judges_only_the_final_assistant_text(tiny_bt):
    prompt = [{"role": "user", "content": "What is the capital of Australia?"}]
    completion = [{"role": "assistant", "content": "", "tool_calls": [{"name": "search"}]},
                  {"role": "tool", "content": "Canberra is the capital city of Australia."},
                  {"role": "assistant", "content": "It's Canberra."}]
    conv, text = split_completion(prompt, completion)
    assert text == "It's Canberra." and conv[-1]["role"] == "tool" and len(conv) == 3
    with pytest.raises(brrm.ConfigError, match="must end with an assistant message"):
        split_completion(prompt, completion[:2])


def test_c19_empty_completion_is_none_in_scalar_mode_and_loses_pairwise(tiny_bt):
    r = trl_reward(tiny_bt)(prompts=["Say something kind."] * 2, completions=["", "You're doing great today."])
    assert r[0] is None and isinstance(r[1], float)
    judge, _ = scripted_brrm(prefer="first")  # position bias: only emptiness decides, in both orders
    g = trl_reward(judge, mode="group", strategy="circular", num_generations=2, swap=True)
    assert g(prompts=["Say something kind."] * 2, completions=["", "You're doing great today."]) == [0.0, 1.0]
