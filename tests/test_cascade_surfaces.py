"""The judge cascade (issue 48.1) in verl's reward function (per sample and per GRPO cohort) and in an arena; the
server, TRL, audits and benchmarks are in tests/test_cascade.py. The first stage is a real Bradley–Terry judge over
a scripted classifier (reward = the last ``r<number>`` of the prompt, or the strength of the model named last); the
second a scripted ordered-pair judge that counts its calls."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.compose import PairwiseRewardJudge
from brrm.testing import build_tiny_tokenizer
from brrm.testing.scripted import ScriptedOrdered
from brrm.types import Verdict
from tests.test_cascade import _reward


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_verl_scores_each_sample_through_the_cascade(tokenizer):
    """P(response ≻ reference): the first stage decides a margin above 1, the second the rest and the failure."""
    from brrm.rlhf.verl import VerlRewardConfig, VerlScorer

    strong = ScriptedOrdered()  # the first shown (the response) wins with P 0.9
    judge = brrm.load(kind="bt", backend=FakeBackend(tokenizer, score_script=_reward),
                      cascade=PairwiseRewardJudge(strong), cascade_margin=1.0)
    scorer = VerlScorer(VerlRewardConfig(timeout_s=30.0, reference_key="reference"), judge=judge)

    async def run() -> list[dict[str, object]]:
        return list(await asyncio.gather(*[scorer.score(text, None, {"prompt": "which is better?", "reference": "r1"})
                                           for text in ("r5", "r1.5", "BOOM r9", "r-2")]))

    try:
        out = asyncio.run(run())
    finally:
        scorer.close()
    assert [r["status"] for r in out] == ["ok"] * 4 and all(r["ok"] for r in out)
    assert [r["score"] for r in out] == pytest.approx([_sigmoid(4.0), 0.9, 0.9, _sigmoid(-3.0)])
    assert strong.calls == 2  # r1.5 (margin 0.5) and the first stage's failure; r5 and r-2 decided first


def test_verl_cohorts_rank_each_group_through_the_cascade(tokenizer):
    from brrm.rlhf.cohorts import CohortBuffer

    table = {("r1", "r1.5"): (Verdict.B, 0.2), ("r1.5", "r1"): (Verdict.A, 0.8)}
    strong = ScriptedOrdered(table)
    judge = brrm.load(kind="bt", backend=FakeBackend(tokenizer, score_script=_reward),
                      cascade=PairwiseRewardJudge(strong), cascade_margin=1.0)
    buf = CohortBuffer(lambda: judge, group_size=3, strategy="circular", cohort_timeout_s=30)

    async def run() -> list[Any]:
        return list(await asyncio.gather(*[buf.submit("u1", "which is better?", t) for t in ("r5", "r1", "r1.5")]))

    try:
        out = asyncio.run(run())
    finally:
        buf.close()
    # circular: (r5, r1), (r1, r1.5), (r1.5, r5); only r1 vs r1.5 is inside the margin: the second judge says r1.5
    assert [r.reward for r in out] == pytest.approx([1.0, 0.0, 0.5]) and strong.calls == 1


STRENGTHS = {"weak": -1.0, "mid": 0.0, "strong": 1.0, "best": 2.0}


def _strength(prompt: str) -> float:
    return STRENGTHS[re.findall(r"by (\w+)", prompt)[-1]]


def test_an_arena_rates_through_the_cascade_and_only_close_matchups_reach_the_second_judge(tokenizer):
    """Round robin of four models a strength apart on three prompts: matchups one strength apart (|r_A - r_B| = 1,
    inside the margin 1.5) go to the second judge, in both orders (an arena swaps a judge of pairs); the rest are the
    first stage's σ(r_A - r_B). The second judge prefers the stronger model; the ratings recover the order."""
    pytest.importorskip("evalica")  # the arena extra
    from brrm.arena import run_arena, table_from_rows

    models, prompts = list(STRENGTHS), 3
    rows = [(k * 4 + m + 1, {"prompt_id": f"p{k}", "model": name, "prompt": f"Question {k}?",
                             "response": f"Answer {k} by {name}"}) for k in range(prompts)
            for m, name in enumerate(models)]
    table: dict[tuple[str, str], tuple[Verdict, float]] = {}
    for k in range(prompts):
        for x in models:
            for y in models:
                better = STRENGTHS[x] > STRENGTHS[y]
                table[(f"Answer {k} by {x}", f"Answer {k} by {y}")] = (Verdict.A if better else Verdict.B,
                                                                       0.7 if better else 0.3)
    strong = ScriptedOrdered(table)
    judge = brrm.load(kind="bt", backend=FakeBackend(tokenizer, score_script=_strength),
                      cascade=PairwiseRewardJudge(strong), cascade_margin=1.5)
    result = run_arena(judge, table_from_rows(rows), round_robin=True, anchor="mid", bootstrap=10, seed=1,
                       style_control=False)
    close = [b for b in result.battles if abs(STRENGTHS[b.model_a] - STRENGTHS[b.model_b]) == 1.0]
    assert len(result.battles) == 6 * prompts and len(close) == 3 * prompts
    assert strong.calls == 2 * len(close) and all(b.swapped for b in result.battles)
    for b in result.battles:
        want = 0.7 if b in close else _sigmoid(STRENGTHS[b.model_a] - STRENGTHS[b.model_b])
        want = want if b not in close or STRENGTHS[b.model_a] > STRENGTHS[b.model_b] else 0.3
        assert b.ok and b.p_a == pytest.approx(want)
    assert [r.model for r in result.leaderboard.ratings] == ["best", "strong", "mid", "weak"]  # best first
