"""Which pairs of answers an arena judges: every model against one baseline on every prompt (Arena-Hard-Auto's
design), or every pair of models on every prompt (round robin).

A matchup is skipped when either model has no answer to its prompt (:attr:`brrm.arena.table.ArenaTable.missing`
reports those). Which answer is shown first alternates from matchup to matchup, so that a judge run in one order
only (no swap) spreads its position bias evenly over the models; with swap both orders are judged anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from brrm.arena.table import ArenaTable
from brrm.errors import ConfigError

STRATEGIES = ("baseline", "round_robin")
"""The pairing strategies."""


@dataclass(frozen=True)
class Matchup:
    """One pair to judge: ``model_a``'s answer to ``prompt_id`` shown first, ``model_b``'s second."""

    prompt_id: str
    model_a: str
    model_b: str


def plan(table: ArenaTable, strategy: str, baseline: str | None = None) -> list[Matchup]:
    """The matchups of ``strategy`` over ``table``, in prompt order.

    Args:
        table: the arena's answers.
        strategy: ``baseline`` (needs ``baseline``: ``len(models) - 1`` matchups per prompt) or ``round_robin``
            (``n (n - 1) / 2`` per prompt).
        baseline: the model every other one meets (``baseline`` strategy only).

    Raises:
        ConfigError: on an unknown strategy, a missing or unknown baseline, or a baseline given to round robin.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"pairing strategy {strategy!r} is not valid; expected one of {', '.join(STRATEGIES)}")
    if strategy == "baseline":
        if baseline is None:
            raise ConfigError("--baseline MODEL is needed for the baseline pairing (or pass --round-robin)")
        if baseline not in table.models:
            raise ConfigError(f"--baseline {baseline!r} is not a model of {table.source}; models: "
                              f"{', '.join(table.models)}")
        pairs = [(m, baseline) for m in table.models if m != baseline]
    else:
        if baseline is not None:
            raise ConfigError("--baseline and --round-robin exclude each other: pass one of them")
        pairs = list(combinations(table.models, 2))
    out: list[Matchup] = []
    for pid in table.prompts:
        for first, second in pairs:
            if table.answer(pid, first) is None or table.answer(pid, second) is None:
                continue
            a, b = (first, second) if len(out) % 2 == 0 else (second, first)
            out.append(Matchup(pid, a, b))
    return out


def grid_size(table: ArenaTable, strategy: str) -> int:
    """The matchups of the full grid of ``strategy`` if every model answered every prompt."""
    n = len(table.models)
    per_prompt = n - 1 if strategy == "baseline" else n * (n - 1) // 2
    return per_prompt * len(table.prompts)
