"""Rank models from pairwise judgments: ``brrm arena`` in Python.

Several models' answers to the same prompts (:mod:`brrm.arena.table`) are paired (:mod:`brrm.arena.pairing`:
against a baseline, or round robin), judged through any :class:`~brrm.RewardJudge` (:mod:`brrm.arena.judging`,
both orders for a generative judge), rated by a Bradley–Terry fit with seeded bootstrap intervals
(:mod:`brrm.arena.ratings`) and written out (:mod:`brrm.arena.outputs`)::

    import brrm
    from brrm.arena import run_arena

    result = run_arena(brrm.load(), "examples/arena.jsonl", baseline="model-a")
    print(result.markdown())
    result.write("arena-out")      # leaderboard.csv, battles.jsonl, failures.jsonl, categories.csv, report.html
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.arena.adaptive import AdaptiveRun
from brrm.arena.battles import BATTLE_FORMATS, BattleFile, read_battles
from brrm.arena.categories import CategoryBoard, by_category, summary, write_categories
from brrm.arena.judging import OUTCOMES, Battle, default_swap, judge_matchups
from brrm.arena.outputs import markdown, write_battles, write_leaderboard
from brrm.arena.pairing import STRATEGIES, Matchup, grid_size, plan
from brrm.arena.ratings import Leaderboard, Rating, check_anchor, fit
from brrm.arena.sources import read_table
from brrm.arena.style import answer_counts, standardised
from brrm.arena.table import ArenaTable, RowError, table_from_rows
from brrm.errors import ConfigError
from brrm.types import JudgeSpec, RewardJudge

if TYPE_CHECKING:
    import numpy as np

    from brrm.audit.ray_runner import RayOptions

__all__ = ["BATTLE_FORMATS", "OUTCOMES", "STRATEGIES", "AdaptiveRun", "ArenaResult", "ArenaTable", "Battle",
           "BattleFile", "CategoryBoard", "Leaderboard", "Matchup", "Rating", "RowError", "batch_judge", "by_category",
           "default_swap", "fit", "grid_size", "judge_matchups", "markdown", "plan", "rate", "rate_battles",
           "read_battles", "read_table", "rerate", "run_arena", "table_from_rows"]


@dataclass(frozen=True)
class ArenaResult:
    """An arena run: its input, the matchups judged, their battles, the leaderboard, the ratings by category
    (empty without categories), under adaptive pairing how it went (None otherwise), and notes on how it was rated
    (a re-rated battles file: :func:`rerate`)."""

    table: ArenaTable
    matchups: tuple[Matchup, ...]
    battles: tuple[Battle, ...]
    leaderboard: Leaderboard
    categories: tuple[CategoryBoard, ...] = ()
    adaptive: AdaptiveRun | None = None
    notes: tuple[str, ...] = ()

    def markdown(self) -> str:
        """The leaderboard as a markdown table (:func:`brrm.arena.outputs.markdown`), then one line per category
        (:func:`brrm.arena.categories.summary`) when the input has categories."""
        text = markdown(self.leaderboard)
        if self.adaptive is not None:
            a = self.adaptive
            text += (f"\nadaptive: {a.judged} judgments of a full round-robin grid of {a.grid} "
                     f"({a.judged / max(a.grid, 1):.0%}) in {a.rounds} rounds; stopped: {a.stopped}")
        return text + ("\n" + summary(self.categories) if self.categories else "")

    def write(self, folder: str | Path) -> dict[str, Path]:
        """Write ``leaderboard.csv``, ``battles.jsonl``, ``failures.jsonl``, (with categories) ``categories.csv``
        and ``report.html`` into ``folder`` (made if needed); returns name -> path."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        good, bad = write_battles(self.battles, out)
        paths = {"leaderboard": write_leaderboard(self.leaderboard, out / "leaderboard.csv"), "battles": good,
                 "failures": bad}
        if self.categories:
            paths["categories"] = write_categories(self.categories, out / "categories.csv")
        paths["report"] = out / "report.html"
        paths["report"].write_text(self.report(), encoding="utf-8")
        return paths

    def report(self) -> str:
        """The HTML report (:func:`brrm.arena.report.report_html`)."""
        from brrm.arena.report import report_html

        return report_html(self.leaderboard, self.battles, self.categories, self.table.source)


def run_arena(judge: RewardJudge | JudgeSpec, source: str | Path | ArenaTable | object, *, baseline: str | None = None,
              round_robin: bool = False, adaptive: bool = False, budget: int | None = None,
              target_ci: float | None = None, anchor: str | None = None, outcomes: str = "soft",
              swap: bool | None = None, style_control: bool = True, bootstrap: int = 200,
              confidence: float = 0.95, seed: int = 0, store: str | Path | None = None,
              progress: Callable[[float], None] | None = None,
              on_battle: Callable[[int, Battle], None] | None = None, ray: RayOptions | None = None) -> ArenaResult:
    """Judge and rate an arena.

    Args:
        judge: any :class:`~brrm.RewardJudge` (``brrm.load(...)``); with ``ray``, the :class:`~brrm.JudgeSpec`
            each Ray actor loads (the driver loads no model).
        source: a JSON Lines or Parquet long table, an Arena-Hard-Auto folder, a Hugging Face dataset (object,
            folder or cached hub id; one split) (:func:`read_table`) or an :class:`ArenaTable`.
        baseline: every model meets this one (Arena-Hard-Auto's design); None needs ``round_robin`` or
            ``adaptive``.
        round_robin: every pair of models on every prompt.
        adaptive: judge the pairs that decide the ranking until it is separated (:mod:`brrm.arena.adaptive`),
            within ``budget`` judgments and ``target_ci`` rating points.
        anchor: the model rated 1000 (default: the baseline; neither: the geometric mean).
        outcomes: ``soft`` (P(A ≻ B) as a fractional win) or ``hard`` (votes; reproduces vote leaderboards).
        swap: judge both orders; None: yes for a generative judge (:func:`default_swap`).
        style_control: also fit the ratings with length and markdown counts as covariates (:mod:`brrm.arena.style`).
        bootstrap, confidence, seed: the intervals (:func:`brrm.arena.ratings.fit`).
        store: a folder whose audit store keeps every battle as it is judged (:mod:`brrm.arena.resume`): a rerun
            judges only what is missing. None: no store.
        progress: called with the pairs just judged; on_battle: each battle as it is judged (without a store;
            the index is within its batch under ``adaptive``).
        ray: judge on a Ray actor pool (:mod:`brrm.arena.ray`; needs ``store``); None: in this process.

    Raises:
        ConfigError: for a bad table (:func:`read_table`), pairing (:func:`plan`), outcomes or fit setting, or
            ``ray`` without a ``store``.
        BackendUnavailable: with ``ray`` when Ray is not installed.
    """
    from brrm.arena.adaptive import run_adaptive

    if outcomes not in OUTCOMES:
        raise ConfigError(f"--outcomes {outcomes!r} is not valid; expected one of {', '.join(OUTCOMES)}")
    table = source if isinstance(source, ArenaTable) else read_table(source)
    check_anchor(anchor, table.models, table.source)  # before anything is judged
    if ray is not None and store is None:
        raise ConfigError("judging on Ray needs a store folder (--output): the driver commits each batch there")
    judge_fn = batch_judge(judge, table, swap=default_swap(judge) if swap is None else swap, store=store,
                           progress=progress, on_battle=on_battle, ray=ray)
    run = None
    if adaptive:
        if baseline is not None or round_robin:
            raise ConfigError("--adaptive chooses its own pairs: pass it without --baseline or --round-robin")
        run = run_adaptive(table, judge_fn, outcomes=outcomes, anchor=anchor, budget=budget, target_ci=target_ci,
                           bootstrap=bootstrap, confidence=confidence, seed=seed)
        matchups, battles = run.matchups, list(run.battles)
    else:
        matchups = tuple(plan(table, "round_robin" if round_robin else "baseline", baseline))
        if not matchups:
            raise ConfigError(f"no matchup to judge in {table.source}: no prompt has answers of both models of a "
                              f"pair")
        battles = judge_fn(matchups)
    board = rate(table, battles, outcomes=outcomes, anchor=anchor, baseline=baseline, style_control=style_control,
                 bootstrap=bootstrap, confidence=confidence, seed=seed)
    categories = by_category(battles, table.models, outcomes=outcomes, anchor=anchor or baseline, baseline=baseline,
                             bootstrap=bootstrap, confidence=confidence, seed=seed)
    return ArenaResult(table, matchups, tuple(battles), board, categories, run)


def rerate(source: BattleFile | str | Path, *, table: ArenaTable | None = None, format: str | None = None,
           baseline: str | None = None, anchor: str | None = None, outcomes: str = "soft",
           style_control: bool = True, bootstrap: int = 200, confidence: float = 0.95,
           seed: int = 0) -> ArenaResult:
    """Rate battles already judged (``brrm arena --battles``; :mod:`brrm.arena.battles`): the same fit, intervals,
    style control, length-controlled win rates and categories as :func:`run_arena`, and no model is loaded.

    Args:
        source: a :class:`~brrm.arena.battles.BattleFile`, or what :func:`~brrm.arena.battles.read_battles` reads.
        table: the models' answers (any input of :func:`read_table`), joined by prompt id: style counts and
            lengths when the battles carry none (LMArena's ``conv_metadata`` comes first); None: without them.
        format: the battles' format (default: detected); baseline: the model the win rates are against (default:
            Arena-Hard-Auto's baseline named in the file; a v0.1 file needs it); the rest as :func:`run_arena`.

    Raises:
        ConfigError: as :func:`~brrm.arena.battles.read_battles` and :func:`rate_battles`, or for a ``baseline``
            that is in no battle.
    """
    from brrm.arena.battles import read_battles, style_inputs
    from brrm.arena.table import Prompt

    if outcomes not in OUTCOMES:
        raise ConfigError(f"--outcomes {outcomes!r} is not valid; expected one of {', '.join(OUTCOMES)}")
    bf = source if isinstance(source, BattleFile) else read_battles(source, format=format, baseline=baseline)
    baseline = baseline or bf.baseline or None
    models = tuple(dict.fromkeys([*(table.models if table is not None else ()), *bf.models]))
    if baseline is not None and baseline not in bf.models:
        raise ConfigError(f"--baseline {baseline!r} is in no battle of {bf.source}; models: {', '.join(bf.models)}")
    check_anchor(anchor, models, bf.source)
    counts, lengths, note = style_inputs(bf, table, style_control=style_control)
    votes = outcomes == "soft" and all(math.isnan(b.p_a) for b in bf.battles if b.ok)
    outcomes = "hard" if votes else outcomes  # said as it is rated, in the note and the leaderboard's own footer
    board = rate_battles(models, bf.battles, counts=counts, lengths=lengths, outcomes=outcomes, anchor=anchor,
                         baseline=baseline, bootstrap=bootstrap, confidence=confidence, seed=seed)
    categories = by_category(bf.battles, models, outcomes=outcomes, anchor=anchor or baseline, baseline=baseline,
                             bootstrap=bootstrap, confidence=confidence, seed=seed)
    prompts = table.prompts if table is not None else {
        b.prompt_id: Prompt(b.prompt_id, "", b.category, 0) for b in bf.battles}
    arena = ArenaTable(prompts, table.answers if table is not None else {}, models, bf.errors, bf.source)
    notes = (f"hard outcomes: no battle of {bf.source} carries a P(A > B) (p_a), so each enters "
             "as its vote (ties half)",) if votes else ()
    return ArenaResult(arena, (), bf.battles, board, categories, notes=notes + ((note,) if note else ()))


def batch_judge(judge: RewardJudge | JudgeSpec, table: ArenaTable, *, swap: bool, store: str | Path | None = None,
                progress: Callable[[float], None] | None = None,
                on_battle: Callable[[int, Battle], None] | None = None,
                ray: RayOptions | None = None) -> Callable[[Sequence[Matchup]], list[Battle]]:
    """A function judging a batch of matchups of ``table``: :func:`judge_matchups`, or with a ``store`` folder
    :func:`brrm.arena.resume.judge_resumable` (what the store holds is not judged again; on a Ray actor pool
    with ``ray``, ``judge`` then being a :class:`~brrm.JudgeSpec`)."""
    def judged(matchups: Sequence[Matchup]) -> list[Battle]:
        if store is None:
            if isinstance(judge, JudgeSpec):
                raise ConfigError("a JudgeSpec judges an arena on Ray, with a store folder")
            return judge_matchups(judge, table, matchups, swap=swap, progress=progress, on_battle=on_battle)
        from brrm.arena.resume import judge_resumable

        return judge_resumable(judge, table, matchups, swap=swap, folder=store, progress=progress, ray=ray)[0]

    return judged


def rate(table: ArenaTable, battles: Sequence[Battle], *, outcomes: str = "soft", anchor: str | None = None,
         baseline: str | None = None, style_control: bool = True, bootstrap: int = 200, confidence: float = 0.95,
         seed: int = 0) -> Leaderboard:
    """The leaderboard of judged ``battles`` over ``table``: :func:`rate_battles` with the style counts
    (:func:`brrm.arena.style.answer_counts`, when ``style_control``) and lengths
    (:func:`brrm.arena.length.response_lengths`, with a ``baseline``) of the table's answers.

    Raises:
        ConfigError: as :func:`brrm.arena.ratings.fit`.
    """
    from brrm.arena.length import response_lengths

    return rate_battles(table.models, battles, counts=answer_counts(table, battles) if style_control else None,
                        lengths=response_lengths(table, battles) if baseline is not None else None,
                        outcomes=outcomes, anchor=anchor, baseline=baseline, bootstrap=bootstrap,
                        confidence=confidence, seed=seed)


def rate_battles(models: Sequence[str], battles: Sequence[Battle], *, counts: np.ndarray | None = None,
                 lengths: Sequence[tuple[float, float]] | None = None, outcomes: str = "soft",
                 anchor: str | None = None, baseline: str | None = None, bootstrap: int = 200,
                 confidence: float = 0.95, seed: int = 0) -> Leaderboard:
    """The leaderboard of ``battles`` between ``models``: the Bradley–Terry fit and intervals
    (:func:`brrm.arena.ratings.fit`), the style-controlled ratings when ``counts`` are given (each battle's answers'
    :data:`~brrm.arena.style.FEATURES`, shape ``(len(battles), 2, 4)``; standardised over the battles with a
    verdict, the ones the fit uses: :func:`brrm.arena.style.standardised`) and, with a ``baseline`` and
    ``lengths`` (each battle's answer lengths), the length-controlled win rates (:mod:`brrm.arena.length`). With
    fewer than 2 verdicts every model is ``unrated``, the reason in each row (see :func:`brrm.arena.ratings.fit`,
    also for an anchor without a verdict): the battles and their failures are still the result.

    Raises:
        ConfigError: as :func:`brrm.arena.ratings.fit`.
    """
    from dataclasses import replace

    from brrm.arena.length import lc_win_rates

    style = None
    if counts is not None:
        import numpy as np

        kept = [k for k, b in enumerate(battles) if b.ok]
        style = np.zeros((len(battles), 4))
        style[kept] = standardised(np.asarray(counts, dtype=np.float64)[kept].reshape(-1, 2, 4))
    board = fit(battles, models, outcomes=outcomes, anchor=anchor, baseline=baseline, bootstrap=bootstrap,
                confidence=confidence, seed=seed, style=style)
    if baseline is None or lengths is None or not board.fitted:
        return board
    lc = lc_win_rates(models, battles, lengths, baseline, outcomes)
    return replace(board, ratings=tuple(replace(r, lc_win_rate=lc[r.model]) for r in board.ratings))
