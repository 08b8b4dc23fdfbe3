"""Judging a batch of audit items with any :class:`~brrm.RewardJudge`: the one code path of the local runner and
of every Ray actor, so both give the same results for the same items.

Items travel as their normalized records (:func:`brrm.audit.plan.normalize`: plain JSON), results come back as
each result's ``to_dict()``:

* ``pairs`` — :meth:`~brrm.RewardJudge.judge_pairs` (with the record's label), one
  :class:`~brrm.types.PairwiseJudgment` per item;
* ``single`` — :meth:`~brrm.RewardJudge.score`, one :class:`~brrm.types.ScalarReward` per item (principle models
  get each item's principle; other kinds none);
* ``groups`` — :meth:`~brrm.RewardJudge.rank_groups` under the audit's strategy, one
  :class:`~brrm.types.GroupResult` per item.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from brrm.types import Conversation, RewardJudge, Verdict

Progress = Callable[[float], None] | None


def judge_records(judge: RewardJudge, shape: str, records: Sequence[Mapping[str, Any]], *, strategy: str | None = None,
                  progress: Progress = None,
                  on_result: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Judge normalized records of one shape; one result dict per record, in order.

    Args:
        judge: a :class:`~brrm.RewardJudge`.
        shape: ``pairs``, ``single`` or ``groups``.
        records: normalized records of that shape.
        strategy: the resolved group strategy (groups only).
        progress: called with finished items (fractions of an item as judgments finish).
        on_result: called with ``(index, result dict)`` as soon as a pair or single item is final; passed on only
            to a judge method that takes ``on_result`` (groups, and judges written before it, report nothing
            early: their results come back with the call).

    Raises:
        ConfigError: from the judge, when an option cannot apply to these records (checked before model calls).
    """
    if not records:
        return []
    convs = [Conversation.coerce(r["conversation"], where=f"record {r['id']!r} conversation") for r in records]
    ids = [r["id"] for r in records]
    method = judge.judge_pairs if shape == "pairs" else judge.score
    extra: dict[str, Any] = {"on_result": lambda i, res: on_result(i, res.to_dict())} \
        if on_result is not None and _takes(method, "on_result") else {}
    if shape == "pairs":
        judged = judge.judge_pairs(convs, [r["response_a"] for r in records], [r["response_b"] for r in records],
                                   ids=ids, labels=[Verdict(r["label"]) for r in records], progress=progress,
                                   **extra)
        return [j.to_dict() for j in judged]
    if shape == "single":
        principles = [r["principle"] for r in records] if judge.info.takes_principle else None
        rewards = judge.score(convs, [r["response"] for r in records], principles=principles, ids=ids,
                              progress=progress, **extra)
        return [r.to_dict() for r in rewards]
    if shape == "groups":
        groups = [list(r["responses"]) for r in records]
        refs = [r["reference"] for r in records] if strategy == "reference" else None
        cost = sum(group_cost(judge, strategy or "auto", len(g), refs is not None) for g in groups)
        scale = len(records) / cost if cost else 0.0
        ranked = judge.rank_groups(convs, groups, strategy=strategy or "auto", references=refs,
                                   progress=(lambda x: progress(x * scale)) if progress and scale else None)
        return [g.to_dict() for g in ranked]
    raise ValueError(f"unknown shape {shape!r}")


def _takes(method: Any, name: str) -> bool:
    """Whether ``method`` has a keyword parameter ``name`` (or ``**kwargs``)."""
    import inspect

    params = inspect.signature(method).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def group_cost(judge: RewardJudge, strategy: str, n: int, with_reference: bool) -> int:
    """Progress units one group reports: pairwise judgments (BR-RM) or scored responses (scalar models)."""
    return judge.cost("group", n, strategy="reference" if with_reference else strategy)


def resolve_strategy(strategy: str, *, kind: str, shape: str) -> str | None:
    """The concrete group strategy (``auto`` resolved for the judge kind); None for other shapes.

    Raises:
        ConfigError: on an unknown strategy, or ``scores`` for a BR-RM judge.
    """
    from brrm.compose.strategies import check_strategy

    if shape != "groups":
        return None
    return check_strategy(strategy, pairwise=kind == "brrm", has_reference=strategy == "reference")
