"""Calibration beside accuracy in ``brrm bench``: ECE, Brier score, log loss and the reliability diagram.

Every presentation with an ok judgment, a measured P(A ≻ B) and a gold ``A`` or ``B`` is one observation, in the
pair frame (a swapped presentation's P is mirrored: P(response i ≻ response j) = 1 − p_a), y = 1 when the gold
says response i is better. Ties in the gold are left out. A scalar model's presentations carry σ(r_i − r_j), so
its calibration is measured the same way. With a calibrated judge (``--calibration``) the raw probabilities
(``p_a_raw``) are measured too. ``report.html`` in the output folder holds the score table, the metrics and the
diagram (one self-contained file).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.bench.core import BenchResult, ItemResult
from brrm.errors import install_extra
from brrm.types import Verdict

if TYPE_CHECKING:
    from brrm.calibration.fit import Metrics

REPORT_FILE = "report.html"


def observations(results: Sequence[ItemResult]) -> tuple[list[float], list[float], list[int]]:
    """(P, raw P (NaN when uncalibrated), y) over every usable presentation, in the pair frame."""
    p, raw, y = [], [], []
    for r in results:
        for s in r.shown:
            gold = r.item.pairs[s.pair].gold
            j = s.judgment
            if not j.ok or not math.isfinite(j.p_a) or gold not in (Verdict.A, Verdict.B):
                continue
            p.append(1.0 - j.p_a if s.swapped else j.p_a)
            raw.append(1.0 - j.p_a_raw if s.swapped else j.p_a_raw)
            y.append(1 if gold is Verdict.A else 0)
    return p, raw, y


def measure_results(results: Sequence[ItemResult]) -> list[tuple[str, Metrics]]:
    """[(label, Metrics)]: ``P(A ≻ B)`` and, for a calibrated judge, ``raw``; empty when nothing to measure."""
    from brrm.calibration import measure

    p, raw, y = observations(results)
    if not p:
        return []
    out = [("P(A ≻ B)", measure(p, y))]
    if all(math.isfinite(x) for x in raw):
        out.insert(0, ("raw (before calibration)", measure(raw, y)))
    return out


def summary_line(metrics: Sequence[tuple[str, Metrics]]) -> str:
    """One line for the terminal (empty when nothing was measured)."""
    parts = [f"{label}: ECE {m.ece:.4f}, Brier {m.brier:.4f}, log loss {m.log_loss:.4f}" for label, m in metrics]
    return (f"calibration over {metrics[-1][1].n} labelled presentations (10 equal-width bins of P): "
            + "; ".join(parts)) if metrics else ""


def write_report(folder: Path, result: BenchResult, metrics: Sequence[tuple[str, Metrics]], overlap: str = "") -> Path:
    """``report.html``: the score table, then the calibration table and reliability diagram when measured, and
    ``overlap`` (how many pairs the applied calibration was fitted on, a sentence) when given."""
    from brrm.bench.report import table_lines
    from brrm.calibration.report import BINNING, STYLE, img_tag, metrics_table, reliability_png

    head, _, *body = table_lines(result, markdown=True)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in (head, *body)]
    table = "<table>" + "".join("<tr>" + "".join(f"<{'th' if k == 0 else 'td'}>{html.escape(c)}</"
                                                 f"{'th' if k == 0 else 'td'}>" for c in row) + "</tr>"
                                for k, row in enumerate(cells)) + "</table>"
    parts = [f"<h1>{html.escape(result.benchmark)}: {html.escape(str(result.judge.get('model', 'replay')))}</h1>",
             f"<p>{html.escape(result.metric)}; headline {html.escape(result.headline)}</p>", table]
    if metrics:
        import importlib.util

        parts += ["<h2>Calibration of P(A ≻ B)</h2>", metrics_table(metrics), f"<p>{html.escape(BINNING)}</p>"]
        parts += [f"<p>calibration's own data: {html.escape(overlap)}</p>"] if overlap else []
        parts.append(img_tag(reliability_png(list(metrics), title=f"{result.benchmark}: reliability of P(A ≻ B)"),
                             "reliability diagram") if importlib.util.find_spec("matplotlib") is not None else
                     f"<p>(the reliability diagram needs matplotlib: {html.escape(install_extra('audit'))})</p>")
    else:
        parts.append("<p>No presentation has a measured P(A ≻ B) against a gold A/B: no calibration to show.</p>")
    parts += [f"<p>note: {html.escape(n)}</p>" for n in result.notes]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>brrm bench {html.escape(result.benchmark)}"
            f"</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
    path = folder / REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path
