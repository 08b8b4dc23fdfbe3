"""Aggregates over results. Only ``ok`` results enter averages; every other status is counted apart."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.types.results import PairwiseJudgment, ScalarReward, Status, Verdict


@dataclass(frozen=True)
class JudgmentSummary:
    """Counts over a batch of judgments. Only ``ok`` results with a label enter ``accuracy``."""

    total: int
    by_status: Mapping[str, int]
    by_winner: Mapping[str, int]
    labelled: int
    correct: int
    swapped: int
    consistent: int
    order_credit: float = 0.0
    order_labelled: int = 0

    @property
    def order_averaged_accuracy(self) -> float:
        """Swap-debiased pairs scored per order, as LLMBar's ``correct_average``: each labelled pair earns
        (forward correct + reversed correct) / 2, a failed order earning 0; NaN when there are none."""
        return self.order_credit / self.order_labelled if self.order_labelled else math.nan

    @property
    def accuracy(self) -> float:
        """Correct / labelled-and-ok; NaN when nothing was labelled and ok."""
        return self.correct / self.labelled if self.labelled else math.nan

    @property
    def consistency_rate(self) -> float:
        """Fraction of swap-debiased ok judgments whose two orders agreed; NaN when none."""
        return self.consistent / self.swapped if self.swapped else math.nan

    def to_dict(self) -> dict[str, object]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "total": self.total,
            "by_status": dict(self.by_status),
            "by_winner": dict(self.by_winner),
            "labelled_ok": self.labelled,
            "correct": self.correct,
            "accuracy": num(self.accuracy),
            "swapped_ok": self.swapped,
            "consistency_rate": num(self.consistency_rate),
            "order_averaged_accuracy": num(self.order_averaged_accuracy),
        }


def logprob_semantics(results: Iterable[PairwiseJudgment | ScalarReward]) -> dict[str, int]:
    """How many ``ok`` results (swap orders' sub-judgments included) record each logprob semantics
    (``provenance.logprob_semantics``; results without a provenance are not counted)."""
    counts: dict[str, int] = {}
    stack: list[PairwiseJudgment | ScalarReward] = list(results)
    while stack:
        r = stack.pop()
        if isinstance(r, PairwiseJudgment):
            stack.extend(r.sub_judgments)
        if r.ok and r.provenance is not None:
            counts[r.provenance.logprob_semantics] = counts.get(r.provenance.logprob_semantics, 0) + 1
    return counts


def check_logprob_semantics(counts: Mapping[str, int], where: str) -> None:
    """Refuse an aggregate that mixes results of ``unknown`` logprob semantics with known ones.

    Args:
        counts: results per semantics (:func:`logprob_semantics`, or counted from stored rows).
        where: what is being aggregated, for the message (e.g. ``"the bench report"``).

    Raises:
        ConfigError: when ``unknown`` and a known semantics both have results, naming both counts.
    """
    known = {k: v for k, v in counts.items() if k != "unknown" and v}
    if counts.get("unknown") and known:
        raise ConfigError(
            f"{where} mixes {counts['unknown']} results of unknown logprob semantics (an OpenAI-compatible "
            f"server whose --logprobs-mode was not declared) with " + ", ".join(f"{v} {k}" for k, v in known.items())
            + " ones; their probabilities may not mean the same: aggregate them apart, or rerun with the "
            "server's logprobs_mode declared (--logprobs-mode)")


def summarize(judgments: Iterable[PairwiseJudgment]) -> JudgmentSummary:
    """Aggregate judgments by status and winner; non-ok results never count as verdicts.

    Raises:
        ConfigError: when the judgments mix unknown and known logprob semantics (:func:`check_logprob_semantics`).
    """
    judgments = list(judgments)
    check_logprob_semantics(logprob_semantics(judgments), "the summary")
    by_status = {s.value: 0 for s in Status}
    by_winner = {v.value: 0 for v in (Verdict.A, Verdict.B, Verdict.TIE)}
    total = labelled = correct = swapped = consistent = order_labelled = 0
    order_credit = 0.0
    for j in judgments:
        total += 1
        by_status[j.status.value] += 1
        if j.swapped and j.label is not Verdict.NONE:
            order_labelled += 1
            order_credit += sum(s.ok and s.winner is j.label for s in j.sub_judgments) / len(j.sub_judgments)
        if not j.ok:
            continue
        by_winner[j.winner.value] += 1
        if j.correct is not None:
            labelled += 1
            correct += int(j.correct)
        if j.consistent is not None:
            swapped += 1
            consistent += int(j.consistent)
    return JudgmentSummary(total, by_status, by_winner, labelled, correct, swapped, consistent, order_credit,
                           order_labelled)


def summarize_rewards(results: Sequence[ScalarReward]) -> dict[str, Any]:
    """Counts by status, truncations, and the mean / min / max of ok rewards (failed ones never enter them).

    ``truncated`` counts every result whose input lost tokens, ``ok`` ones included (a prompt-side cut of
    an over-long conversation still gives a reward, but the summary says it happened).

    Raises:
        ConfigError: when the rewards mix unknown and known logprob semantics (:func:`check_logprob_semantics`).
    """
    check_logprob_semantics(logprob_semantics(results), "the summary")
    by_status = {s.value: 0 for s in Status if s is not Status.PARSE_FAILURE}
    for r in results:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    values = [r.reward for r in results if r.ok]
    stats = {"mean": sum(values) / len(values), "min": min(values), "max": max(values)} if values else {}
    return {
        "total": len(results),
        "by_status": by_status,
        "scored": len(values),
        "truncated": sum(r.truncated or r.status is Status.TRUNCATED for r in results),
        "reward": {k: round(v, 6) for k, v in stats.items() if math.isfinite(v)},
        "invalid_lines": [r.reason.split(":", 1)[0] for r in results if r.status is Status.INVALID_INPUT][:20],
    }
