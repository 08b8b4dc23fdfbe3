"""The judge calls a coalesced batch runs: one :class:`~brrm.RewardJudge` method per job key.

A key names the method and every option that must be equal across the requests sharing one call (``swap``,
strategy, whether references or principles are given); the items are small frozen values, one per pair,
scored response or group. :func:`make_runner` turns a judge into the scheduler's runner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.types import Conversation, GroupResult, PairwiseJudgment, RewardJudge, ScalarReward, Status, Verdict


@dataclass(frozen=True)
class PairItem:
    """One pair for ``judge_pairs``."""

    conversation: Conversation
    response_a: str
    response_b: str
    id: str = ""
    label: Verdict = Verdict.NONE
    principle: str | None = None


@dataclass(frozen=True)
class ScoreItem:
    """One response for ``score`` (``principle`` / ``reference`` None when not given)."""

    conversation: Conversation
    response: str
    principle: str | None = None
    reference: str | None = None
    id: str = ""


@dataclass(frozen=True)
class GroupItem:
    """One group for ``rank_groups``."""

    conversation: Conversation
    responses: tuple[str, ...]
    reference: str | None = None


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
        if not options:
            return self.judge
        with self._lock:
            if options not in self._made:
                self._made[options] = self._build(options)
            return self._made[options]

    def _build(self, options: CallOptions) -> RewardJudge:
        sampling = self.judge.info.options.get("sampling") or {}
        for name, value, limit in (("max_new_tokens", options.max_new_tokens, sampling.get("max_new_tokens_per_turn")),
                                   ("max_total_tokens", options.max_total_tokens, sampling.get("max_total_tokens"))):
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


def pairs_key(swap: bool | None, principles: bool = False, options: CallOptions | None = None) -> tuple[Hashable, ...]:
    """Key of ``judge_pairs`` calls (``swap=None``: the judge's own setting), with or without principles."""
    return ("pairs", swap, principles, options or None)


def score_key(references: bool, principles: bool) -> tuple[Hashable, ...]:
    """Key of ``score`` calls, with or without per-item references / principles."""
    return ("score", references, principles)


def rank_key(strategy: str, swap: bool | None, reference: bool,
             options: CallOptions | None = None) -> tuple[Hashable, ...]:
    """Key of ``rank_groups`` calls."""
    return ("rank", strategy, swap, reference, options or None)


def failed_result(key: Hashable, item: Any, status: Status, reason: str) -> Any:
    """The typed failed result of one item of a ``key`` call (the scheduler's ``failed`` factory): a
    :class:`PairwiseJudgment`, :class:`ScalarReward` or :class:`GroupResult` (every reward failed) with ``status``
    and ``reason``, keeping the item's id and label.

    Raises:
        ConfigError: on an unknown key.
    """
    kind = key[0] if isinstance(key, tuple) else key
    if kind == "pairs":
        return PairwiseJudgment(Verdict.NONE, status, reason, id=item.id, label=item.label, attempts=0)
    if kind == "score":
        return ScalarReward.failed(status, reason, id=item.id)
    if kind == "rank":
        n = len(item.responses)
        zeros = tuple((0,) * n for _ in range(n))
        strategy = str(key[1]) if isinstance(key, tuple) else "scores"
        return GroupResult(strategy, tuple(ScalarReward.failed(status, reason) for _ in range(n)), (0.0, 1.0), zeros,
                           zeros, 0, 0, 0, ())
    raise ConfigError(f"unknown judge call {key!r}")


def make_runner(judge: RewardJudge | Variants
                ) -> Callable[[Hashable, list[Any], Callable[[float], None]], Sequence[Any]]:
    """The scheduler's runner over ``judge``: ``runner(key, items, progress)`` makes the one call the key names
    (on the variant the key's options select).

    Raises (from the runner):
        ConfigError: on an unknown key, or what the judge raises for the items.
    """
    variants = judge if isinstance(judge, Variants) else Variants(judge)

    def run(key: Hashable, items: list[Any], progress: Callable[[float], None]) -> Sequence[Any]:
        parts: tuple[Any, ...] = key if isinstance(key, tuple) else (key,)
        kind = parts[0]
        judge = variants.get(parts[-1] if kind in ("pairs", "rank") else None)
        if kind == "pairs":
            return judge.judge_pairs([i.conversation for i in items], [i.response_a for i in items],
                                     [i.response_b for i in items], swap=parts[1], ids=[i.id for i in items],
                                     labels=[i.label for i in items],
                                     principles=[i.principle for i in items] if parts[2] else None,
                                     progress=progress)
        if kind == "score":
            _, refs, principles = parts
            return judge.score([i.conversation for i in items], [i.response for i in items],
                               references=[i.reference for i in items] if refs else None,
                               principles=[i.principle for i in items] if principles else None,
                               ids=[i.id for i in items], progress=progress)
        if kind == "rank":
            _, strategy, swap, reference, _ = parts
            return judge.rank_groups([i.conversation for i in items], [list(i.responses) for i in items],
                                     strategy=strategy, swap=swap,
                                     references=[i.reference for i in items] if reference else None,
                                     progress=progress)
        raise ConfigError(f"unknown judge call {key!r}")

    return run
