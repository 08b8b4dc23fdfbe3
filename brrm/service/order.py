"""One canonical order for a group of responses, so a group's rewards never depend on the order its members arrive in.

Circular, knockout and NeMo Gym's pairings (and who is shown first in ``all_pairs``) depend on the members'
positions, so the same four GRPO completions could score 1.0 / 0.0 in one batch order and 0.5 / 0.5 in another.
The rule, used by every surface (TRL group mode, verl cohorts, ``/v1/rank``, ``/compare``, ``brrm rank``, audits):

1. each member's key is the SHA-256 of the canonical JSON of its content (:func:`content_digest`: the response
   text, or whatever the surface judges — ``None`` for a malformed member);
2. the strategy pairs the members sorted by that key (:class:`CanonicalGroup`); two members share a key only when
   their contents are equal, so the arrangement the judge sees is the same for every permutation of the group;
3. results go back to the caller's positions, and identical members get identical rewards
   (:meth:`CanonicalGroup.pool`: the mean of the ok rewards of the copies; a failed copy keeps its failure).

The group job of :func:`brrm.service.run.run` applies it once for every ``rank_groups`` call (so a caller that
goes through :func:`~brrm.service.run.run` never sorts on its own); ``/compare`` builds its pairs over
:meth:`CanonicalGroup.caller_pairs`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from brrm.types import GroupResult, ScalarReward

T = TypeVar("T")


def content_digest(content: object) -> str:
    """SHA-256 (hex, 64 chars) of ``content``'s canonical JSON: keys sorted, no spaces, ASCII escapes (so lone
    surrogates hash too); values JSON cannot hold are written with ``str``. Equal contents, equal digests."""
    text = json.dumps(content, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class CanonicalGroup:
    """A group's canonical order and its classes of identical members.

    Attributes:
        order: ``order[c]`` = the caller's position of the member in canonical slot ``c`` (a permutation of
            ``range(n)``; members sorted by :func:`content_digest`, equal contents by caller position).
        classes: ``classes[p]`` = the canonical slot of the first member whose content equals member ``p``'s
            (members with equal contents share it).
    """

    order: tuple[int, ...]
    classes: tuple[int, ...]

    @classmethod
    def of(cls, contents: Sequence[object]) -> CanonicalGroup:
        """The canonical order of members with these ``contents`` (caller order; any JSON-able values)."""
        digests = [content_digest(c) for c in contents]
        order = tuple(sorted(range(len(digests)), key=lambda p: (digests[p], p)))
        first: dict[str, int] = {}
        for slot, p in enumerate(order):
            first.setdefault(digests[p], slot)
        return cls(order, tuple(first[d] for d in digests))

    @property
    def slots(self) -> tuple[int, ...]:
        """``slots[p]`` = the canonical slot of caller position ``p`` (the inverse of :attr:`order`)."""
        inverse = [0] * len(self.order)
        for slot, p in enumerate(self.order):
            inverse[p] = slot
        return tuple(inverse)

    def arrange(self, members: Sequence[T]) -> list[T]:
        """``members`` (caller order) in canonical order.

        Raises:
            ValueError: when ``members`` is not of the group's size.
        """
        self._check(len(members), "members")
        return [members[p] for p in self.order]

    def caller_pairs(self, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Pairs a strategy made over canonical slots, as caller positions (an index >= n, e.g. a reference,
        stays as it is)."""
        n = len(self.order)
        return [(self.order[i] if i < n else i, self.order[j] if j < n else j) for i, j in pairs]

    def pool(self, rewards: Sequence[ScalarReward]) -> list[ScalarReward]:
        """Rewards (caller order) with every ok copy of one content given the mean of the copies' ok rewards
        (unchanged where they are already equal); failed copies keep their status and reason.

        Raises:
            ValueError: when ``rewards`` is not of the group's size.
        """
        self._check(len(rewards), "rewards")
        means = self._means([r.reward if r.ok else math.nan for r in rewards])
        return [r if not r.ok or means[p] == r.reward else
                replace(r, reward=means[p], reason=_note(r.reason, self._copies(p, rewards)))
                for p, r in enumerate(rewards)]

    def pool_values(self, values: Sequence[float]) -> list[float]:
        """Floats (caller order, NaN: no value) with every copy of one content given the mean of the copies'
        finite values (the soft-reward form of :meth:`pool`).

        Raises:
            ValueError: when ``values`` is not of the group's size.
        """
        self._check(len(values), "values")
        means = self._means(values)
        return [v if not math.isfinite(v) else means[p] for p, v in enumerate(values)]

    def restore(self, result: GroupResult) -> GroupResult:
        """A result computed over the canonical order (:meth:`arrange`) in the caller's positions: rewards (their
        positional ids too), wins, ties and pairs mapped back, identical members pooled (:meth:`pool`) and the
        ranking rebuilt (best first, equal rewards in caller order). Judgments keep the order they were made in.

        Raises:
            ValueError: when the result is not of the group's size.
        """
        n = len(self.order)
        self._check(len(result.rewards), "the result's rewards")
        slots = self.slots
        rewards = self.pool([_renumbered(result.rewards[slots[p]], slots[p], p) for p in range(n)])
        wins = _permuted(result.wins, slots)
        ties = _permuted(result.ties, slots)
        ranking = tuple(sorted((p for p in range(n) if rewards[p].ok), key=lambda p: (-rewards[p].reward, p)))
        return replace(result, rewards=tuple(rewards), wins=wins, ties=ties, ranking=ranking,
                       pairs=tuple(self.caller_pairs(result.pairs)))

    def _means(self, values: Sequence[float]) -> list[float]:
        by_class: dict[int, list[float]] = {}
        for p, v in enumerate(values):
            if math.isfinite(v):
                by_class.setdefault(self.classes[p], []).append(v)
        out = []
        for p in range(len(values)):
            got = by_class.get(self.classes[p], [])
            if not got:
                out.append(math.nan)
            elif all(v == got[0] for v in got):
                out.append(got[0])  # exact: no rounding where the copies already agree
            else:
                out.append(math.fsum(got) / len(got))
        return out

    def _copies(self, p: int, rewards: Sequence[ScalarReward]) -> list[float]:
        return sorted(r.reward for q, r in enumerate(rewards) if self.classes[q] == self.classes[p] and r.ok)

    def _check(self, n: int, what: str) -> None:
        if n != len(self.order):
            raise ValueError(f"{what}: {n} values for a group of {len(self.order)}; refusing to align them")


def _note(reason: str, copies: list[float]) -> str:
    note = (f"the mean over {len(copies)} identical responses in the group (their own rewards "
            f"{', '.join(format(v, '.4g') for v in copies)})")
    return f"{reason}; {note}" if reason else note


def _renumbered(reward: ScalarReward, slot: int, p: int) -> ScalarReward:
    """A reward whose id is its canonical slot's positional id, renumbered to the caller's position."""
    return replace(reward, id=str(p)) if reward.id == str(slot) else reward


def _permuted(matrix: tuple[tuple[int, ...], ...], slots: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """``matrix[slot][slot']`` read at caller positions (an empty matrix stays empty)."""
    if not matrix:
        return matrix
    return tuple(tuple(matrix[slots[p]][slots[q]] for q in range(len(slots))) for p in range(len(slots)))
