"""Per-step judge statistics for RLHF loggers (TRL's ``log_metric``, verl's reward extra info).

Every number is a plain float, so loggers average it over a logging window. Counts are per step; rates are in
[0, 1] (NaN — dropped by TRL's NaN-aware logging — when nothing was measured).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from brrm.types import GroupResult, PairwiseJudgment, ScalarReward, Status, Verdict


def reward_stats(rewards: Sequence[ScalarReward]) -> dict[str, float]:
    """Item counts by outcome: ``items``, ``failed_items``, and one ``status/<status>`` count per non-ok status.

    Also ``reward_mean`` / ``reward_min`` / ``reward_max`` over ok rewards (NaN when none), and
    ``constant_batch`` (1.0 when more than one item scored and every ok reward is the same value, a sign that
    the reward carries no signal — e.g. a format check fooled by a prefilled ``<think>``).
    """
    ok = [r.reward for r in rewards if r.ok]
    counts = Counter(r.status.value for r in rewards if not r.ok)
    out = {"items": float(len(rewards)), "failed_items": float(len(rewards) - len(ok))}
    for status in Status:
        if status is not Status.OK:
            out[f"status/{status.value}"] = float(counts.get(status.value, 0))
    out["reward_mean"] = sum(ok) / len(ok) if ok else math.nan
    out["reward_min"] = min(ok) if ok else math.nan
    out["reward_max"] = max(ok) if ok else math.nan
    out["constant_batch"] = 1.0 if len(ok) > 1 and max(ok) == min(ok) else 0.0
    return out


def _runs(judgments: Iterable[PairwiseJudgment]) -> list[PairwiseJudgment]:
    """The ordered (single-presentation) judgments that ran a model (swap pairs expanded)."""
    out = []
    for jd in judgments:
        if jd.sub_judgments:
            out += [s for s in jd.sub_judgments if s.attempts]
        elif jd.attempts:
            out.append(jd)
    return out


def judgment_stats(results: Sequence[GroupResult]) -> dict[str, float]:
    """Judgment statistics over a step's group results.

    Keys: ``judgments`` (pairwise judgments used), ``judge_runs`` (single-order model runs; 2 per judgment with
    swap), ``failed_judgments``, ``verdict/A``, ``verdict/B``, ``verdict/tie`` (counts of ok judgments),
    ``parse_failures``, ``truncations``, ``backend_errors`` (single-order runs by status),
    ``position_inconsistency`` (share of swapped judgments whose two orders disagreed; NaN without swap),
    ``judge_tokens_mean`` (generated tokens per model run; NaN without runs).
    """
    judgments = [jd for r in results for jd in r.judgments]
    runs = _runs(judgments)
    verdicts = Counter(jd.winner for jd in judgments if jd.ok)
    statuses = Counter(jd.status for jd in runs)
    swapped = [jd.consistent for jd in judgments if jd.consistent is not None]
    return {
        "judgments": float(len(judgments)),
        "judge_runs": float(len(runs)),
        "failed_judgments": float(sum(not jd.ok for jd in judgments)),
        "verdict/A": float(verdicts.get(Verdict.A, 0)),
        "verdict/B": float(verdicts.get(Verdict.B, 0)),
        "verdict/tie": float(verdicts.get(Verdict.TIE, 0)),
        "parse_failures": float(statuses.get(Status.PARSE_FAILURE, 0)),
        "truncations": float(statuses.get(Status.TRUNCATED, 0)),
        "backend_errors": float(statuses.get(Status.BACKEND_ERROR, 0)),
        "position_inconsistency": (sum(not c for c in swapped) / len(swapped)) if swapped else math.nan,
        "judge_tokens_mean": (sum(jd.generated_tokens for jd in runs) / len(runs)) if runs else math.nan,
    }
