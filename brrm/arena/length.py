"""Length-controlled win rate against the baseline, as AlpacaEval 2 defines it (Dubois et al. 2024,
"Length-Controlled AlpacaEval", arXiv:2404.04475; ``alpaca_eval`` ``glm_winrate``).

For each model ``m`` a logistic GLM is fitted on its battles against the baseline::

    logit P(m ≻ baseline) = θ_m + φ_m · tanh(Δ / sd(Δ))

with Δ the answer's length minus the baseline's, in characters (``str.len`` as in ``alpaca_eval``), sd(Δ) over
``m``'s battles, targets the battles' outcomes (soft or hard, ties ½; in ``m``'s frame whichever side was shown
first). The length-controlled win rate is the GLM's prediction with the length term set to 0: σ(θ_m). AlpacaEval's
third term (an instruction-difficulty γ_x shared across its whole leaderboard) is omitted: an arena's few models do
not pin it down. The fit is maximum likelihood by scipy's L-BFGS, with a 1e-6 ridge on φ only to keep it finite
when a model's lengths barely vary (θ is unpenalised, so the model term is not biased).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from brrm.arena.judging import Battle
from brrm.arena.table import ArenaTable

RIDGE = 1e-6
"""L2 penalty per battle on φ (keeps the fit finite when one model's lengths barely vary)."""


def response_lengths(table: ArenaTable, battles: Sequence[Battle]) -> list[tuple[float, float]]:
    """Each battle's (``model_a``'s, ``model_b``'s) answer length in characters in ``table``; NaN for an answer it
    lacks."""
    def size(pid: str, model: str) -> float:
        a = table.answer(pid, model)
        return float(len(a.response)) if a is not None else math.nan

    return [(size(b.prompt_id, b.model_a), size(b.prompt_id, b.model_b)) for b in battles]


def lc_win_rates(models: Sequence[str], battles: Sequence[Battle], lengths: Sequence[tuple[float, float]],
                 baseline: str, outcomes: str) -> dict[str, float]:
    """model -> length-controlled win rate against ``baseline`` in [0, 1]; NaN for the baseline itself and for a
    model without an ok battle against it (every one of ``models`` is a key). ``lengths``: each battle's
    (``model_a``'s, ``model_b``'s) answer length (:func:`response_lengths`, or token counts a battles file gives;
    the GLM divides Δ by its s.d., so the unit cancels); a battle with a length unknown (NaN) has Δ = 0."""
    out: dict[str, float] = {}
    for m in models:
        mine = [(b, n) for b, n in zip(battles, lengths, strict=True)
                if b.ok and m != baseline and {b.model_a, b.model_b} == {m, baseline}]
        if not mine:
            out[m] = math.nan
            continue
        delta, y = [], []
        for b, (len_a, len_b) in mine:
            d = len_a - len_b if b.model_a == m else len_b - len_a
            delta.append(0.0 if math.isnan(d) else d)
            s = b.outcome(outcomes)
            y.append(s if b.model_a == m else 1.0 - s)
        out[m] = _lc(delta, y)
    return out


def _lc(delta: Sequence[float], y: Sequence[float]) -> float:
    """σ(θ) of the GLM fitted on length differences ``delta`` and targets ``y`` (one model's battles)."""
    import numpy as np
    from scipy.optimize import minimize

    d = np.asarray(delta, dtype=np.float64)
    sd = float(d.std())
    x = np.tanh(d / sd) if sd > 0 else np.zeros_like(d)
    t = np.asarray(y, dtype=np.float64)
    ridge = RIDGE * len(t)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = w[0] + w[1] * x
        r = 1.0 / (1.0 + np.exp(-z)) - t
        nll = float(np.sum(np.logaddexp(0.0, z) - t * z)) + ridge * float(w[1] ** 2)
        return nll, np.array([r.sum(), float(r @ x) + 2.0 * ridge * w[1]])

    theta = float(minimize(loss, np.zeros(2), jac=True, method="L-BFGS-B", options={"gtol": 1e-10}).x[0])
    return 1.0 / (1.0 + math.exp(-theta))
