"""Adaptive pairing: judge the pairs whose outcome decides the ranking, not the whole grid. Each round fits the battles
so far (:func:`brrm.arena.ratings.fit`, its seeded bootstrap at the requested confidence), orders the models by
rating, and looks at each *adjacent* pair of the order: it is settled when the bootstrap interval of the pair's
rating difference excludes 0 (the pair is separated at that confidence) or, with ``target_ci``, when both models'
intervals' half-widths are at most ``target_ci`` rating points (two models too close to separate stop spending
judgments). The next round judges ``step`` more prompts of every unsettled adjacent pair — a direct battle is the
one that narrows both intervals of that pair most. It starts with ``init`` prompts of every pair of models (so every
model is placed), and stops when every adjacent pair is settled, when ``budget`` judgments are spent, or when the
unsettled pairs have no prompt left. While fewer than two battles have a verdict nothing can be ordered: every pair
stays open (its leaderboard every model ``unrated``, saying why). Prompts are taken per pair in a seeded shuffled
order; presentation order alternates per pair. Everything is deterministic in ``seed``, so with a store
(:mod:`brrm.arena.resume`) a rerun takes the same decisions and judges nothing it has.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from brrm.arena.judging import Battle
from brrm.arena.pairing import Matchup, grid_size
from brrm.arena.ratings import Leaderboard, fit
from brrm.arena.table import ArenaTable
from brrm.errors import ConfigError

STOPS = ("separated", "budget", "exhausted")
"""Why an adaptive run stopped: every adjacent pair settled, the budget spent, no prompt left to narrow them."""

JudgeFn = Callable[[Sequence[Matchup]], list[Battle]]
"""Judges a batch of matchups (:func:`brrm.arena.judging.judge_matchups` or the store's resumable form)."""


@dataclass(frozen=True)
class AdaptiveRun:
    """An adaptive run: every battle judged, the rounds, why it stopped (:data:`STOPS`), the judgments it used
    and the full round-robin grid's count (``grid``), and the last fit."""

    battles: tuple[Battle, ...]
    matchups: tuple[Matchup, ...]
    rounds: int
    stopped: str
    judged: int
    grid: int
    leaderboard: Leaderboard


def unsettled(board: Leaderboard, target_ci: float | None) -> list[tuple[str, str]]:
    """The adjacent pairs of ``board``'s order (rated models) not separated at its confidence — the bootstrap
    interval of their difference holds 0 (:attr:`~brrm.arena.ratings.Rating.above_next` < (1 + c) / 2) — and,
    with ``target_ci``, not both narrower than ``target_ci`` points either side."""
    rated = [r for r in board.ratings if r.status != "unrated"]
    out = []
    for hi, lo in zip(rated, rated[1:], strict=False):
        if hi.above_next >= (1.0 + board.confidence) / 2.0:
            continue
        if target_ci is not None and max(hi.upper - hi.lower, lo.upper - lo.lower) / 2.0 <= target_ci:
            continue
        out.append((hi.model, lo.model))
    return out


def run_adaptive(table: ArenaTable, judge_fn: JudgeFn, *, outcomes: str = "soft", anchor: str | None = None,
                 budget: int | None = None, target_ci: float | None = None, init: int = 2, step: int = 4,
                 bootstrap: int = 200, confidence: float = 0.95, seed: int = 0,
                 on_round: Callable[[int, int, int], None] | None = None) -> AdaptiveRun:
    """Judge adaptively (see the module docstring).

    Args:
        table: the answers.
        judge_fn: judges a batch of matchups.
        outcomes, anchor, bootstrap, confidence, seed: the fit of each round (:func:`brrm.arena.ratings.fit`).
        budget: the most judgments (matchups) to spend, >= 1; None: no limit.
        target_ci: settle an overlapping adjacent pair once both half-widths are <= this many points, > 0.
        init: prompts of every pair judged first, >= 1; step: prompts added per unsettled pair per round, >= 1.
        on_round: ``on_round(round, judged, unsettled pairs)`` after each round's fit.

    Raises:
        ConfigError: for a budget, target, ``init`` or ``step`` out of range, or what the fit raises.
    """
    for name, value in (("--budget", budget), ("init", init), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if target_ci is not None and not target_ci > 0:
        raise ConfigError(f"--target-ci must be > 0 rating points, got {target_ci!r}")
    queues = _queues(table, seed)
    used = {pair: 0 for pair in queues}
    battles: list[Battle] = []
    matchups: list[Matchup] = []
    wanted = {pair: init for pair in queues}
    rounds, stopped = 0, "exhausted"
    while True:
        batch = _take(queues, used, wanted, (budget - len(matchups)) if budget is not None else None)
        if batch:
            matchups.extend(batch)
            battles.extend(judge_fn(batch))
        if not battles:
            raise ConfigError("adaptive pairing found no pair of models with a common prompt")
        rounds += 1
        board = fit(battles, table.models, outcomes=outcomes, anchor=anchor, bootstrap=bootstrap,
                    confidence=confidence, seed=seed)
        open_pairs = _open_pairs(board, target_ci, queues, used)
        if not board.fitted and not batch:  # no verdict to order by and no prompt left
            break
        if on_round is not None:
            on_round(rounds, len(matchups), len(open_pairs))
        if not open_pairs:  # settled, or (nothing fitted) every prompt tried
            stopped = "separated" if board.fitted else "exhausted"
            break
        if budget is not None and len(matchups) >= budget:
            stopped = "budget"
            break
        keys = [tuple(sorted(p, key=table.models.index)) for p in open_pairs]
        if all(used[k] >= len(queues[k]) for k in keys):
            break
        wanted = {k: step for k in keys}
    return AdaptiveRun(tuple(battles), tuple(matchups), rounds, stopped, len(matchups),
                       grid_size(table, "round_robin"), board)


def _open_pairs(board: Leaderboard, target_ci: float | None, queues: dict[tuple[str, ...], list[str]],
                used: dict[tuple[str, ...], int]) -> list[tuple[str, ...]]:
    """The pairs the next round judges: the :func:`unsettled` adjacent pairs, and every pair of a model that has no
    verdict yet (it is placed nowhere) while the pair has prompts left — every such pair when nothing is fitted."""
    waiting = {r.model for r in board.ratings if r.status == "unrated"}
    retry = [k for k in queues if waiting & set(k) and used[k] < len(queues[k])]
    return [*unsettled(board, target_ci), *retry] if board.fitted else retry


def _queues(table: ArenaTable, seed: int) -> dict[tuple[str, ...], list[str]]:
    """Each pair of models (in table order) -> its common prompts in a seeded shuffled order."""
    out: dict[tuple[str, ...], list[str]] = {}
    for k, (a, b) in enumerate(combinations(table.models, 2)):
        common = [p for p in table.prompts if table.answer(p, a) and table.answer(p, b)]
        random.Random(f"{seed}:{k}").shuffle(common)
        out[(a, b)] = common
    return out


def _take(queues: dict[tuple[str, ...], list[str]], used: dict[tuple[str, ...], int],
          wanted: dict[tuple[str, ...], int], room: int | None) -> list[Matchup]:
    """The next prompts of each wanted pair (at most ``room`` in all), advancing ``used``."""
    out: list[Matchup] = []
    for pair, n in wanted.items():
        a, b = pair
        for _ in range(n):
            if used[pair] >= len(queues[pair]) or (room is not None and len(out) >= room):
                break
            pid = queues[pair][used[pair]]
            out.append(Matchup(pid, a, b) if used[pair] % 2 == 0 else Matchup(pid, b, a))
            used[pair] += 1
    return out
