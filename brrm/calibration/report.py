"""The reliability diagram (matplotlib PNG) and the calibration tables of the HTML reports.

:func:`reliability_png` draws, for one or more sets of probabilities (e.g. before and after calibration), the
observed fraction labelled A against the mean predicted P(A ≻ B) per bin (:data:`brrm.calibration.fit.BINS`
equal-width bins; a marker's area grows with its count), the diagonal of perfect calibration, and under it the
count of predictions per bin. :func:`metrics_table` is the HTML table of n, accuracy, ECE, Brier score and log
loss that sits beside it; :func:`calibration_html` is ``brrm calibrate``'s whole report.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence

from brrm.calibration.fit import Metrics

COLORS = ("#9aa5b1", "#1f77b4", "#d62728", "#2ca02c")


def reliability_png(series: Sequence[tuple[str, Metrics]], *, title: str = "Reliability of P(A ≻ B)") -> bytes:
    """A PNG (about 640×520 px): per series, fraction labelled A vs mean P(A ≻ B) per bin, with per-bin counts.

    Args:
        series: (legend label, its :class:`Metrics`) pairs, drawn in order.
        title: the figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 5.2), dpi=100, sharex=True,
                                      gridspec_kw={"height_ratios": (3, 1)})
    top.plot((0, 1), (0, 1), ls="--", color="#555555", lw=1, label="perfect calibration")
    width = 1.0 / max(len(series[0][1].bins), 1) / (len(series) + 1) if series else 0.05
    for k, (label, m) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        pts = [(b.mean_p, b.frac_a, b.n) for b in m.bins if b.n]
        if pts:
            top.plot([p for p, _, _ in pts], [f for _, f, _ in pts], "-o", color=color, lw=1.5,
                     label=f"{label} (ECE {m.ece:.3f}, n {m.n})", markersize=4)
        lefts = [b.low + (k + 0.5) * width for b in m.bins]
        bottom.bar(lefts, [b.n for b in m.bins], width=width, color=color, align="edge")
    top.set(xlim=(0, 1), ylim=(0, 1), ylabel="fraction labelled A", title=title)
    top.legend(loc="best", fontsize=8, frameon=True)
    top.grid(alpha=0.3)
    bottom.set(xlabel="predicted P(A ≻ B)", ylabel="pairs per bin")
    bottom.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def img_tag(png: bytes, alt: str) -> str:
    """An ``<img>`` with the PNG inline (base64), so the HTML file stands alone."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _fmt(x: float) -> str:
    return "—" if isinstance(x, float) and math.isnan(x) else f"{x:.4f}"


def metrics_table(rows: Sequence[tuple[str, Metrics]]) -> str:
    """An HTML table: one row per (label, metrics) with n, accuracy, ECE, Brier score, log loss."""
    head = "<tr><th></th><th>n</th><th>accuracy</th><th>ECE</th><th>Brier</th><th>log loss</th></tr>"
    body = "".join(f"<tr><td>{html.escape(label)}</td><td>{m.n}</td><td>{_fmt(m.accuracy)}</td><td>{_fmt(m.ece)}"
                   f"</td><td>{_fmt(m.brier)}</td><td>{_fmt(m.log_loss)}</td></tr>" for label, m in rows)
    return f'<table class="calibration">{head}{body}</table>'


BINNING = ("ECE over 10 equal-width bins of P(A ≻ B) (not of max(p, 1 − p)); a value on an inner edge opens the bin "
           "above it and 1.0 is in the last bin; Brier = mean (p − y)²; log loss in nats with p clipped to "
           "[1e-12, 1 − 1e-12]; y = 1 when the label is A.")

STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse;"
         "margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}td:first-child{text-align:left}"
         "img{max-width:100%}")


def calibration_html(title: str, facts: Mapping[str, str], tables: Sequence[tuple[str, Metrics]],
                     png: bytes) -> str:
    """``brrm calibrate``'s report: the fitted value and split, the metrics table, the reliability diagram."""
    items = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in facts.items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><ul>{items}</ul>"
            f"{metrics_table(tables)}<p>{html.escape(BINNING)}</p>"
            f"{img_tag(png, 'reliability diagram')}</body></html>\n")
