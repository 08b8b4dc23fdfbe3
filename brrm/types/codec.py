"""Typed results back from their stored JSON: the inverse of each result's ``to_dict()``.

The audit store and a remote judge (:class:`brrm.service.RemoteJudge`) keep or receive each result as the JSON its
``to_dict()`` wrote; they read them back as
:class:`~brrm.types.PairwiseJudgment`, :class:`~brrm.types.ScalarReward` and :class:`~brrm.types.GroupResult`
so every aggregate goes through :func:`brrm.summarize` / :func:`brrm.summarize_rewards` (only ``ok`` results
enter averages; ``null`` numbers come back as NaN with their status). ``from_dict(x.to_dict()).to_dict() ==
x.to_dict()`` for every result (a test checks it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from brrm.types.cascade import CascadeDecision, CascadeRule, CascadeStage, CascadeWhy
from brrm.types.config import SamplingConfig
from brrm.types.results import GroupResult, PairwiseJudgment, Provenance, ScalarReward, Status, Verdict
from brrm.types.usage import turns_from_dict


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def provenance_from_dict(d: Mapping[str, Any] | None) -> Provenance | None:
    """A :class:`Provenance` from its dict (None stays None)."""
    if d is None:
        return None
    return Provenance(model=d["model"], backend=d["backend"], template_hash=d["template_hash"],
                      sampling=SamplingConfig.from_record(d["sampling"]), seed=d["seed"], decoding=d["decoding"],
                      policies=dict(d["policies"]), calibration=d.get("calibration", ""),
                      fingerprint=d.get("fingerprint", ""),
                      logprob_semantics=stored_semantics(d), seeded=stored_seeded(d))


def stored_seeded(d: Mapping[str, Any]) -> bool:
    """Whether a stored provenance dict's backend honoured its seed (``Provenance.seeded``). One written before it
    was recorded has none: False for an OpenAI-compatible server (it was sent the seed and may have ignored it) and
    for a replayed score, else True (the transformers, vLLM and fake backends seeded every item then as now)."""
    value = d.get("seeded")
    if isinstance(value, bool):
        return value
    return d.get("backend") not in ("openai", "replay")


def stored_semantics(d: Mapping[str, Any] | None) -> str:
    """The logprob semantics of a stored provenance dict (``None``: ``raw``, a replayed score). One written
    before they were recorded has none: ``unknown`` for an OpenAI-compatible server (its verdict step was sent
    at the judge's temperature), else ``raw``."""
    if not d:
        return "raw"
    value = d.get("logprob_semantics")
    if isinstance(value, str):
        return value
    return "unknown" if d.get("backend") == "openai" else "raw"


def judgment_from_dict(d: Mapping[str, Any]) -> PairwiseJudgment:
    """A :class:`PairwiseJudgment` from ``PairwiseJudgment.to_dict()`` output."""
    return PairwiseJudgment(
        winner=Verdict(d["winner"]), status=Status(d["status"]), reason=d["reason"],
        dimensions=tuple(d["dimensions"]), unknown_dimensions=tuple(d["unknown_dimensions"]),
        analysis_a=d["analysis_a"], analysis_b=d["analysis_b"], turn1_text=d["turn1_text"],
        turn2_text=d["turn2_text"], prompt_tokens=d["prompt_tokens"], generated_tokens=d["generated_tokens"],
        p_a=_num(d["p_a"]), p_a_raw=_num(d.get("p_a_raw")), logit_1=_num(d["logit_1"]), logit_2=_num(d["logit_2"]),
        provenance=provenance_from_dict(d["provenance"]), id=d["id"], label=Verdict(d["label"]),
        attempts=d["attempts"], sub_judgments=tuple(judgment_from_dict(s) for s in d.get("sub_judgments", ())),
        consistent=d["consistent"], samples=d.get("samples", 1), agreement=_num(d.get("agreement")),
        cascade=cascade_from_dict(d.get("cascade")), turns=turns_from_dict(d.get("turns")))


def cascade_from_dict(d: Mapping[str, Any] | None) -> CascadeDecision | None:
    """A :class:`~brrm.types.cascade.CascadeDecision` from its dict (None stays None)."""
    if d is None:
        return None
    first = d.get("first")
    return CascadeDecision(stage=CascadeStage(d["stage"]), why=CascadeWhy(d["why"]), rule=CascadeRule(d["rule"]),
                           threshold=_num(d.get("threshold")), measure=_num(d.get("measure")),
                           detail=d.get("detail", ""), first=judgment_from_dict(first) if first is not None else None)


def reward_from_dict(d: Mapping[str, Any]) -> ScalarReward:
    """A :class:`ScalarReward` from ``ScalarReward.to_dict()`` output."""
    return ScalarReward(
        reward=_num(d["reward"]), status=Status(d["status"]), reason=d["reason"], id=d["id"],
        principle=d["principle"], truncated=d["truncated"], truncated_tokens=d["truncated_tokens"],
        input_tokens=d["input_tokens"], thinking_stripped=d["thinking_stripped"], logits=tuple(d["logits"]),
        text=d["text"], provenance=provenance_from_dict(d["provenance"]), card_reward=_num(d.get("card_reward")),
        cascade=cascade_from_dict(d.get("cascade")))


def group_from_dict(d: Mapping[str, Any]) -> GroupResult:
    """A :class:`GroupResult` from ``GroupResult.to_dict()`` output."""
    low, high = d["reward_range"]
    return GroupResult(
        strategy=d["strategy"], rewards=tuple(reward_from_dict(r) for r in d["rewards"]),
        reward_range=(-math.inf if low is None else low, math.inf if high is None else high),
        wins=tuple(tuple(r) for r in d["wins"]), ties=tuple(tuple(r) for r in d["ties"]),
        n_judgments=d["n_judgments"], n_scored=d["n_scored"], failed=d["failed"], ranking=tuple(d["ranking"]),
        judgments=tuple(judgment_from_dict(j) for j in d["judgments"]), pairs=tuple((p[0], p[1]) for p in d["pairs"]))


def result_from_dict(shape: str, d: Mapping[str, Any]) -> PairwiseJudgment | ScalarReward | GroupResult:
    """The typed result of an item of ``shape`` (``pairs``, ``single`` or ``groups``)."""
    if shape == "pairs":
        return judgment_from_dict(d)
    if shape == "single":
        return reward_from_dict(d)
    return group_from_dict(d)
