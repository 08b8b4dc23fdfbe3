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

from brrm.service.items import GroupItem, PairItem, RankCall, ScoreCall, ScoreItem
from brrm.service.run import run
from brrm.types import Conversation, GroupResult, PairwiseJudgment, RewardJudge, ScalarReward, Verdict
from brrm.types.jsonvalue import JSONDict, JSONValue

Progress = Callable[[float], None] | None
Record = Mapping[str, JSONValue]
"""A normalized audit record (:func:`brrm.audit.plan.normalize`: plain JSON)."""
ResultDict = JSONDict
"""A result's ``to_dict()``."""


def judge_records(judge: RewardJudge, shape: str, records: Sequence[Record], *, strategy: str | None = None,
                  progress: Progress = None,
                  on_result: Callable[[int, ResultDict], None] | None = None) -> list[ResultDict]:
    """Judge normalized records of one shape; one result dict per record, in order (through
    :func:`brrm.service.run.run`).

    Args:
        judge: a :class:`~brrm.RewardJudge`.
        shape: ``pairs``, ``single`` or ``groups``.
        records: normalized records of that shape.
        strategy: the resolved group strategy (groups only).
        progress: called with finished items (fractions of an item as judgments finish).
        on_result: called with ``(index, result dict)`` as soon as a pair or single item is final, for a judge
            that reports results early (the others' come back with the call, as do groups').

    Raises:
        ConfigError: from the judge, when an option cannot apply to these records (checked before model calls).
    """
    if not records:
        return []
    convs = [Conversation.coerce(r["conversation"], where=f"record {r['id']!r} conversation") for r in records]
    ids = [str(r["id"]) for r in records]

    def report(i: int, result: PairwiseJudgment | ScalarReward | GroupResult) -> None:
        if on_result is not None:
            on_result(i, result.to_dict())

    hook = report if on_result is not None else None
    if shape == "pairs":
        pairs = [PairItem(c, str(r["response_a"]), str(r["response_b"]), id=i, label=Verdict(str(r["label"])))
                 for c, r, i in zip(convs, records, ids, strict=True)]
        return [j.to_dict() for j in run(judge, pairs, progress=progress, on_result=hook, returned=False)]
    if shape == "single":
        takes = bool(judge.info.takes_principle)
        items = [ScoreItem(c, str(r["response"]), _text(r.get("principle")) if takes else None, id=i)
                 for c, r, i in zip(convs, records, ids, strict=True)]
        call = ScoreCall(principles=takes)
        return [x.to_dict() for x in run(judge, items, call=call, progress=progress, on_result=hook,
                                         returned=False)]
    if shape == "groups":
        with_ref = strategy == "reference"
        groups = [GroupItem(c, tuple(str(x) for x in _list(r["responses"])),
                            _text(r.get("reference")) if with_ref else None) for c, r in zip(convs, records,
                                                                                             strict=True)]
        # progress units of a group: pairwise judgments (BR-RM) or scored responses (scalar models)
        cost = sum(judge.cost("group", len(g.responses), strategy="reference" if with_ref else strategy or "auto")
                   for g in groups)
        scale = len(records) / cost if cost else 0.0
        ranked = run(judge, groups, call=RankCall(strategy or "auto", reference=with_ref),
                     progress=(lambda x: progress(x * scale)) if progress and scale else None)
        return [g.to_dict() for g in ranked]
    raise ValueError(f"unknown shape {shape!r}")


def _text(value: JSONValue) -> str | None:
    return None if value is None else str(value)


def _list(value: JSONValue) -> list[JSONValue]:
    if not isinstance(value, list):
        raise ValueError(f"a normalized group record's responses are a list, got {type(value).__name__}")
    return value


def resolve_strategy(strategy: str, *, kind: str, shape: str) -> str | None:
    """The concrete group strategy (``auto`` resolved for the judge kind); None for other shapes.

    Raises:
        ConfigError: on an unknown strategy, or ``scores`` for a BR-RM judge.
    """
    from brrm.types.protocols import kind_trait
    from brrm.types.strategies import check_strategy

    if shape != "groups":
        return None
    return check_strategy(strategy, pairwise=kind_trait(kind, "pairwise") is True,
                          has_reference=strategy == "reference")
