"""Ratings by category: when the input has a ``category`` column, the same Bradley–Terry fit and bootstrap
(:func:`brrm.arena.ratings.fit`, without style control) on each category's battles alone, written to
``categories.csv``.

A category whose battles cannot be rated (none has a verdict, or the anchor has none in it) is kept with the reason,
never dropped in silence.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from brrm.arena.judging import Battle
from brrm.arena.ratings import Leaderboard, fit
from brrm.errors import ConfigError

COLUMNS = ("category", "model", "rating", "rating_lower", "rating_upper", "judgments", "failures", "status")
"""The columns of ``categories.csv``."""


@dataclass(frozen=True)
class CategoryBoard:
    """One category's leaderboard, or why it has none (``leaderboard`` None and ``reason`` set)."""

    category: str
    leaderboard: Leaderboard | None
    reason: str


def by_category(battles: Sequence[Battle], models: Sequence[str], *, outcomes: str, anchor: str | None,
                baseline: str | None, bootstrap: int, confidence: float, seed: int) -> tuple[CategoryBoard, ...]:
    """One :class:`CategoryBoard` per category of ``battles``, in first-seen order; empty when no battle has a
    category (the uncategorised battles of a partly categorised input form category ``""``)."""
    names = list(dict.fromkeys(b.category for b in battles))
    if names in ([], [""]):
        return ()
    out = []
    for name in names:
        mine = [b for b in battles if b.category == name]
        present = [m for m in models if any(m in (b.model_a, b.model_b) for b in mine)]
        try:
            board = fit(mine, present, outcomes=outcomes, anchor=anchor, baseline=baseline, bootstrap=bootstrap,
                        confidence=confidence, seed=seed)
        except ConfigError as exc:
            out.append(CategoryBoard(name, None, str(exc)))
            continue
        out.append(CategoryBoard(name, board, "") if board.fitted else CategoryBoard(name, None, board.reason))
    return tuple(out)


def write_categories(boards: Sequence[CategoryBoard], path: Path) -> Path:
    """Write ``categories.csv`` (:data:`COLUMNS`; a category without a leaderboard is one row with its reason as
    the status); returns ``path``."""
    def cell(x: float) -> str:
        return "" if math.isnan(x) else f"{x:.2f}"

    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for c in boards:
            if c.leaderboard is None:
                w.writerow([c.category, "", "", "", "", 0, 0, c.reason])
                continue
            for r in c.leaderboard.ratings:
                w.writerow([c.category, r.model, cell(r.rating), cell(r.lower), cell(r.upper), r.judgments,
                            r.failures, r.status])
    return path


def summary(boards: Sequence[CategoryBoard]) -> str:
    """One line per category: its models by rating with intervals (or why it has no ratings)."""
    lines = []
    for c in boards:
        if c.leaderboard is None:
            lines.append(f"category {c.category or '(none)'}: not rated ({c.reason})")
            continue
        parts = [f"{r.model} {r.rating:.1f} [{r.lower:.1f}, {r.upper:.1f}]" for r in c.leaderboard.ratings
                 if not math.isnan(r.rating)]
        lines.append(f"category {c.category or '(none)'} ({c.leaderboard.judgments} judgments): " + ", ".join(parts))
    return "\n".join(lines)
