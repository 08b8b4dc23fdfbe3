"""Ratings from battles: a Bradley–Terry fit with seeded bootstrap confidence intervals, on the Elo-like scale the
peers print.

The fit is evalica's (``evalica.bradley_terry``; PyPI ``evalica``, Apache-2.0, kept by Dmitry Ustalov; extra
the ``arena`` extra), the resampling scipy's (``scipy.stats.bootstrap``, percentile intervals), both imported only
when ratings are computed. Why evalica: among the kept packages it alone takes ties (``Winner.Draw``, counted half a
win each side as Arena-Hard-Auto and LMArena count them) and per-comparison weights (which carry the fractional
outcomes) and needs only numpy, pandas and scipy; LMArena's ``arena-rank`` pins ``jax==0.8.1`` and
``numpy==2.3.3`` (it would downgrade numpy and pull in jax), ``choix`` takes neither ties nor weights.

The resampling unit is the battle (one judged matchup), as in Arena-Hard-Auto: with hard outcomes each battle is
one evalica row, and the bootstrap samples are exactly those of ``evalica.bootstrap(evalica.bradley_terry, …,
bootstrap_method="percentile", random_state=seed)`` (scipy's paired resampling draws the same indices). With soft
outcomes a battle whose ``p`` is not 0, ½ or 1 is two rows — ``model_a`` wins with weight ``p``, ``model_b`` with
``1 - p`` — and a resample keeps or drops both, so the unit stays the battle.

Scale: rating = 400 · log10(strength) (400 / ln 10 per Bradley–Terry logit), shifted so the anchor is 1000 in the
fit and in every bootstrap sample (Arena-Hard-Auto's anchoring of its baseline); without an anchor the geometric
mean strength is 1000. A ``confidence`` interval is the bootstrap distribution's central quantiles (numpy's
linear interpolation, as Arena-Hard-Auto's ``np.percentile``).
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from brrm.arena.judging import Battle
from brrm.arena.scale import ANCHOR_RATING, SCALE
from brrm.errors import BackendUnavailable, ConfigError, install_extra

if TYPE_CHECKING:
    import numpy as np



@dataclass(frozen=True)
class Rating:
    """One model's row of the leaderboard.

    Attributes:
        model: the model.
        rating: Elo-like rating (see the module docstring); NaN when ``status`` is ``unrated``.
        lower, upper: the ``confidence`` bootstrap interval of ``rating`` (the anchor's is [1000, 1000]).
        rank: 1-based position by rating.
        rank_best, rank_worst: (``leaderboard.csv``: empty for an unrated model, which has no interval) the rank
            range the intervals allow: 1 + the models whose lower bound is above this
            model's upper bound; the number of models minus those whose upper bound is below this lower bound.
        judgments: ok battles this model was in; failures: its battles without a verdict.
        win_rate: its mean outcome against the baseline (ties ½; soft outcomes: mean P(win)) in [0, 1]; NaN for
            the baseline itself, without a baseline, or without an ok battle against it.
        status: ``ok``; ``unbounded`` (it never won or never lost: the maximum-likelihood rating is ±∞ and the
            value shown is where the solver stopped); ``unrated`` (no ok battle).
        reason: why, when ``status`` is not ``ok``.
        style_rating, style_lower, style_upper: the style-controlled rating and interval
            (:mod:`brrm.arena.style`); NaN when style control was not fitted or the model is unrated.
        lc_win_rate: the length-controlled win rate against the baseline (:mod:`brrm.arena.length`) in [0, 1];
            NaN where ``win_rate`` is, or when it was not computed.
        above_next: the share of bootstrap samples in which this model is rated above the model ranked next, in
            [0, 1] (the pair's order holds at confidence c when it is >= (1 + c) / 2: the interval of their
            difference excludes 0); NaN for the last rated model and unrated ones.
    """

    model: str
    rating: float
    lower: float
    upper: float
    rank: int
    rank_best: int
    rank_worst: int
    judgments: int
    failures: int
    win_rate: float
    status: str
    reason: str
    style_rating: float = math.nan
    style_lower: float = math.nan
    style_upper: float = math.nan
    lc_win_rate: float = math.nan
    above_next: float = math.nan


@dataclass(frozen=True)
class Leaderboard:
    """The fit: ``ratings`` best first, and how they were made (``library``: the fitting package and version;
    ``style``: each style feature's coefficient in Elo points, empty when style control was not fitted; ``reason``:
    why no fit was made, when it was not (:attr:`fitted`), else empty)."""

    ratings: tuple[Rating, ...]
    anchor: str
    baseline: str
    outcomes: str
    confidence: float
    bootstrap: int
    seed: int
    library: str
    judgments: int
    failures: int
    style: tuple[tuple[str, float], ...] = ()
    reason: str = ""

    @property
    def fitted(self) -> bool:
        """A fit was made: at least two battles have a verdict (else every model is ``unrated``, :func:`fit`)."""
        return self.judgments >= 2


def _evalica() -> Any:
    try:
        import evalica
        import scipy.stats  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(f"arena ratings use evalica and scipy ({exc.name} is missing)",
                                 hint=install_extra("arena")) from None
    return evalica


def rows(battles: Sequence[Battle], outcomes: str) -> tuple[list[str], list[str], list[int], list[float], list[int]]:
    """evalica's rows of ``battles`` (all ok): ``xs`` (``model_a``), ``ys``, winners (evalica's ``Winner`` codes:
    0 draw, 1 X, 2 Y), weights, and for each row the index of its battle."""
    xs: list[str] = []
    ys: list[str] = []
    winners: list[int] = []
    weights: list[float] = []
    owner: list[int] = []
    for k, b in enumerate(battles):
        p = b.outcome(outcomes)
        parts = {1.0: [(1, 1.0)], 0.0: [(2, 1.0)], 0.5: [(0, 1.0)]}.get(p, [(1, p), (2, 1.0 - p)])
        for code, w in parts:
            xs.append(b.model_a)
            ys.append(b.model_b)
            winners.append(code)
            weights.append(w)
            owner.append(k)
    return xs, ys, winners, weights, owner


def fit(battles: Sequence[Battle], models: Sequence[str], *, outcomes: str = "soft", anchor: str | None = None,
        baseline: str | None = None, bootstrap: int = 200, confidence: float = 0.95, seed: int = 0,
        style: np.ndarray | None = None) -> Leaderboard:
    """Rate ``models`` from ``battles`` (failed battles are counted, not fitted).

    Args:
        battles: the judged matchups.
        models: every model of the arena (one with no ok battle is listed ``unrated``).
        outcomes: ``soft`` (P(A ≻ B) as a fractional win) or ``hard`` (win 1, tie ½, loss 0).
        anchor: the model rated 1000 (default: ``baseline``; neither: the geometric mean strength is 1000); an
            anchor with no ok battle cannot be pinned: the others are rated on the geometric mean (the board's
            ``anchor`` empty, the anchor's row ``unrated``).
        baseline: the model ``win_rate`` is measured against (None: no win rates).
        bootstrap: resamples of the battles, >= 10.
        confidence: interval level in (0, 1).
        seed: the bootstrap's seed (same battles and seed: the same table).
        style: the battles' style covariates (:func:`brrm.arena.style.standardised`, one row per battle): also fit
            the style-controlled ratings; None: not.

    Returns:
        The :class:`Leaderboard`; with fewer than 2 ok battles no fit can be made and it is not
        :attr:`~Leaderboard.fitted`: every model ``unrated``, the reason in each row and in the board.

    Raises:
        ConfigError: for ``bootstrap`` < 10, ``confidence`` outside (0, 1), or an anchor that is not a model.
        BackendUnavailable: without evalica or scipy (:func:`brrm.errors.install_extra` ``arena``).
    """
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int) or bootstrap < 10:
        raise ConfigError(f"--bootstrap must be an integer >= 10, got {bootstrap!r}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0, 1), got {confidence!r}")
    anchor = anchor if anchor is not None else baseline
    check_anchor(anchor, models)
    ok = [b for b in battles if b.ok]
    if len(ok) < 2:
        return _unrated(battles, models, f"{len(ok)} of {len(battles)} battles have a verdict: the bootstrap needs "
                        "at least 2", outcomes, anchor, baseline, bootstrap, confidence, seed)
    rated = [m for m in models if any(m in (b.model_a, b.model_b) for b in ok)]
    anchor = anchor if anchor in rated else None  # an anchor without a verdict pins nothing
    import numpy as np

    point, samples = _fit_and_resample(ok, rated, outcomes, bootstrap, confidence, seed)
    ratings = _scaled(point[None, :], rated, anchor)[0]
    dist = _scaled(samples, rated, anchor)
    q = ((1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0)
    lower, upper = np.quantile(dist, q[0], axis=0), np.quantile(dist, q[1], axis=0)
    by_model = {m: (float(ratings[i]), float(lower[i]), float(upper[i])) for i, m in enumerate(rated)}
    rows_ = _rows(models, by_model, battles, outcomes, baseline)
    rows_ = _above_next(rows_, dist, rated)
    coefficients: tuple[tuple[str, float], ...] = ()
    if style is not None:
        keep = np.array([b.ok for b in battles], dtype=bool)
        rows_, coefficients = _with_style(rows_, ok, np.asarray(style)[keep], rated, outcomes, anchor, bootstrap,
                                          confidence, seed)
    return Leaderboard(rows_, anchor or "", baseline or "", outcomes, confidence, bootstrap, seed,
                       f"evalica {importlib.metadata.version('evalica')}", len(ok), len(battles) - len(ok),
                       coefficients)


def check_anchor(anchor: str | None, models: Sequence[str], source: str = "") -> None:
    """Refuse an ``anchor`` that is not one of ``models`` (None: no anchor), naming the models (and ``source``).

    Raises:
        ConfigError: naming ``--anchor``.
    """
    if anchor is not None and anchor not in models:
        raise ConfigError(f"--anchor {anchor!r} is not a model{f' of {source}' if source else ''}; models: "
                          f"{', '.join(models)}")


def _unrated(battles: Sequence[Battle], models: Sequence[str], reason: str, outcomes: str, anchor: str | None,
             baseline: str | None, bootstrap: int, confidence: float, seed: int) -> Leaderboard:
    """The leaderboard of ``battles`` when no fit can be made: every model ``unrated`` with ``reason``, its ratings
    NaN, its judgments and failures counted; no library ran."""
    rows_ = _rows(models, {}, battles, outcomes, baseline)
    ok = sum(1 for b in battles if b.ok)
    return Leaderboard(tuple(replace(r, reason=reason) for r in rows_), anchor or "", baseline or "", outcomes,
                       confidence, bootstrap, seed, "", ok, len(battles) - ok, reason=reason)


def _with_style(rows_: tuple[Rating, ...], ok: Sequence[Battle], x: np.ndarray, rated: Sequence[str], outcomes: str,
                anchor: str | None, bootstrap: int, confidence: float, seed: int
                ) -> tuple[tuple[Rating, ...], tuple[tuple[str, float], ...]]:
    """``rows_`` with their style-controlled ratings (:func:`brrm.arena.style.fit_style` on the ok battles and
    their covariates ``x``), and the features' coefficients."""

    from brrm.arena.style import fit_style

    controlled = fit_style(ok, x, rated, outcomes=outcomes, anchor=anchor, bootstrap=bootstrap,
                           confidence=confidence, seed=seed)
    nan3 = (math.nan, math.nan, math.nan)
    out = []
    for r in rows_:
        value, low, high = controlled.ratings.get(r.model, nan3)
        out.append(replace(r, style_rating=value, style_lower=low, style_upper=high))
    return tuple(out), tuple(controlled.coefficients.items())


def _fit_and_resample(ok: Sequence[Battle], rated: Sequence[str], outcomes: str, bootstrap: int, confidence: float,
                      seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The fitted strengths (shape ``(len(rated),)``) and the bootstrap's (``(bootstrap, len(rated))``)."""
    import numpy as np
    import pandas as pd
    from scipy.stats import bootstrap as scipy_bootstrap

    evalica = _evalica()
    xs, ys, winners, weights, owner = rows(ok, outcomes)
    index = pd.Index(list(rated))
    by_battle: list[list[int]] = [[] for _ in ok]
    for r, k in enumerate(owner):
        by_battle[k].append(r)

    def strengths(battle_ids: Sequence[int]) -> np.ndarray:
        picked = [r for k in battle_ids for r in by_battle[int(k)]]
        result = evalica.bradley_terry([xs[r] for r in picked], [ys[r] for r in picked],
                                       [evalica.Winner(winners[r]) for r in picked], index=index,
                                       weights=[weights[r] for r in picked])
        return np.asarray(result.scores.reindex(index).to_numpy(dtype=np.float64))

    point = strengths(range(len(ok)))
    res = scipy_bootstrap((np.arange(len(ok)),), strengths, n_resamples=bootstrap, method="percentile",
                          confidence_level=confidence, random_state=seed, paired=True, vectorized=False)
    return point, np.asarray(res.bootstrap_distribution, dtype=np.float64).T


def _scaled(strengths: np.ndarray, rated: Sequence[str], anchor: str | None) -> np.ndarray:
    """Strengths (rows: fits) as Elo-like ratings, anchored per row."""
    import numpy as np

    with np.errstate(divide="ignore"):
        logs = SCALE * np.log(strengths)
    if anchor is not None:
        centre = logs[:, [list(rated).index(anchor)]]
    else:
        finite = np.where(np.isfinite(logs), logs, np.nan)
        centre = np.nanmean(finite, axis=1, keepdims=True)
    out: np.ndarray = logs - centre + ANCHOR_RATING
    return out


def _above_next(rows_: tuple[Rating, ...], dist: np.ndarray, rated: Sequence[str]) -> tuple[Rating, ...]:
    """``rows_`` with :attr:`Rating.above_next` from the bootstrap ratings ``dist`` (samples x ``rated``)."""

    column = {m: i for i, m in enumerate(rated)}
    ranked = [r for r in rows_ if r.model in column]
    out = {r.model: replace(r, above_next=float((dist[:, column[r.model]] > dist[:, column[n.model]]).mean()))
           for r, n in zip(ranked, ranked[1:], strict=False)}
    return tuple(out.get(r.model, r) for r in rows_)


def _rows(models: Sequence[str], by_model: dict[str, tuple[float, float, float]], battles: Sequence[Battle],
          outcomes: str, baseline: str | None) -> tuple[Rating, ...]:
    """The leaderboard rows, best first (unrated last)."""
    order = sorted(by_model, key=lambda m: -by_model[m][0])
    out: list[Rating] = []
    for m in [*order, *(m for m in models if m not in by_model)]:
        mine = [b for b in battles if m in (b.model_a, b.model_b)]
        good = [b for b in mine if b.ok]
        scores = [b.outcome(outcomes) if b.model_a == m else 1.0 - b.outcome(outcomes) for b in good]
        status, reason = "ok", ""
        if m not in by_model:
            status, reason = "unrated", "no battle of this model has a verdict"
        elif sum(scores) == 0.0 or sum(1.0 - s for s in scores) == 0.0:
            status = "unbounded"
            reason = f"it {'never won' if sum(scores) == 0.0 else 'never lost'}: the maximum-likelihood rating is " \
                     "infinite; the value shown is where the solver stopped"
        vs = [s for b, s in zip(good, scores, strict=True) if baseline is not None and m != baseline
              and baseline in (b.model_a, b.model_b)]
        rating, lower, upper = by_model.get(m, (math.nan, math.nan, math.nan))
        best = 1 + sum(1 for o, (_, lo, _) in by_model.items() if o != m and lo > upper)
        worst = len(by_model) - sum(1 for o, (_, _, up) in by_model.items() if o != m and up < lower)
        out.append(Rating(m, rating, lower, upper, len(out) + 1, best, worst, len(good), len(mine) - len(good),
                          sum(vs) / len(vs) if vs else math.nan, status, reason))
    return tuple(out)
