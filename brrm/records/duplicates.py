"""Ids that appear more than once in an input: found once, said by name and count, refused where a join needs them.

Every surface files results by position or content, never by a record's id (:mod:`brrm.records`), so a repeated id
never swaps results; but the output then holds the same id on several lines, and a reader that joins by id would
silently pick one. Each surface therefore *says* which ids repeat (``brrm judge``/``score``/``rank`` and ``brrm
audit`` on the terminal and in their summaries, ``brrm bench`` in its result notes), and a metric or table that
joins by id (RewardBench 2's Ties score, PandaLM's replay, an arena's answers per prompt) refuses the input instead,
naming the ids (:meth:`DuplicateIds.refuse`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from brrm.errors import ConfigError

SHOWN = 10
"""At most this many repeated ids are named in a message; the rest are counted (``… and N more``)."""


@dataclass(frozen=True)
class DuplicateIds:
    """The ids of an input that appear more than once, with how often, in first-seen order.

    Attributes:
        counts: ``(id, times)`` per repeated id (``times`` >= 2), in the order each id first appears; empty when
            every id is unique.
        what: what the ids name, for messages (``ids``, ``(prompt_id, model) pairs``, ``Ties ids``).
    """

    counts: tuple[tuple[str, int], ...] = ()
    what: str = "ids"

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def ids(self) -> tuple[str, ...]:
        """The repeated ids, in first-seen order."""
        return tuple(i for i, _ in self.counts)

    def describe(self, shown: int = SHOWN) -> str:
        """``"2 ids appear more than once: a (×3), b (×2)"``, naming at most ``shown`` of them; ``""`` when none."""
        if not self.counts:
            return ""
        n = len(self.counts)
        verb = "appears" if n == 1 else "appear"
        what = self.what[:-1] if n == 1 and self.what.endswith("s") else self.what
        named = ", ".join(f"{i} (×{c})" for i, c in self.counts[:shown])
        more = f", … and {n - shown} more" if n > shown else ""
        return f"{n} {what} {verb} more than once: {named}{more}"

    def to_dict(self) -> dict[str, int]:
        """id -> times, JSON-ready (for summaries and result records)."""
        return dict(self.counts)

    def refuse(self, where: str, why: str) -> None:
        """Raise when any id repeats: a join by id would pick one of its rows silently.

        Args:
            where: the input, for the message (a file name, ``RewardBench 2 Ties``).
            why: what joins by id there, and what to do (``the Ties score pairs ref:N with tied:N by id``).

        Raises:
            ConfigError: naming every repeated id (up to :data:`SHOWN`) with its count, ``where`` and ``why``.
        """
        if self.counts:
            raise ConfigError(f"{where}: {self.describe()}; {why}")


def duplicate_ids(ids: Iterable[Hashable], *, what: str = "ids") -> DuplicateIds:
    """The ids among ``ids`` that appear more than once (each shown as ``str(id)``; a tuple as ``('p', 'm')``).

    Args:
        ids: one id per input row, in input order.
        what: what the ids name, for messages.
    """
    seen = Counter(ids)
    counts = tuple((i if isinstance(i, str) else repr(i), c) for i, c in seen.items() if c > 1)
    return DuplicateIds(counts, what)
