"""The report's plots, drawn by matplotlib from the JSON summary and embedded as base64 PNG data URIs.

Figures use matplotlib's object-oriented API (``matplotlib.figure.Figure`` with the Agg canvas: no pyplot
state, no display) with mathtext off, so a ``$`` in a slice value or a dimension name is drawn as text.
Every plot of a summary is listed by :func:`plots_for`; the report embeds each one, so a viewer needs no
network.
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brrm.audit.summary import number, numbers, part
from brrm.types.jsonvalue import JSONValue

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STATUS_COLORS = {"ok": "#4c78a8", "A": "#4c78a8", "B": "#f58518", "tie": "#9d9d9d", "parse_failure": "#e45756",
                 "truncated": "#b279a2", "backend_error": "#ff9da6", "empty": "#bab0ac", "invalid_input": "#72b7b2",
                 "pending": "#dddddd"}

FAILURES = ("parse_failure", "truncated", "backend_error", "empty")
"""Statuses drawn as failure rates (over judged rows), next to the invalid-input rate (over all rows)."""


Figures = Mapping[str, JSONValue]
"""A part of the JSON summary (:func:`brrm.audit.summary.build_summary`): its figures by name."""


@dataclass(frozen=True)
class Plot:
    """One embedded plot: a stable id (``data-plot`` in the HTML), a title, alt text and the PNG data URI."""

    id: str
    title: str
    alt: str
    data_uri: str


def plots_for(summary: Figures) -> list[Plot]:
    """Every plot of a summary: the overall ones for its shape, then one per ``--slice-by`` column."""
    shape = str(part(summary["run"])["shape"])
    overall = part(summary["overall"])
    makers: dict[str, list[tuple[str, str, Callable[[Axes, Figures], None]]]] = {
        "pairs": [("verdicts", "Verdicts and statuses", _verdicts),
                  ("p_a_histogram", "P(A ≻ B) histogram (ok judgments)", _p_histogram),
                  ("dimensions", "Turn-1 dimension frequencies", _dimensions),
                  ("position", "Position consistency and first-shown win rate", _position),
                  ("failure_rates", "Parse-failure, truncation and other failure rates", _failures)],
        "single": [("statuses", "Statuses", _statuses),
                   ("rewards", "Reward distribution (ok rewards)", _reward_histogram),
                   ("failure_rates", "Truncation and other failure rates", _failures)],
        "groups": [("statuses", "Group statuses", _statuses),
                   ("rewards", "Reward distribution (ok rewards)", _reward_histogram),
                   ("best_position", "Where the best response stood in its group", _best_position),
                   ("dimensions", "Turn-1 dimension frequencies", _dimensions),
                   ("failure_rates", "Failure rates (groups; judgments inside them)", _failures)],
    }
    out = [_draw(pid, title, fn, overall) for pid, title, fn in makers[shape]
           if pid != "failure_rates" or any_failure(overall)]  # all zero: the overview says so in a sentence
    out += [_draw(f"slice:{col}", f"By {col}", functools.partial(_slice, shape=shape), part(part(data)["values"]))
            for col, data in part(summary["slices"]).items()]
    return out


def reliability_plot(summary: Figures) -> Plot | None:
    """The reliability diagram of a pairwise audit with labelled pairs (None otherwise)."""
    cal = part(summary["overall"]).get("calibration") if part(summary["run"])["shape"] == "pairs" else None
    if not cal or not part(cal)["labelled"]:
        return None
    return _draw("reliability", "Reliability of P(A ≻ B) against the labels", _reliability, part(cal))


def failure_values(f: Figures) -> tuple[list[str], list[float | None]]:
    """(labels, rates) of the failure chart: each failure status over judged rows, invalid input over all rows
    (None: no rate)."""
    labels = [*FAILURES, "invalid_input"]
    rates = part(f["rates"])
    values = [number(rates[k]) for k in FAILURES] + [number(f["invalid_input_rate"])]
    if "judgments" in f:  # groups: failures inside the groups' judgments too
        labels += ["judgment parse_failure", "judgment truncated"]
        judgments = part(f["judgments"])
        values += [number(judgments["parse_failure_rate"]), number(judgments["truncation_rate"])]
    return labels, values


def any_failure(f: Figures) -> bool:
    """Whether any failure rate of the chart is above zero (None and NaN count as zero)."""
    return any(v for v in failure_values(f)[1] if v is not None and v == v)


def _draw(pid: str, title: str, fn: Callable[[Axes, Figures], None], data: Figures) -> Plot:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"text.parse_math": False, "font.size": 9, "svg.fonttype": "none"}):
        fig = Figure(figsize=(5.6, 3.2), dpi=96, layout="constrained")
        ax = fig.add_subplot()
        fn(ax, data)
        ax.set_title(title)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return Plot(pid, title, f"{title} (plot)", uri)


def _bars(ax: Axes, labels: Sequence[str], values: Sequence[float | None], *, colors: Sequence[str] | None = None,
          ylabel: str = "", fmt: str = "{:g}") -> None:
    xs = range(len(labels))
    heights = [0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]
    ax.bar(xs, heights, color=colors or "#4c78a8")
    ax.set_xticks(list(xs), [str(lab) for lab in labels], rotation=20 if len(labels) > 5 else 0, ha="right"
                  if len(labels) > 5 else "center")
    for x, v in zip(xs, values, strict=True):
        text = "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
        ax.annotate(text, (x, 0 if text == "n/a" else v), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    if not labels:
        _empty(ax)


def _empty(ax: Axes, text: str = "nothing to show") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")


def _verdicts(ax: Axes, f: Figures) -> None:
    by_status, verdicts = part(f["by_status"]), part(f["verdicts"])
    labels = ["A", "B", "tie"] + [s for s in (*FAILURES, "invalid_input") if by_status.get(s)]
    values = [number(verdicts[k]) for k in ("A", "B", "tie")] + [number(by_status[s]) for s in labels[3:]]
    _bars(ax, labels, values, colors=[STATUS_COLORS[k] for k in labels], ylabel="rows")


def _statuses(ax: Axes, f: Figures) -> None:
    by_status = part(f["by_status"])
    labels = list(by_status)
    _bars(ax, labels, [number(by_status[k]) for k in labels], colors=[STATUS_COLORS.get(k, "#4c78a8") for k in labels],
          ylabel="rows")


def _histogram(ax: Axes, hist: Figures, xlabel: str) -> None:
    edges, counts = numbers(hist["edges"]), numbers(hist["counts"])
    if not counts:
        _empty(ax, "no ok value")
        return
    widths = [edges[k + 1] - edges[k] for k in range(len(counts))]
    ax.bar(edges[:-1], counts, width=widths, align="edge", color="#4c78a8", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")


def _p_histogram(ax: Axes, f: Figures) -> None:
    p = part(f["p_a"])
    _histogram(ax, part(p.get("fine_histogram") or p["histogram"]), "P(A ≻ B)")
    if not part(p["histogram"])["counts"]:
        return
    ax.axvline(0.5, color="#333333", linestyle=":", linewidth=1)
    ax.set_xlim(0, 1)
    values = numbers(p.get("values") or [])
    if values:  # every value as a tick under the bars: eight values near 0.5 show as eight ticks
        top = max(numbers(part(p.get("fine_histogram", p["histogram"]))["counts"]))
        ax.plot(values, [-0.06 * top] * len(values), "|", color="#e45756", markersize=9, alpha=0.7,
                label=f"each value (n={len(values)})")
        ax.set_ylim(-0.12 * top, 1.1 * top)
        ax.legend(fontsize=7, loc="upper left")


def _reliability(ax: Axes, cal: Figures) -> None:
    ax.plot((0, 1), (0, 1), ls="--", color="#555555", lw=1, label="perfect calibration")
    series = [("raw", cal["raw"], "#9d9d9d"), ("P(A ≻ B)", cal["measured"], "#4c78a8")] if cal["raw"] else \
        [("P(A ≻ B)", cal["measured"], "#4c78a8")]
    for name, measured, color in series:
        m = part(measured)
        bins = [part(b) for b in m["bins"]] if isinstance(m["bins"], list) else []
        pts = [(numbers([b["mean_p"]])[0], numbers([b["frac_a"]])[0], b["n"]) for b in bins if b["n"]]
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "-o", color=color, markersize=4,
                label=f"{name}: ECE {m['ece']:.3f}, Brier {m['brier']:.3f}, n {m['n']}")
        for x, y, n in pts:
            ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(0, 5), fontsize=7, ha="center")
    ax.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="predicted P(A ≻ B) (bin mean; labels: pairs per bin)",
           ylabel="fraction labelled A")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _reward_histogram(ax: Axes, f: Figures) -> None:
    _histogram(ax, part(part(f["reward"])["histogram"]), "reward")


def _dimensions(ax: Axes, f: Figures) -> None:
    freq = part(part(f["dimensions"])["frequencies"])
    if not freq:
        _empty(ax, "no turn-1 dimensions (scalar model, or no judgment reached turn 1)")
        return
    names = list(freq)[::-1]
    ax.barh(range(len(names)), [number(freq[n]) or 0.0 for n in names], color="#54a24b")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of judgments choosing it")


def _position(ax: Axes, f: Figures) -> None:
    p = part(f["position"])
    if not p["applies"]:
        _empty(ax, "not applicable: a scalar model's verdict does not depend on the order")
        return
    _bars(ax, ["swap consistency", "first-shown win rate"],
          [number(p["consistency_rate"]), number(p["first_shown_win_rate"])],
          ylabel="rate", fmt="{:.3f}")
    ax.axhline(0.5, color="#333333", linestyle=":", linewidth=1)
    ax.set_ylim(0, 1.1)


def _failures(ax: Axes, f: Figures) -> None:
    labels, values = failure_values(f)
    _bars(ax, labels, values, colors=[STATUS_COLORS.get(k.split()[-1], "#4c78a8") for k in labels], ylabel="rate",
          fmt="{:.3f}")
    finite = [v for v in values if v is not None and v == v]
    ax.set_ylim(0, max(0.05, 1.2 * max(finite, default=0.0)))


def _best_position(ax: Axes, f: Figures) -> None:
    best = part(f["best_position"])
    _bars(ax, [f"#{k}" for k in best], [number(v) for v in best.values()], ylabel="groups")


def _slice(ax: Axes, slices: Figures, shape: str) -> None:
    names = list(slices)
    values = [part(v) for v in slices.values()]

    def rates(figure: str, name: str) -> list[float | None]:
        return [number(part(v[figure])[name]) for v in values]

    if shape == "pairs":
        series = {"win rate of A": rates("win_rate_a", "rate"), "accuracy": rates("agreement", "accuracy"),
                  "parse-failure rate": rates("rates", "parse_failure"), "truncation rate": rates("rates", "truncated")}
    else:
        series = {"truncation rate": rates("rates", "truncated"), "backend-error rate": rates("rates", "backend_error"),
                  "invalid-input rate": [number(v["invalid_input_rate"]) for v in values]}
        if shape == "groups":
            series["judgment parse-failure rate"] = rates("judgments", "parse_failure_rate")
    width = 0.8 / len(series)
    for k, (label, ys) in enumerate(series.items()):
        ax.bar([x + k * width for x in range(len(names))], [0.0 if y is None else y for y in ys], width=width,
               label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names, rotation=20 if len(names) > 4 else 0,
                  ha="right" if len(names) > 4 else "center")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("rate")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, never over, bars
