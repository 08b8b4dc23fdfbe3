"""Length bucketing: group items into batches under a padded-token budget (results restored by index).

Padding waste of a batch = (rows × longest row − real tokens) / (rows × longest row). Sorting by length before
cutting batches keeps rows of a batch close in length, so little of what runs is padding; the caller maps
results back by index, so the input order is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["bucket_by_length", "padding_waste"]


def bucket_by_length(
    lengths: Sequence[int], *, token_budget: int, max_batch_size: int, sort: bool = True
) -> list[list[int]]:
    """Group item indices into batches whose padded size (rows × longest row) stays under a budget.

    Args:
        lengths: token count of each item (>= 1).
        token_budget: most padded tokens per batch, >= 1; an item longer than it runs alone.
        max_batch_size: most rows per batch, >= 1.
        sort: sort by length first (length bucketing); False keeps input order (naive fixed batching, for
            comparison).

    Returns:
        Batches of indices into ``lengths``; every index appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i)) if sort else list(range(len(lengths)))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        grown = max(longest, lengths[i])
        if cur and (len(cur) >= max_batch_size or grown * (len(cur) + 1) > token_budget):
            batches.append(cur)
            cur, grown = [], lengths[i]
        cur.append(i)
        longest = grown
    if cur:
        batches.append(cur)
    return batches


def padding_waste(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of padded tokens, in [0, 1], when ``batches`` (indices into ``lengths``) run padded."""
    run = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    return (run - sum(lengths[i] for b in batches for i in b)) / run if run else 0.0
