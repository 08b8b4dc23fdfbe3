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
gets the server's ``failed_reward`` and a non-ok status. A valid response with no valid one to compare with (every
other response malformed) gets the neutral reward, as a request of one response does. Each
``comparison_results`` row also carries NeMo's ``ranking`` on its 1–6 scale (below its midpoint 3.5: response_1 is
better), here ``1 + 5 · (1 − score_1)`` (``null`` for a failed comparison).

Like NeMo Gym (``resources_servers/genrm_compare/app.py`` and ``utils.py``, read at commits 0033425 and
0880a8d; the package is not on PyPI, so its ``GenRMCompareRequest`` / ``GenRMCompareResponse`` models are
re-declared in the tests from that source): a request with fewer than two responses is answered without any
comparison — ``comparison_results`` and ``metrics`` null — and a neutral reward, NeMo's ``default_score``;
brrm's neutral value on its [0, 1] win-rate scale is :data:`NEUTRAL_REWARD`. A response object whose
``output`` is not a list is, for NeMo, the text "None"; brrm instead judges it as that one response's failure
(``invalid_input``), leaves its pairs unjudged, and the other responses keep their comparisons.

Unlike NeMo Gym, the pairs are made over the group's canonical order (:mod:`brrm.service.order`), not the
request's, so who meets whom and who is shown first never depend on the order of ``response_objs``; identical
responses get identical rewards.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, ScalarReward, Status, Verdict
from brrm.types.jsonvalue import JSONDict

NEUTRAL_REWARD = 0.5
"""The reward of a lone response (nothing to compare with): an expected win rate of one half."""

RANKING_LOW, RANKING_HIGH = 1.0, 6.0
"""NeMo Gym GenRM's ranking scale (``utils.RANKING_MIDPOINT`` = 3.5 between response_1 and response_2 better)."""


def output_texts(response_objs: Sequence[object]) -> tuple[list[str], dict[int, str]]:
    """(each response's final output text, {index: reason} for the malformed ones, whose text is "").

    Never raises: one malformed rollout is that response's failure, not the group's.
    """
    texts, bad = [], {}
    for k, obj in enumerate(response_objs):
        try:
            texts.append(output_text(obj))
        except ConfigError as exc:
            texts.append("")
            bad[k] = f"response_objs[{k}]: {exc}"
    return texts, bad


def output_text(response_obj: object) -> str:
    """The final output text of a Responses API object: its ``message`` items' ``output_text`` parts joined.

    Raises:
        ConfigError: when the object has no ``output`` list.
    """
    output = response_obj.get("output") if isinstance(response_obj, dict) else None
    if not isinstance(output, list):
        raise ConfigError("each response_objs entry must be a Responses API object with an 'output' list")
    parts = []
    for item in output:
        if isinstance(item, dict) and item.get("type", "message") == "message":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [c["text"] for c in content if isinstance(c, dict) and c.get("type") == "output_text"
                          and isinstance(c.get("text"), str)]
    return "".join(parts)


def history_messages(history: Sequence[object]) -> list[dict[str, str]]:
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


def judged_pairs(pairs: Sequence[tuple[int, int]], bad: Mapping[int, str]) -> list[tuple[int, int]]:
    """The pairs that can be judged: those with no malformed response."""
    return [(i, j) for i, j in pairs if i not in bad and j not in bad]


def aggregate(n: int, pairs: Sequence[tuple[int, int]], judgments: Sequence[PairwiseJudgment],
              malformed: Mapping[int, str] | None = None,
              pool: Callable[[list[ScalarReward]], list[ScalarReward]] | None = None,
              ) -> tuple[list[ScalarReward], list[JSONDict] | None, dict[str, float] | None]:
    """(per-response rewards, ``comparison_results``, ``metrics``) from the judgments of ``pairs``.

    Args:
        n: responses in the request.
        pairs: the judged pairs (see :func:`judged_pairs`), one per judgment.
        judgments: their judgments.
        malformed: {index: reason} of malformed responses (their reward fails with ``invalid_input``).
        pool: applied to the n >= 2 rewards before the metrics (the route's
            :meth:`~brrm.service.order.CanonicalGroup.pool`: identical responses, identical rewards).

    Returns:
        With n < 2, NeMo Gym's answer: :data:`NEUTRAL_REWARD` (its status ``invalid_input`` says why) and
        ``None`` for both ``comparison_results`` and ``metrics``.

    Raises:
        ValueError: when ``pairs`` and ``judgments`` differ in length.
    """
    malformed = malformed or {}
    if n < 2:
        reason = "one response has nothing to compare with (neutral reward, as NeMo Gym's default_score)"
        return [ScalarReward(NEUTRAL_REWARD, Status.OK, reason=reason, id="0")], None, None
    total, games = [0.0] * n, [0] * n
    first_failure: list[PairwiseJudgment | None] = [None] * n
    results = []
    for (i, j), jd in zip(pairs, judgments, strict=True):
        row: JSONDict = {"response_i": i, "response_j": j, "judge_idx": 0, "winner": jd.winner.value,
                               "status": jd.status.value, "reason": jd.reason, "score_1": None, "score_2": None,
                               "ranking": None, "p_a": None if math.isnan(jd.p_a) else jd.p_a,
                               "consistent": jd.consistent}
        if jd.ok:
            p = _credit(jd)
            row["score_1"], row["score_2"] = p, 1.0 - p
            row["ranking"] = RANKING_LOW + (RANKING_HIGH - RANKING_LOW) * (1.0 - p)
            for k, value in ((i, p), (j, 1.0 - p)):
                total[k] += value
                games[k] += 1
        else:
            for k in (i, j):
                first_failure[k] = first_failure[k] or jd
        results.append(row)
    rewards = [_reward(k, total[k], games[k], first_failure[k], malformed) for k in range(n)]
    if pool is not None:
        rewards = pool(rewards)
    return rewards, results, _metrics(judgments, rewards)


def _reward(k: int, total: float, games: int, first_failure: PairwiseJudgment | None,
            malformed: Mapping[int, str]) -> ScalarReward:
    """Response ``k``'s reward: its mean credit over its ``games`` ok comparisons (``total`` credit); failed
    ``invalid_input`` when malformed, with the first failed comparison's status when none was ok, and the neutral
    reward when it was never compared (every other response malformed)."""
    if k in malformed:
        return ScalarReward.failed(Status.INVALID_INPUT, malformed[k], id=str(k))
    if games:
        return ScalarReward(total / games, Status.OK, id=str(k))
    if first_failure is None:  # never compared: every other response is malformed
        reason = (f"no other valid response to compare response {k} with (responses {sorted(malformed)} are "
                  "malformed): the neutral reward, as NeMo Gym's default_score for one response")
        return ScalarReward(NEUTRAL_REWARD, Status.OK, reason=reason, id=str(k))
    return ScalarReward.failed(first_failure.status, f"no ok comparison for response {k}: {first_failure.reason}",
                               id=str(k))


def _metrics(judgments: Sequence[PairwiseJudgment], rewards: Sequence[ScalarReward]) -> dict[str, float]:
    """The request's ``metrics``: comparisons made and failed, the tie and position-inconsistency rates of the ok
    ones, and the mean and (population) standard deviation of the ok rewards when there are any."""
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
    return metrics
