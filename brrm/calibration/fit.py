"""Fit a temperature (pairwise judges) or a scale (scalar models) for P(A ≻ B), and measure calibration.

A pairwise judge's P(A ≻ B) is σ(z) with z = logit_1 − logit_2, the verdict digits' logit difference (BR-RM's
``p_a``); brrm fits on z = logit(p_a), which is that difference for an ordered judgment and stays right for a
judgment mirrored into another frame (whose digit logits are not swapped). A scalar model's P(A ≻ B) is σ(z)
with z = r_A − r_B. The calibrated probability is σ(z / T): ``temperature`` T > 0 for pairwise judges, reported
as ``scale`` 1/T for scalar models (σ(s·(r_A − r_B))). T minimises the log loss on the fit split (one convex
parameter: bisection on the gradient in log T). Ties and judgments without a probability are left out (counted).

Metrics (:func:`measure`), on P(A ≻ B) against y = 1 when the label is A, 0 when B:

* ECE: 10 equal-width bins of P(A ≻ B) over [0, 1] by brrm's one binning rule (:func:`brrm.numerics.bin_index`: a
  value on an inner edge opens the bin above it, the last bin is closed), Σ_b (n_b / N)·|mean y_b − mean p_b|
  — binned on P(A ≻ B) itself, not on the confidence max(p, 1 − p);
* Brier score: mean (p − y)²;
* log loss: −mean(y·ln p + (1 − y)·ln(1 − p)), p clipped to [1e-12, 1 − 1e-12].
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from brrm.errors import ConfigError
from brrm.numerics import bin_edges, bin_index, sigmoid
from brrm.types.calibration import EPS
from brrm.types.jsonvalue import record

BINS = 10
"""Equal-width bins of P(A ≻ B) for ECE and the reliability diagram."""

T_MIN = 1e-3
"""Lowest temperature the fit searches (a 1000× sharpening)."""

T_MAX = 1e3
"""Highest temperature the fit searches (a 1000× flattening: P(A ≻ B) ≈ 0.5 for every |z| < 10)."""

@dataclass(frozen=True)
class Bin:
    """One reliability bin: P(A ≻ B) in [low, high) (the last one closed).

    Attributes:
        low, high: bin edges in [0, 1].
        n: observations in the bin.
        mean_p: mean predicted P(A ≻ B) (NaN when empty).
        frac_a: fraction labelled A (NaN when empty).
    """

    low: float
    high: float
    n: int
    mean_p: float
    frac_a: float


@dataclass(frozen=True)
class Metrics:
    """Calibration of P(A ≻ B) on one set of labelled pairs.

    Attributes:
        n: pairs measured (ties and failures excluded).
        ece: expected calibration error in [0, 1] (see the module docstring for the binning); NaN when n = 0.
        brier: Brier score in [0, 1]; NaN when n = 0.
        log_loss: log loss in nats, >= 0; NaN when n = 0.
        accuracy: fraction with the more probable side labelled (p > 0.5 for A, p < 0.5 for B; p = 0.5 counts
            half), in [0, 1]; NaN when n = 0.
        bins: the :data:`BINS` reliability bins.
    """

    n: int
    ece: float
    brier: float
    log_loss: float
    accuracy: float
    bins: tuple[Bin, ...]

    def to_dict(self) -> dict[str, object]:
        """The fields by name, JSON-ready (:func:`~brrm.types.jsonvalue.record`: NaN as ``null``)."""
        return dict(record(self))


def measure(p: Sequence[float], y: Sequence[int], *, bins: int = BINS) -> Metrics:
    """ECE, Brier score, log loss and accuracy of probabilities ``p`` (in [0, 1]) against labels ``y`` (0/1).

    Raises:
        ConfigError: on different lengths, a probability outside [0, 1] or a label other than 0/1.
    """
    if len(p) != len(y):
        raise ConfigError(f"{len(p)} probabilities for {len(y)} labels")
    if any(not 0.0 <= x <= 1.0 for x in p) or any(v not in (0, 1) for v in y):
        raise ConfigError("probabilities must lie in [0, 1] and labels be 0 or 1")
    n = len(p)
    edges = bin_edges(bins)
    members: list[list[int]] = [[] for _ in range(bins)]
    for i, x in enumerate(p):
        members[bin_index(x, edges)].append(i)
    table = tuple(Bin(edges[b], edges[b + 1], len(m), sum(p[i] for i in m) / len(m) if m else math.nan,
                      sum(y[i] for i in m) / len(m) if m else math.nan) for b, m in enumerate(members))
    if not n:
        return Metrics(0, math.nan, math.nan, math.nan, math.nan, table)
    ece = sum(b.n / n * abs(b.frac_a - b.mean_p) for b in table if b.n)
    brier = sum((x - v) ** 2 for x, v in zip(p, y, strict=True)) / n
    clipped = [min(max(x, EPS), 1.0 - EPS) for x in p]
    loss = -sum(v * math.log(x) + (1 - v) * math.log(1.0 - x) for x, v in zip(clipped, y, strict=True)) / n
    acc = sum(1.0 if (x > 0.5) == bool(v) and x != 0.5 else 0.5 if x == 0.5 else 0.0
              for x, v in zip(p, y, strict=True)) / n
    return Metrics(n, ece, brier, loss, acc, table)


def fit_temperature(z: Sequence[float], y: Sequence[int]) -> float:
    """The T > 0 minimising the log loss of σ(z / T) against ``y`` (0/1), in [:data:`T_MIN`, :data:`T_MAX`].

    A result equal to a bound (:func:`at_bound`) means the minimum lies at or beyond it: the data ask for
    probabilities sharper or flatter than the search allows (typically too few pairs, or all on one side).

    Raises:
        ConfigError: with fewer than 2 observations, or when every z is 0 (nothing to fit).
    """
    if len(z) < 2 or not any(z):
        raise ConfigError(f"a temperature needs at least 2 labelled pairs with a non-zero logit; got {len(z)}")

    def gradient(log_t: float) -> float:  # d(log loss)/d(1/T) — increasing in 1/T, so decreasing in log T
        a = math.exp(-log_t)
        return sum((sigmoid(a * zi) - yi) * zi for zi, yi in zip(z, y, strict=True))

    lo, hi = math.log(T_MIN), math.log(T_MAX)
    if gradient(hi) >= 0:
        return T_MAX
    if gradient(lo) <= 0:
        return T_MIN
    for _ in range(200):
        mid = (lo + hi) / 2
        if gradient(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def at_bound(t: float) -> bool:
    """Whether a fitted temperature sits on the search bound :data:`T_MIN` or :data:`T_MAX`."""
    return t in (T_MIN, T_MAX)


def held_out(item_id: str, seed: int, fraction: float) -> bool:
    """Whether an item belongs to the held-out split: sha256 over (seed, id) below ``fraction`` (a pair stays in
    its split whatever else the file holds)."""
    digest = hashlib.sha256(f"{seed}\0{item_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction
