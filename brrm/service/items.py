"""The typed jobs every surface hands to a judge: one pair, one scalar item, one group — and the call that runs a
batch of them (:class:`PairsCall`, :class:`ScoreCall`, :class:`RankCall`: the method and every option that must
be equal across the items sharing one judge call, so a value the scheduler coalesces on).

:func:`brrm.service.run.run` runs a list of jobs on a :class:`~brrm.RewardJudge`; the server's scheduler keys its
queue on the call values; :class:`Variants` holds the per-request variants of a served judge
(:meth:`~brrm.RewardJudge.with_options`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from brrm.errors import ConfigError
from brrm.types import ConversationLike, GroupResult, PairwiseJudgment, RewardJudge, ScalarReward, Status, Verdict
from brrm.types.jsonvalue import JSONScalar


@dataclass(frozen=True)
class PairItem:
    """One pair for ``judge_pairs``: ``response_a`` is shown first; ``label`` the known answer (``Verdict.NONE``:
    none); ``principle`` None: the judge's default."""

    conversation: ConversationLike
    response_a: str
    response_b: str
    id: str = ""
    label: Verdict = Verdict.NONE
    principle: str | None = None


@dataclass(frozen=True)
class ScoreItem:
    """One response for ``score`` (``principle`` / ``reference`` None when not given)."""

    conversation: ConversationLike
    response: str
    principle: str | None = None
    reference: str | None = None
    id: str = ""


@dataclass(frozen=True)
class GroupItem:
    """One group of responses to one conversation for ``rank_groups`` (``reference`` for the ``reference``
    strategy)."""

    conversation: ConversationLike
    responses: tuple[str, ...]
    reference: str | None = None


Item = PairItem | ScoreItem | GroupItem
"""A job: one pair, one scalar item or one group."""


@dataclass(frozen=True)
class CallOptions:
    """One request's own settings for the served judge: the options marked per-request
    (:func:`brrm.load_options.request_options`: ``max_new_tokens``, ``max_total_tokens``, ``seed``, ``decoding``),
    each within the server's own. Hashable: a coalescing key part (calls with equal options share a judge call).

    Attributes:
        values: ``(keyword, value)`` pairs, sorted, without unset ones.
    """

    values: tuple[tuple[str, JSONScalar], ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, JSONScalar | None]) -> CallOptions:
        """The options ``values`` sets (None: unset).

        Raises:
            ConfigError: on a keyword that is not a per-request option, naming the valid ones.
        """
        from brrm.load_options import request_options

        names = [o.keyword for o in request_options()]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(f"options.{unknown[0]} is not a per-request option; valid: {', '.join(names)}")
        return cls(tuple(sorted((k, v) for k, v in values.items() if v is not None)))

    def get(self, keyword: str) -> JSONScalar | None:
        """The value set for ``keyword`` (None: unset)."""
        return dict(self.values).get(keyword)

    def __bool__(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True)
class PairsCall:
    """A ``judge_pairs`` call: ``swap`` (None: the judge's own setting), whether the items' principles are passed,
    and the judge variant's options (None: the judge itself)."""

    swap: bool | None = None
    principles: bool = False
    options: CallOptions | None = None


@dataclass(frozen=True)
class ScoreCall:
    """A ``score`` call: whether the items' references and principles are passed."""

    references: bool = False
    principles: bool = False


@dataclass(frozen=True)
class RankCall:
    """A ``rank_groups`` call: the group ``strategy``, ``swap``, whether the items' references are passed, and the
    judge variant's options."""

    strategy: str = "auto"
    swap: bool | None = None
    reference: bool = False
    options: CallOptions | None = None


Call = PairsCall | ScoreCall | RankCall
"""One judge call's method and shared options (the scheduler's coalescing key)."""


def pairs_key(swap: bool | None, principles: bool = False, options: CallOptions | None = None) -> PairsCall:
    """Key of ``judge_pairs`` calls (``swap=None``: the judge's own setting), with or without principles."""
    return PairsCall(swap, principles, options or None)


def failed_result(key: object, item: object, status: Status, reason: str
                  ) -> PairwiseJudgment | ScalarReward | GroupResult:
    """The typed failed result of one item of a ``key`` call (the scheduler's ``failed`` factory): a
    :class:`PairwiseJudgment`, :class:`ScalarReward` or :class:`GroupResult` (every reward failed) with ``status``
    and ``reason``, keeping the item's id and label.

    Raises:
        ConfigError: on an unknown key, or an item that is not the key's kind (a programming error).
    """
    if isinstance(key, PairsCall) and isinstance(item, PairItem):
        return PairwiseJudgment(Verdict.NONE, status, reason, id=item.id, label=item.label, attempts=0)
    if isinstance(key, ScoreCall) and isinstance(item, ScoreItem):
        return ScalarReward.failed(status, reason, id=item.id)
    if isinstance(key, RankCall) and isinstance(item, GroupItem):
        n = len(item.responses)
        zeros = tuple((0,) * n for _ in range(n))
        return GroupResult(key.strategy, tuple(ScalarReward.failed(status, reason) for _ in range(n)), (0.0, 1.0),
                           zeros, zeros, 0, 0, 0, ())
    raise ConfigError(f"unknown judge call {key!r} for item {type(item).__name__}")


class Variants:
    """The served judge and its per-request variants (``judge.with_options``: the same backend, other decoding
    settings), built once each.

    Args:
        judge: the served judge.

    Raises (from :meth:`get`):
        ConfigError: when the judge cannot vary an option (:meth:`~brrm.RewardJudge.with_options`), or a budget
            exceeds the server's.
    """

    def __init__(self, judge: RewardJudge) -> None:
        self.judge = judge
        self._made: dict[CallOptions, RewardJudge] = {}
        self._lock = threading.Lock()

    def get(self, options: CallOptions | None) -> RewardJudge:
        """The judge with ``options`` applied (the judge itself for None or empty options)."""
        if not options:
            return self.judge
        with self._lock:
            if options not in self._made:
                self._made[options] = self._build(options)
            return self._made[options]

    def _build(self, options: CallOptions) -> RewardJudge:
        from brrm.load_options import request_options

        for option in request_options():
            value, limit = options.get(option.keyword), option.current(self.judge.info)
            if option.mark.bounded and isinstance(value, int) and isinstance(limit, int) and value > limit:
                raise ConfigError(f"options.{option.keyword} {value} exceeds the server's limit of {limit}")
        try:
            return self.judge.with_options(**dict(options.values))
        except ConfigError as exc:
            raise ConfigError(f"options: {exc} (this server's judge is {self.judge.info.describe()}; per-request "
                              "options (decoding, budgets, seed) are for BR-RM judges and the generative principle "
                              "models)") from None
