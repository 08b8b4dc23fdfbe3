"""Small shared math below the judges and the composition layer."""

from __future__ import annotations

import bisect
import math


def sigmoid(x: float) -> float:
    """σ(x) = 1 / (1 + e^−x), without overflow for any finite x (and 0 / 1 at ∓inf).

    Args:
        x: a float (±inf allowed; NaN gives NaN).

    Returns:
        σ(x) in [0, 1].
    """
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def bin_edges(bins: int, low: float = 0.0, high: float = 1.0) -> list[float]:
    """The ``bins + 1`` edges of equal-width bins over [low, high]: e_k = low + (high − low)·k / bins.

    The edges are computed once, by this formula, and every binned figure (ECE, reliability diagrams, the P(A ≻ B)
    and reward histograms of audit, bench and calibrate reports) both prints them and bins against them, so a value
    printed as an edge lands in the bin that edge opens (see :func:`bin_index`). For [0, 1], e_k is the correctly
    rounded k / bins: 0.3, 0.6 and 0.7 are the edges of 10 bins exactly as Python writes those literals.

    Args:
        bins: number of bins, >= 1.
        low, high: finite range ends, low < high.

    Raises:
        ValueError: for bins < 1 or a range that is not finite and increasing (a programming error).
    """
    if bins < 1 or not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise ValueError(f"bins need bins >= 1 and finite low < high; got {bins}, [{low}, {high}]")
    return [low + (high - low) * k / bins for k in range(bins)] + [high]


def bin_index(x: float, edges: list[float]) -> int:
    """The bin of ``x`` among :func:`bin_edges`: bin k holds e_k <= x < e_{k+1}; the last bin is closed (it holds
    ``high`` too). The one binning rule of brrm's figures: a value on an inner edge opens the bin above it.

    Args:
        x: a finite value in [edges[0], edges[-1]].
        edges: increasing edges (``len(edges) >= 2``), as :func:`bin_edges` returns.

    Returns:
        The bin index in [0, len(edges) − 2].

    Raises:
        ValueError: for a value that is NaN or outside the edges (a programming error: callers bin what lies in range).
    """
    if not edges[0] <= x <= edges[-1]:
        raise ValueError(f"{x!r} lies outside the bins' range [{edges[0]}, {edges[-1]}]")
    return min(bisect.bisect_right(edges, x) - 1, len(edges) - 2)
