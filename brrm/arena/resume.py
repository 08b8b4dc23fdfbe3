"""Resumable arena judging on the audit store (:class:`brrm.audit.AuditStore`, one SQLite file in the output
folder that survives SIGKILL: each battle is committed as it is judged).

A battle's key is its content and position — the prompt, the answer shown first and the answer shown second
(:func:`brrm.audit.keys.item_hash`), never the user's prompt ids or model names — under the judge's configuration
(:func:`brrm.audit.keys.config_hash`: the judge's info with its weights' fingerprint, and whether both orders are
judged). A rerun judges only the matchups without a finished row (a ``backend_error`` row is retried); a second
run of a finished arena judges nothing, and gives the same leaderboard. Two matchups with the same content (two
models giving the same answer) are judged once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from brrm.arena.judging import Battle, judge_matchups
from brrm.arena.pairing import Matchup
from brrm.arena.table import ArenaTable
from brrm.types import RewardJudge
from brrm.types.jsonvalue import JSONDict


def _record(table: ArenaTable, m: Matchup) -> JSONDict:
    a, b = table.answer(m.prompt_id, m.model_a), table.answer(m.prompt_id, m.model_b)
    return {"prompt": table.prompts[m.prompt_id].text, "response_a": a.response if a else "",
            "response_b": b.response if b else ""}


def judge_resumable(judge: RewardJudge, table: ArenaTable, matchups: Sequence[Matchup], *, swap: bool,
                    folder: str | Path, progress: Callable[[float], None] | None = None
                    ) -> tuple[list[Battle], int]:
    """Judge the matchups not yet in ``folder``'s store, commit each as it is judged, and return every matchup's
    battle (from the store, in matchup order) and how many were judged now.

    Raises:
        ConfigError: when the folder cannot hold a store (from :class:`~brrm.audit.AuditStore`), or what
            :func:`brrm.arena.judging.judge_matchups` raises.
    """
    from brrm.audit.keys import config_hash, item_hash
    from brrm.audit.plan import AuditItem
    from brrm.audit.store import AuditStore

    config = config_hash(judge.info, shape="pairs", strategy="arena:" + ("both-orders" if swap else "one-order"))
    items = [AuditItem(k, 0, f"{m.prompt_id}|{m.model_a}|{m.model_b}", item_hash(_record(table, m)),
                       _record(table, m)) for k, m in enumerate(matchups)]
    with AuditStore(folder) as store:
        pending = store.pending(items, config)
        todo = [matchups[it.position] for it in pending]

        def commit(i: int, battle: Battle) -> None:
            store.put_results(None, config, "pairs", [(pending[i], battle.to_dict())])

        if todo:
            judge_matchups(judge, table, todo, swap=swap, progress=progress, on_battle=commit)
        stored = store.results(config, {it.item_hash for it in items})
    battles = [_restore(table, m, stored[it.item_hash].result) for m, it in zip(matchups, items, strict=True)]
    return battles, len(todo)


def _restore(table: ArenaTable, m: Matchup, row: Mapping[str, object]) -> Battle:
    """The battle of matchup ``m`` from a stored row (its outcome fields; the names are the matchup's own)."""
    def num(key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else math.nan

    consistent = row.get("consistent")
    return Battle(m.prompt_id, table.prompts[m.prompt_id].category, m.model_a, m.model_b, str(row["status"]),
                  str(row.get("reason") or ""), str(row.get("winner") or ""), num("p_a"),
                  consistent if isinstance(consistent, bool) else None, bool(row.get("swapped")),
                  str(row.get("judge") or ""), str(row.get("fingerprint") or ""), num("position_bias"))
