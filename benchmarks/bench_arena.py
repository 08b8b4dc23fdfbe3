"""``brrm arena --adaptive`` against the full round-robin grid: 8 models of known strength, a scripted judge whose
hard verdicts follow them (drawn by a hash of the pair, so both runs see the same verdict for the same pair).
Adaptive pairing must reach the grid's ranking — every adjacent pair the grid separates at 95% in the same order
(Kendall τ = 1 on them) — with at most a third of the grid's judgments. Prints both counts.

Run: ``pytest benchmarks/bench_arena.py -s`` (CPU, seconds: the grid's fit is 2,800 battles x 100
bootstrap resamples).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import pytest

from brrm.arena import run_arena, table_from_rows
from brrm.types import JudgeInfo, PairwiseJudgment, Status, Verdict

pytest.importorskip("evalica")

STRENGTHS = {f"model-{k}": 0.8 * k for k in range(8)}
PROMPTS = 100


class HashedStrengthJudge:
    """A :class:`~brrm.RewardJudge` stand-in: P(A ≻ B) = σ(s_A − s_B) of the models named at the end of the
    answers; the verdict is A when a hash of the two texts, read as a uniform number, is below it."""

    def __init__(self) -> None:
        self.info = JudgeInfo(model="hashed-strength-judge", kind="brrm", recipe="scripted", backend="fake",
                              chat_template_hash="-", template_hash="-", default_strategy="round_robin",
                              record={"seed": 0}, chunk_size=256, pairwise=True)
        self.judged = 0

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str], responses_b: Sequence[str], /,
                    **kw: Any) -> list[PairwiseJudgment]:
        out = []
        for a, b in zip(responses_a, responses_b, strict=True):
            p = 1.0 / (1.0 + math.exp(STRENGTHS[b.rsplit(" ", 1)[-1]] - STRENGTHS[a.rsplit(" ", 1)[-1]]))
            u = int(hashlib.sha256(f"{a}|{b}".encode()).hexdigest()[:12], 16) / 16**12
            out.append(PairwiseJudgment(Verdict.A if u < p else Verdict.B, Status.OK, p_a=p))
        self.judged += len(out)
        return out

    def close(self) -> None:
        pass


def test_adaptive_reaches_the_grids_ranking_with_a_third_of_its_judgments():
    rows = [(k * len(STRENGTHS) + i + 1, {"prompt_id": f"p{k}", "model": m, "prompt": f"Question {k}?",
                                         "response": f"Answer {k} by {m}"})
            for k in range(PROMPTS) for i, m in enumerate(STRENGTHS)]
    table = table_from_rows(rows)
    grid_judge, adaptive_judge = HashedStrengthJudge(), HashedStrengthJudge()
    grid = run_arena(grid_judge, table, round_robin=True, outcomes="hard", bootstrap=100, style_control=False)
    adaptive = run_arena(adaptive_judge, table, adaptive=True, outcomes="hard", bootstrap=100, style_control=False)
    assert adaptive.adaptive is not None
    order = [r.model for r in adaptive.leaderboard.ratings]
    grid_ratings = grid.leaderboard.ratings
    separated = [(hi.model, lo.model) for hi, lo in zip(grid_ratings, grid_ratings[1:], strict=False)
                 if hi.above_next >= 0.975]
    agree = sum(order.index(hi) < order.index(lo) for hi, lo in separated)
    print(f"\nfull grid: {grid_judge.judged} judgments, {len(separated)} of 7 adjacent pairs separated at 95%; "
          f"adaptive: {adaptive_judge.judged} judgments ({adaptive_judge.judged / grid_judge.judged:.0%}) in "
          f"{adaptive.adaptive.rounds} rounds, stopped: {adaptive.adaptive.stopped}; {agree}/{len(separated)} of "
          f"the grid's separated pairs in the same order")
    assert [r.model for r in grid_ratings] == list(STRENGTHS)[::-1]
    assert agree == len(separated) and separated  # Kendall tau = 1 on the pairs the grid separates
    assert adaptive_judge.judged <= grid_judge.judged / 3
