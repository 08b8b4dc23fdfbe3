"""Style control: Bradley–Terry ratings with the answers' length and markdown counts as covariates, as
Arena-Hard-Auto v2 and LMArena's style control define them.

Features of one answer (LMArena's ``count_markdown_elements`` after code blocks are removed): length, headers
(lines opening with 1–6 ``#`` and a space), list items (``1.`` ordered or ``-``/``*``/``+`` unordered, at a line's
start), bold spans (``**…**`` or ``__…__``). Length is whitespace-separated words — Arena-Hard-Auto counts tiktoken
tokens, which would need a download; the ratio below makes the unit cancel to first order. A battle's covariate
per feature is ``(a - b) / (a + b)`` (0 when both are 0), standardised over the battles (a feature constant over
them is 0). The model is logit P(A ≻ B) = θ_A − θ_B + β · x, fitted by maximum likelihood with soft or hard targets
(ties ½) by scipy's L-BFGS (no kept package fits a Bradley–Terry model with covariates without jax: LMArena's
``arena-rank`` ``ContextualBradleyTerry`` pins jax and an older numpy), the anchor's θ fixed at 0 (without an
anchor θ is centred). A 1e-6 ridge keeps a model that never lost finite. Intervals: the same seeded battle-level
bootstrap as :mod:`brrm.arena.ratings`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brrm.arena.judging import Battle
from brrm.arena.scale import ANCHOR_RATING, SCALE
from brrm.arena.table import ArenaTable

if TYPE_CHECKING:
    import numpy as np

FEATURES = ("length", "headers", "lists", "bold")
"""The style covariates, in order."""

_CODE = re.compile(r"```[^`]*```")
_HEADER = re.compile(r"^#{1,6}\s", re.MULTILINE)
_ORDERED = re.compile(r"^\s*\d+\.\s", re.MULTILINE)
_UNORDERED = re.compile(r"^\s*[-*+]\s", re.MULTILINE)
_BOLD = (re.compile(r"\*\*[^*\n]+\*\*"), re.compile(r"__[^_\n]+__"))
RIDGE = 1e-6
"""L2 penalty per battle on θ and β (only to keep a never-beaten model finite)."""


@dataclass(frozen=True)
class StyleFit:
    """Style-controlled ratings: model -> (rating, lower, upper) on the Elo-like scale of
    :mod:`brrm.arena.ratings`, and each feature's coefficient (Elo points per standard deviation of the feature's
    normalised difference: positive when the judge prefers more of it)."""

    ratings: dict[str, tuple[float, float, float]]
    coefficients: dict[str, float]


def counts(text: str) -> tuple[float, float, float, float]:
    """One answer's :data:`FEATURES`: words, headers, list items, bold spans (code blocks removed first)."""
    body = _CODE.sub("", text)
    return (float(len(text.split())), float(len(_HEADER.findall(body))),
            float(len(_ORDERED.findall(body)) + len(_UNORDERED.findall(body))),
            float(sum(len(p.findall(body)) for p in _BOLD)))


def answer_counts(table: ArenaTable, battles: Sequence[Battle]) -> np.ndarray:
    """Each battle's :data:`FEATURES` counts of ``model_a``'s and ``model_b``'s answers in ``table`` (zeros for an
    answer it lacks), shape ``(len(battles), 2, 4)``."""
    import numpy as np

    def answer(pid: str, model: str) -> tuple[float, ...]:
        a = table.answer(pid, model)
        return counts(a.response) if a is not None else (0.0, 0.0, 0.0, 0.0)

    pairs = [(answer(b.prompt_id, b.model_a), answer(b.prompt_id, b.model_b)) for b in battles]
    return np.array(pairs, dtype=np.float64).reshape(-1, 2, 4)


def standardised(pairs: np.ndarray) -> np.ndarray:
    """The covariates of battles from their answers' counts ``pairs`` (shape ``(n, 2, 4)``: ``model_a``'s, then
    ``model_b``'s :data:`FEATURES`): per feature ``(a - b) / (a + b)`` (0 when both are 0), standardised over the
    ``n`` battles (a constant feature is 0); shape ``(n, 4)``."""
    import numpy as np

    a, b = pairs[:, 0], pairs[:, 1]
    total = a + b
    if not len(total):  # no battle: nothing to standardise (and no mean of an empty column)
        return np.zeros((0, 4), dtype=np.float64)
    diff = np.divide(a - b, total, out=np.zeros_like(total), where=total > 0)
    std = diff.std(axis=0)
    return np.divide(diff - diff.mean(axis=0), std, out=np.zeros_like(diff), where=std > 0)


def fit_style(battles: Sequence[Battle], x: np.ndarray, rated: Sequence[str], *, outcomes: str,
              anchor: str | None, bootstrap: int, confidence: float, seed: int) -> StyleFit:
    """Fit the style-controlled model on the ok ``battles`` (``x``: their :func:`standardised` covariates) and
    bootstrap it.

    Raises:
        ConfigError: for a battle that is not ok (from :meth:`Battle.outcome`).
    """
    import numpy as np
    from scipy.stats import bootstrap as scipy_bootstrap


    index = {m: i for i, m in enumerate(rated)}
    ia = np.array([index[b.model_a] for b in battles])
    ib = np.array([index[b.model_b] for b in battles])
    y = np.array([b.outcome(outcomes) for b in battles], dtype=np.float64)
    fixed = index[anchor] if anchor is not None else None

    def params(ids: np.ndarray) -> np.ndarray:
        theta, beta = _solve(ia[ids], ib[ids], x[ids], y[ids], len(rated), fixed)
        return np.concatenate([theta, beta])

    point = params(np.arange(len(battles)))
    res = scipy_bootstrap((np.arange(len(battles)),), lambda ids: params(np.asarray(ids, dtype=int)),
                          n_resamples=bootstrap, method="percentile", confidence_level=confidence,
                          random_state=seed, paired=True, vectorized=False)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64).T[:, :len(rated)] * SCALE + ANCHOR_RATING
    q = ((1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0)
    lo, hi = np.quantile(dist, q[0], axis=0), np.quantile(dist, q[1], axis=0)
    ratings = {m: (float(point[i] * SCALE + ANCHOR_RATING), float(lo[i]), float(hi[i])) for m, i in index.items()}
    return StyleFit(ratings, {f: float(point[len(rated) + k] * SCALE) for k, f in enumerate(FEATURES)})


def _solve(ia: np.ndarray, ib: np.ndarray, x: np.ndarray, y: np.ndarray, k: int,
           fixed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """θ (k, the ``fixed`` one 0, else centred) and β (4) maximising the weighted logistic likelihood."""
    import numpy as np
    from scipy.optimize import minimize

    n = len(y)
    ridge = RIDGE * max(n, 1)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        theta, beta = w[:k], w[k:]
        z = theta[ia] - theta[ib] + x @ beta
        nll = float(np.sum(np.logaddexp(0.0, z) - y * z)) + ridge * float(w @ w)
        r = 1.0 / (1.0 + np.exp(-z)) - y  # d nll / d z
        g_theta = np.bincount(ia, r, minlength=k) - np.bincount(ib, r, minlength=k)
        grad = np.concatenate([g_theta, x.T @ r]) + 2.0 * ridge * w
        if fixed is not None:
            grad[fixed] = 0.0
        return nll, grad

    w = minimize(loss, np.zeros(k + x.shape[1]), jac=True, method="L-BFGS-B",
                 options={"maxiter": 500, "gtol": 1e-9}).x
    theta = w[:k] - (w[fixed] if fixed is not None else w[:k].mean())
    return theta, w[k:]
