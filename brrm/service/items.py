"""The typed jobs every surface hands to a judge: one pair, one scalar item, one group — and the call that runs a
batch of them (:class:`PairsCall`, :class:`ScoreCall`, :class:`RankCall`: the method and every option that must
be equal across the items sharing one judge call, so a value the scheduler coalesces on).

:func:`brrm.service.run.run` runs a list of jobs on a :class:`~brrm.RewardJudge`; the server's scheduler keys its
queue on the call values; :class:`Variants` holds the per-request variants of a served judge
(:meth:`~brrm.RewardJudge.with_options`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from brrm.errors import ConfigError
from brrm.types import ConversationLike, GroupResult, PairwiseJudgment, RewardJudge, ScalarReward, Status, Verdict


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
    """Per-request decoding settings of a BR-RM judge, each within the server's own (None: the server's).

    Attributes:
        max_new_tokens: tokens per turn, 1 <= value <= the server's.
        max_total_tokens: tokens per sequence, 1 <= value <= the server's.
        decoding: ``constrained`` or ``faithful``.
        seed: base seed, >= 0.
    """

    max_new_tokens: int | None = None
    max_total_tokens: int | None = None
    decoding: str | None = None
    seed: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.max_new_tokens, self.max_total_tokens, self.decoding, self.seed))


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


def score_key(references: bool, principles: bool) -> ScoreCall:
    """Key of ``score`` calls, with or without per-item references / principles."""
    return ScoreCall(references, principles)


def rank_key(strategy: str, swap: bool | None, reference: bool, options: CallOptions | None = None) -> RankCall:
    """Key of ``rank_groups`` calls."""
    return RankCall(strategy, swap, reference, options or None)


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
        sampling = self.judge.info.sampling
        limits = (sampling.max_new_tokens_per_turn, sampling.max_total_tokens) if sampling is not None else (None, None)
        for name, value, limit in (("max_new_tokens", options.max_new_tokens, limits[0]),
                                   ("max_total_tokens", options.max_total_tokens, limits[1])):
            if value is not None and limit is not None and value > limit:
                raise ConfigError(f"options.{name} {value} exceeds the server's limit of {limit}")
        overrides = {k: v for k, v in (("max_new_tokens", options.max_new_tokens),
                                       ("max_total_tokens", options.max_total_tokens),
                                       ("decoding", options.decoding), ("seed", options.seed)) if v is not None}
        try:
            return self.judge.with_options(**overrides)
        except ConfigError as exc:
            raise ConfigError(f"options (decoding, budgets, seed) can be set per request only for BR-RM judges (and "
                              f"the generative principle models); this server's judge is {self.judge.info.describe()}"
                              f" ({exc})") from None
