"""Counts in words for terminal lines and reports: ``1 pair``, ``2 pairs`` (never ``1 pairs``)."""

from __future__ import annotations


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural`` where adding ``s`` is wrong: ``1 party``).

    Args:
        n: the count (an int, or a float shown as ``:g``).
        noun: the singular noun.
        plural: its plural (default ``noun + "s"``).
    """
    word = noun if n == 1 else plural or f"{noun}s"
    return f"{n:g} {word}" if isinstance(n, float) else f"{n} {word}"
