"""NeMo Gym ``genrm_compare``'s ``/compare`` contract over any brrm judge.

Request and response follow ``resources_servers/genrm_compare/app.py`` of NVIDIA-NeMo/Gym
(``GenRMCompareRequest``: ``conversation_history``, ``response_objs`` — Responses API objects — and an optional
``principle``; ``GenRMCompareResponse``: ``rewards`` in input order, ``comparison_results``, ``metrics``). Pairs are
made by its two strategies (``utils.generate_comparison_pairs``): ``circular`` — ``(i, i+1 mod N)``, N pairs — and
``all_pairs`` — every ``i < j`` once. As there, only each response's final output text is judged (its
``message`` items' ``output_text`` parts; reasoning items are left out).

What differs, on purpose: brrm's judges give verdicts, not GenRM's 1–5 helpfulness scores, so each response's
reward is its expected win rate over its judged pairs — the mean of P(it beats the other) (a measured P(A ≻ B)
when the judge reports one, else 1 / 0.5 / 0 for a win / tie / loss) — in [0, 1]. ``score_1`` / ``score_2`` in
``comparison_results`` are those per-pair credits. A comparison that failed never counts as a score (NeMo Gym
substitutes ``default_score``): it is marked with its status and reason, and a response with no ok comparison
gets the server's ``failed_reward`` and a non-ok status.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, ScalarReward, Status, Verdict


def output_text(response_obj: Any) -> str:
    """The final output text of a Responses API object: its ``message`` items' ``output_text`` parts joined.

    Raises:
        ConfigError: when the object has no ``output`` list.
    """
    if not isinstance(response_obj, dict) or not isinstance(response_obj.get("output"), list):
        raise ConfigError("each response_objs entry must be a Responses API object with an 'output' list")
    parts = []
    for item in response_obj["output"]:
        if isinstance(item, dict) and item.get("type", "message") == "message":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [c["text"] for c in content if isinstance(c, dict) and c.get("type") == "output_text"
                          and isinstance(c.get("text"), str)]
    return "".join(parts)


def history_messages(history: Sequence[Any]) -> list[dict[str, str]]:
    """``conversation_history`` as ``{"role", "content"}`` messages (list contents joined from their text parts).

    Raises:
        ConfigError: naming the entry that is not a message.
    """
    out = []
    for k, m in enumerate(history):
        if not isinstance(m, dict) or "role" not in m:
            raise ConfigError(f"conversation_history[{k}] must be an object with 'role' and 'content'")
        content = m.get("content", "")
        if isinstance(content, list):
            content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
        if not isinstance(content, str):
            raise ConfigError(f"conversation_history[{k}].content must be a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return out


def comparison_pairs(strategy: str, n: int) -> list[tuple[int, int]]:
    """NeMo Gym's pairs: ``circular`` ``[(i, (i+1) % n)]`` or ``all_pairs`` ``[(i, j) for i < j]``; [] for n < 2.

    Raises:
        ConfigError: on another strategy.
    """
    if strategy not in ("circular", "all_pairs"):
        raise ConfigError(f"strategy {strategy!r} is not valid; expected circular or all_pairs")
    if n < 2:
        return []
    if strategy == "all_pairs":
        return list(itertools.combinations(range(n), 2))
    return [(i, (i + 1) % n) for i in range(n)]


def _credit(jd: PairwiseJudgment) -> float:
    """P(A wins) of an ok judgment: its measured p_a, else 1 / 0.5 / 0."""
    if math.isfinite(jd.p_a):
        return jd.p_a
    return {Verdict.A: 1.0, Verdict.TIE: 0.5, Verdict.B: 0.0}[jd.winner]


def aggregate(n: int, pairs: Sequence[tuple[int, int]], judgments: Sequence[PairwiseJudgment]
              ) -> tuple[list[ScalarReward], list[dict[str, Any]], dict[str, float]]:
    """(per-response rewards, ``comparison_results``, ``metrics``) from the judgments of ``pairs``.

    Raises:
        ValueError: when ``pairs`` and ``judgments`` differ in length.
    """
    total, games = [0.0] * n, [0] * n
    first_failure: list[PairwiseJudgment | None] = [None] * n
    results = []
    for (i, j), jd in zip(pairs, judgments, strict=True):
        row: dict[str, Any] = {"response_i": i, "response_j": j, "judge_idx": 0, "winner": jd.winner.value,
                               "status": jd.status.value, "reason": jd.reason, "score_1": None, "score_2": None,
                               "p_a": None if math.isnan(jd.p_a) else jd.p_a, "consistent": jd.consistent}
        if jd.ok:
            p = _credit(jd)
            row["score_1"], row["score_2"] = p, 1.0 - p
            for k, value in ((i, p), (j, 1.0 - p)):
                total[k] += value
                games[k] += 1
        else:
            for k in (i, j):
                first_failure[k] = first_failure[k] or jd
        results.append(row)
    rewards = []
    for k in range(n):
        if games[k]:
            rewards.append(ScalarReward(total[k] / games[k], Status.OK, id=str(k)))
        elif n < 2:
            rewards.append(ScalarReward.failed(Status.INVALID_INPUT, "one response has nothing to compare with",
                                               id=str(k)))
        else:
            bad = first_failure[k]
            status, why = (bad.status, bad.reason) if bad else (Status.BACKEND_ERROR, "no comparison")
            rewards.append(ScalarReward.failed(status, f"no ok comparison for response {k}: {why}", id=str(k)))
    ok = [jd for jd in judgments if jd.ok]
    swapped = [jd for jd in ok if jd.consistent is not None]
    metrics = {"n_comparisons": float(len(judgments)), "failed_comparisons": float(len(judgments) - len(ok)),
               "tie_rate": sum(jd.winner is Verdict.TIE for jd in ok) / len(ok) if ok else 0.0,
               "position_inconsistency_rate": (sum(not jd.consistent for jd in swapped) / len(swapped)
                                               if swapped else 0.0)}
    values = [r.reward for r in rewards if r.ok]
    if values:
        mean = sum(values) / len(values)
        metrics["mean_reward"] = mean
        metrics["std_reward"] = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return rewards, results, metrics
