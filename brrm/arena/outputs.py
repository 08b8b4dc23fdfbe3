"""What an arena writes: ``leaderboard.csv``, the markdown table printed, ``battles.jsonl`` (every battle with a
verdict, in LMArena's columns ``model_a``, ``model_b``, ``winner`` ∈ ``model_a`` / ``model_b`` / ``tie`` plus its
provenance, so arena-rank and the FastChat notebooks read it as is) and ``failures.jsonl`` (the battles without a
verdict, with their reason: kept out of ``battles.jsonl`` because those readers would count a missing winner as a
loss of ``model_a``).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

from brrm.arena.judging import Battle
from brrm.arena.ratings import Leaderboard

COLUMNS = ("model", "rating", "rating_lower", "rating_upper", "rank", "rank_best", "rank_worst", "win_rate",
           "lc_win_rate", "judgments", "failures", "status", "reason", "rating_style", "rating_style_lower",
           "rating_style_upper", "above_next")
"""The columns of ``leaderboard.csv`` (an empty cell: not defined, e.g. the baseline's win rate)."""


def _cell(x: float, digits: int = 1) -> str:
    return "" if math.isnan(x) else f"{x:.{digits}f}"


def write_leaderboard(board: Leaderboard, path: Path) -> Path:
    """Write ``leaderboard.csv`` (:data:`COLUMNS`, best first); returns ``path``."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in board.ratings:
            ranks = ("", "") if r.status == "unrated" else (r.rank_best, r.rank_worst)  # no interval: no range
            w.writerow([r.model, _cell(r.rating, 2), _cell(r.lower, 2), _cell(r.upper, 2), r.rank, *ranks,
                        _cell(r.win_rate, 4), _cell(r.lc_win_rate, 4), r.judgments, r.failures, r.status, r.reason,
                        _cell(r.style_rating, 2), _cell(r.style_lower, 2), _cell(r.style_upper, 2),
                        _cell(r.above_next, 3)])
    return path


def write_battles(battles: Sequence[Battle], folder: Path) -> tuple[Path, Path]:
    """Write ``battles.jsonl`` (ok battles) and ``failures.jsonl`` (the rest) into ``folder``; returns both."""
    good, bad = folder / "battles.jsonl", folder / "failures.jsonl"
    with good.open("w", encoding="utf-8") as g, bad.open("w", encoding="utf-8") as f:
        for b in battles:
            (g if b.ok else f).write(json.dumps(b.to_dict(), ensure_ascii=False) + "\n")
    return good, bad


def markdown(board: Leaderboard) -> str:
    """The leaderboard as a markdown table: rank range, rating, interval, the style-controlled rating and interval
    (when fitted), win rate and length-controlled win rate vs the baseline (with one), judgments, failures; then
    how it was fitted."""
    level = f"{board.confidence:.0%}"
    head = ["rank", "model", "rating", f"{level} interval"]
    if board.style:
        head.append("style-controlled")
    if board.baseline:
        head += [f"win rate vs {board.baseline}", "LC win rate"]
    head += ["judgments", "failures", "note"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for r in board.ratings:
        rank = f"{r.rank_best}" if r.rank_best == r.rank_worst else f"{r.rank_best}-{r.rank_worst}"
        cells = ["-" if r.status == "unrated" else rank, r.model,
                 _cell(r.rating) or "-", "-" if math.isnan(r.lower) else f"[{r.lower:.1f}, {r.upper:.1f}]"]
        if board.style:
            cells.append("-" if math.isnan(r.style_rating) else
                         f"{r.style_rating:.1f} [{r.style_lower:.1f}, {r.style_upper:.1f}]")
        if board.baseline:
            cells += ["-" if math.isnan(x) else f"{x:.1%}" for x in (r.win_rate, r.lc_win_rate)]
        cells += [str(r.judgments), str(r.failures), "" if r.status == "ok" else r.status]
        lines.append("| " + " | ".join(cells) + " |")
    anchor = f"{board.anchor} = 1000" if board.anchor else "geometric mean = 1000"
    if not board.fitted:
        lines.append(f"\nno ratings: {board.reason}; {board.judgments} judgments, {board.failures} failures")
        return "\n".join(lines)
    lines.append(f"\nBradley-Terry ({board.library}), {board.outcomes} outcomes, {anchor}; {level} intervals from "
                 f"{board.bootstrap} seeded bootstrap resamples (seed {board.seed}); {board.judgments} judgments, "
                 f"{board.failures} failures")
    if board.style:
        lines.append("style control (Elo points per s.d. of the normalised difference): "
                     + ", ".join(f"{name} {value:+.1f}" for name, value in board.style))
    return "\n".join(lines)
