"""Scalar rewards → pairwise judgments (the Bradley–Terry model), and win-rate arithmetic with ties."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from brrm.errors import ConfigError
from brrm.numerics import sigmoid
from brrm.types import PairwiseJudgment, ScalarReward, Status, Verdict, check_float

_TIE_OPTIONS = (Verdict.TIE, Verdict.A, Verdict.B)


def adjusted_win_rate(win: int, tie: int, loss: int) -> float:
    """(win + 0.5·tie) / (win + tie + loss), in [0, 1]; NaN when there are no games (nothing to rate).

    Source: FastChat's adjusted win rate (lm-sys/FastChat PR #1892): a tie counts half a win.
    """
    total = win + tie + loss
    return (win + 0.5 * tie) / total if total else math.nan


def rank_by_win_rate(counts: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Rank models by adjusted win rate from their ``{"win", "tie", "loss"}`` counts (ties count half).

    Returns:
        ``[{"name", "win_rate", "win", "tie", "loss", "total"}, ...]`` best first (equal rates keep input
        order); raw counts are reported next to the rate.

    Raises:
        ConfigError: on a missing or negative count.
    """
    rows = []
    for name, c in counts.items():
        try:
            win, tie, loss = (int(c[k]) for k in ("win", "tie", "loss"))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"counts of {name!r} need integer 'win', 'tie' and 'loss', got {dict(c)!r}") from None
        if min(win, tie, loss) < 0:
            raise ConfigError(f"counts of {name!r} must be >= 0, got {dict(c)!r}")
        rows.append({"name": name, "win_rate": adjusted_win_rate(win, tie, loss), "win": win, "tie": tie,
                     "loss": loss, "total": win + tie + loss})
    return sorted(rows, key=lambda r: -r["win_rate"] if not math.isnan(r["win_rate"]) else math.inf)


def pairwise_from_rewards(reward_a: ScalarReward, reward_b: ScalarReward, *, margin: float = 0.0,
                          on_tie: Verdict = Verdict.TIE, id: str = "",
                          label: Verdict = Verdict.NONE) -> PairwiseJudgment:
    """Turn two scalar rewards for the same conversation into a pairwise judgment.

    Args:
        reward_a, reward_b: rewards of response A and B.
        margin: |r_A − r_B| ≤ margin is a tie, finite, >= 0 (reward units).
        on_tie: what a tie becomes: ``Verdict.TIE`` (default), or ``Verdict.A`` / ``Verdict.B`` to reproduce a
            protocol that has no ties (JudgeBench's reward-model judges: ``A>B if s_A > s_B else B>A`` is
            ``margin=0, on_tie=Verdict.B``).
        id, label: copied into the judgment.

    Returns:
        An ok judgment with p_a = σ(r_A − r_B) when both rewards are ok; when exactly one response is empty
        and the other is ok, the other wins (p_a not measured: NaN); both empty is a tie; any other failed
        reward makes the judgment carry that failure (winner NONE, never a default winner).

    Raises:
        ConfigError: on a negative or non-finite margin or an invalid ``on_tie``.
    """
    check_float("margin", margin, low=0)
    if on_tie not in _TIE_OPTIONS:
        raise ConfigError(f"on_tie must be Verdict.TIE, Verdict.A or Verdict.B, got {on_tie!r}")
    meta: dict[str, Any] = {"id": id, "label": label, "provenance": reward_a.provenance or reward_b.provenance,
                            "prompt_tokens": reward_a.input_tokens + reward_b.input_tokens, "attempts": 0}
    empty = (reward_a.status is Status.EMPTY, reward_b.status is Status.EMPTY)
    if all(empty):
        return PairwiseJudgment(Verdict.TIE, Status.OK, "both responses are empty", **meta)
    if any(empty) and (reward_a.ok or reward_b.ok):
        winner = Verdict.B if empty[0] else Verdict.A
        return PairwiseJudgment(winner, Status.OK, f"response {'A' if empty[0] else 'B'} is empty", **meta)
    failures = [(side, r) for side, r in (("A", reward_a), ("B", reward_b)) if not r.ok]
    failures.sort(key=lambda f: f[1].status is Status.EMPTY)  # a real failure explains more than emptiness
    if failures:
        side, r = failures[0]
        return PairwiseJudgment(Verdict.NONE, r.status, f"response {side}: {r.reason}", **meta)
    delta = reward_a.reward - reward_b.reward
    winner = on_tie if abs(delta) <= margin else (Verdict.A if delta > 0 else Verdict.B)
    resolved = winner is on_tie and on_tie is not Verdict.TIE
    reason = f"tie (|Δ| <= {margin}) resolved as {on_tie.value}" if resolved else ""
    return PairwiseJudgment(winner, Status.OK, reason, p_a=sigmoid(delta), **{**meta, "attempts": 1})
