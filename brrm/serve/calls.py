"""The judge calls a coalesced batch runs: one :class:`~brrm.RewardJudge` method per job key.

A key names the method and every option that must be equal across the requests sharing one call (``swap``,
strategy, whether references or principles are given); the items are small frozen values, one per pair,
scored response or group. :func:`make_runner` turns a judge into the scheduler's runner.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.types import Conversation, RewardJudge, Verdict


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


def pairs_key(swap: bool | None, principles: bool = False) -> tuple[Hashable, ...]:
    """Key of ``judge_pairs`` calls (``swap=None``: the judge's own setting), with or without principles."""
    return ("pairs", swap, principles)


def score_key(references: bool, principles: bool) -> tuple[Hashable, ...]:
    """Key of ``score`` calls, with or without per-item references / principles."""
    return ("score", references, principles)


def rank_key(strategy: str, swap: bool | None, reference: bool) -> tuple[Hashable, ...]:
    """Key of ``rank_groups`` calls."""
    return ("rank", strategy, swap, reference)


def make_runner(judge: RewardJudge) -> Callable[[Hashable, list[Any], Callable[[float], None]], Sequence[Any]]:
    """The scheduler's runner over ``judge``: ``runner(key, items, progress)`` makes the one call the key names.

    Raises (from the runner):
        ConfigError: on an unknown key, or what the judge raises for the items.
    """

    def run(key: Hashable, items: list[Any], progress: Callable[[float], None]) -> Sequence[Any]:
        parts: tuple[Any, ...] = key if isinstance(key, tuple) else (key,)
        kind = parts[0]
        if kind == "pairs":
            return judge.judge_pairs([i.conversation for i in items], [i.response_a for i in items],
                                     [i.response_b for i in items], swap=parts[1], ids=[i.id for i in items],
                                     labels=[i.label for i in items],
                                     principles=[i.principle for i in items] if parts[2] else None,
                                     progress=progress)  # type: ignore[call-arg]
        if kind == "score":
            _, refs, principles = parts
            return judge.score([i.conversation for i in items], [i.response for i in items],
                               references=[i.reference for i in items] if refs else None,
                               principles=[i.principle for i in items] if principles else None,
                               ids=[i.id for i in items], progress=progress)  # type: ignore[call-arg]
        if kind == "rank":
            _, strategy, swap, reference = parts
            return judge.rank_groups([i.conversation for i in items], [list(i.responses) for i in items],
                                     strategy=strategy, swap=swap,
                                     references=[i.reference for i in items] if reference else None,
                                     progress=progress)  # type: ignore[call-arg]
        raise ConfigError(f"unknown judge call {key!r}")

    return run
