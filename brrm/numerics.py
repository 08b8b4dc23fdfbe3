"""Small shared math below the judges and the composition layer."""

from __future__ import annotations

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
