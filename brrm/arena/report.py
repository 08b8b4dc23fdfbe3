"""The arena's HTML report (``report.html``, one self-contained file): the leaderboard, an interval forest plot
(raw and style-controlled ratings), the win-rate heatmap, ratings by category, the style-control coefficients,
the judge's position bias measured from the swapped orders, and the failure counts. Plots are matplotlib PNGs
inline (the ``audit`` extra); without matplotlib the report says so in place of each plot.
"""

from __future__ import annotations

import html
import io
import math
from collections import Counter
from collections.abc import Sequence

from brrm.arena.categories import CategoryBoard, summary
from brrm.arena.judging import Battle
from brrm.arena.ratings import Leaderboard, Rating
from brrm.errors import install_extra

STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:64em}table{border-collapse:collapse;"
         "margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}td:nth-child(2),"
         "th:nth-child(2){text-align:left}img{max-width:100%}")


def win_matrix(battles: Sequence[Battle], models: Sequence[str], outcomes: str) -> list[list[float]]:
    """Mean outcome of the row model against the column model over their ok battles (ties ½), in [0, 1]; NaN
    where they never met (and on the diagonal)."""
    total = {(a, b): [0.0, 0] for a in models for b in models}
    for bt in battles:
        if not bt.ok or (bt.model_a, bt.model_b) not in total:
            continue
        s = bt.outcome(outcomes)
        for row, col, v in ((bt.model_a, bt.model_b, s), (bt.model_b, bt.model_a, 1.0 - s)):
            cell = total[(row, col)]
            cell[0] += v
            cell[1] += 1
    return [[total[(a, b)][0] / total[(a, b)][1] if total[(a, b)][1] else math.nan for b in models] for a in models]


def position_bias(battles: Sequence[Battle]) -> tuple[float, int, float]:
    """(mean :attr:`Battle.position_bias` over the battles that measured it, their count, the share of swapped
    battles whose two orders agreed); NaN where none measured it."""
    biases = [b.position_bias for b in battles if not math.isnan(b.position_bias)]
    agreed = [b.consistent for b in battles if b.consistent is not None]
    return (sum(biases) / len(biases) if biases else math.nan, len(biases),
            sum(agreed) / len(agreed) if agreed else math.nan)


def report_html(board: Leaderboard, battles: Sequence[Battle], categories: Sequence[CategoryBoard],
                source: str) -> str:
    """The whole report as one HTML string (see the module docstring)."""
    models = [r.model for r in board.ratings]
    bias, n_bias, agreed = position_bias(battles)
    failures = Counter(b.status for b in battles if not b.ok)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>brrm arena</title><style>{STYLE}</style>"
             f"</head><body><h1>brrm arena: {html.escape(source)}</h1>",
             _fit_line(board), _table(board), "<h2>Ratings and intervals</h2>", _forest(board),
             "<h2>Win rate (row against column)</h2>", _heatmap(win_matrix(battles, models, board.outcomes), models)]
    if board.style:
        parts.append("<h2>Style control</h2><p>Coefficients in Elo points per standard deviation of the normalised "
                     "difference (positive: the judge prefers more of it): " + html.escape(
                         ", ".join(f"{k} {v:+.1f}" for k, v in board.style)) + "</p>")
    if categories:
        parts.append("<h2>Ratings by category</h2><pre>" + html.escape(summary(categories)) + "</pre>")
    parts.append("<h2>Position bias</h2><p>" + (
        f"P(the answer shown first wins) − ½, mean over {n_bias} swapped battles: {bias:+.3f}; both orders agreed "
        f"in {agreed:.1%}." if n_bias else "not measured (one order only, or no P(A ≻ B))") + "</p>")
    parts.append("<h2>Failures</h2><p>" + (html.escape(", ".join(f"{k} {v}" for k, v in failures.items()))
                                           if failures else "none") + "</p></body></html>")
    return "".join(parts)


def _fit_line(board: Leaderboard) -> str:
    """How the ratings were fitted, or why there are none."""
    if not board.fitted:
        return (f"<p>No ratings: {html.escape(board.reason)}; {board.judgments} judgments, {board.failures} "
                "failures (see Failures below).</p>")
    return (f"<p>Bradley-Terry ({html.escape(board.library)}), {board.outcomes} outcomes, anchor "
            f"{html.escape(board.anchor or 'geometric mean')} = 1000, {board.confidence:.0%} intervals from "
            f"{board.bootstrap} bootstrap resamples (seed {board.seed}); {board.judgments} judgments, "
            f"{board.failures} failures.</p>")


def _table(board: Leaderboard) -> str:
    def f(x: float, spec: str = ".1f") -> str:
        return "—" if math.isnan(x) else format(x, spec)

    head = ("<tr><th>rank</th><th>model</th><th>rating</th><th>interval</th><th>style-controlled</th>"
            "<th>win rate</th><th>LC win rate</th><th>judgments</th><th>failures</th><th>status</th></tr>")
    rows = "".join(
        f"<tr><td>{_ranks(r)}</td><td>{html.escape(r.model)}</td><td>{f(r.rating)}</td>"
        f"<td>[{f(r.lower)}, {f(r.upper)}]</td><td>{f(r.style_rating)}</td><td>{f(r.win_rate, '.1%')}</td>"
        f"<td>{f(r.lc_win_rate, '.1%')}</td><td>{r.judgments}</td><td>{r.failures}</td>"
        f"<td>{html.escape(r.status)}</td></tr>" for r in board.ratings)
    return f"<table>{head}{rows}</table>"


def _ranks(r: Rating) -> str:
    """The rank range a row's interval allows; none for an unrated model (no interval)."""
    return "—" if r.status == "unrated" else f"{r.rank_best}–{r.rank_worst}"


def _img(fig: object) -> str:
    import base64

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # type: ignore[attr-defined]
    return f"<img alt='plot' src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode('ascii')}'>"


def _figure(height: float) -> object | None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure(figsize=(6.4, height), dpi=96, layout="constrained")


def _forest(board: Leaderboard) -> str:
    rated = [r for r in board.ratings if not math.isnan(r.rating)][::-1]
    fig = _figure(0.4 * len(rated) + 1.2)
    if fig is None:
        return f"<p>(plots need matplotlib: {install_extra('audit')})</p>"
    ax = fig.add_subplot()  # type: ignore[attr-defined]
    ys = list(range(len(rated)))
    ax.errorbar([r.rating for r in rated], ys, xerr=[[r.rating - r.lower for r in rated],
                                                    [r.upper - r.rating for r in rated]], fmt="o", label="raw")
    if board.style:
        ax.errorbar([r.style_rating for r in rated], [y + 0.25 for y in ys],
                    xerr=[[r.style_rating - r.style_lower for r in rated],
                          [r.style_upper - r.style_rating for r in rated]], fmt="s", label="style-controlled")
        ax.legend(fontsize=8)
    ax.set_yticks(ys, [r.model for r in rated])
    ax.set_xlabel("rating")
    return _img(fig)


def _heatmap(matrix: list[list[float]], models: Sequence[str]) -> str:
    fig = _figure(0.45 * len(models) + 1.5)
    if fig is None:
        return f"<p>(plots need matplotlib: {install_extra('audit')})</p>"
    ax = fig.add_subplot()  # type: ignore[attr-defined]
    ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="RdBu")
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
    ax.set_yticks(range(len(models)), models)
    return _img(fig)
