"""Resumable arena judging on the audit store (:class:`brrm.audit.AuditStore`, one SQLite file in the output
folder that survives SIGKILL: each battle is committed as it is judged, or each Ray batch as it arrives).

A battle's key is its content and position — the prompt, the answer shown first and the answer shown second
(:func:`brrm.audit.keys.item_hash`), never the user's prompt ids or model names — under the judge's configuration
(:func:`brrm.audit.keys.config_hash`: the judge's info with its weights' fingerprint, and whether both orders are
judged). A rerun judges only the matchups without a finished row (a ``backend_error`` row is retried); a second
run of a finished arena judges nothing, and gives the same leaderboard. Two matchups with the same content (two
models giving the same answer) are judged once. On Ray (:mod:`brrm.arena.ray`) the driver holds a
:class:`~brrm.JudgeSpec`, not a judge: the configuration a spec produced is remembered in the store under the
spec's request hash (:func:`brrm.audit.keys.request_hash`), and learnt from the first batch when new.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.arena.judging import Battle, battle_from, judge_matchups
from brrm.arena.pairing import Matchup
from brrm.arena.table import ArenaTable
from brrm.types import JudgeSpec, Progress, RewardJudge
from brrm.types.jsonvalue import JSONDict

if TYPE_CHECKING:
    from brrm.audit.plan import AuditItem
    from brrm.audit.ray_runner import RayOptions
    from brrm.audit.store import AuditStore


def _record(table: ArenaTable, m: Matchup) -> JSONDict:
    a, b = table.answer(m.prompt_id, m.model_a), table.answer(m.prompt_id, m.model_b)
    return {"prompt": table.prompts[m.prompt_id].text, "response_a": a.response if a else "",
            "response_b": b.response if b else ""}


def _strategy(swap: bool) -> str:
    return "arena:" + ("both-orders" if swap else "one-order")


def _config(info: Mapping[str, object], swap: bool) -> str:
    from brrm.audit.keys import config_hash

    return config_hash(info, shape="pairs", strategy=_strategy(swap and bool(info.get("pairwise"))))


def _request(spec: JudgeSpec, swap: bool) -> str:
    from brrm.audit.keys import request_hash

    return request_hash(spec, shape="pairs", strategy=_strategy(swap))


def judge_resumable(judge: RewardJudge | JudgeSpec, table: ArenaTable, matchups: Sequence[Matchup], *, swap: bool,
                    folder: str | Path, progress: Progress = None, ray: RayOptions | None = None
                    ) -> tuple[list[Battle], int]:
    """Judge the matchups not yet in ``folder``'s store, commit each as it is judged, and return every matchup's
    battle (from the store, in matchup order) and how many were judged now.

    Args:
        judge: the judge; with ``ray``, the :class:`~brrm.JudgeSpec` each actor loads.
        swap: judge both orders (a generative judge; see :func:`brrm.arena.judging.default_swap`).
        ray: judge on a Ray actor pool (:mod:`brrm.arena.ray`); None: here.

    Raises:
        ConfigError: when the folder cannot hold a store (from :class:`~brrm.audit.AuditStore`), a spec is given
            without ``ray`` (or a judge with it), or what :func:`brrm.arena.judging.judge_matchups` raises.
        BackendUnavailable: with ``ray`` when Ray is not installed.
    """
    from brrm.audit.keys import item_hash
    from brrm.audit.plan import AuditItem
    from brrm.audit.store import AuditStore
    from brrm.errors import ConfigError

    if isinstance(judge, JudgeSpec) != (ray is not None):
        raise ConfigError("an arena judges on Ray from a JudgeSpec, and here from a loaded judge")
    items = [AuditItem(k, 0, f"{m.prompt_id}|{m.model_a}|{m.model_b}", item_hash(_record(table, m)),
                       _record(table, m)) for k, m in enumerate(matchups)]
    with AuditStore(folder) as store:
        config: str | None
        request: str | None
        if isinstance(judge, JudgeSpec):
            request = _request(judge, swap)
            config = store.config_for_request(request)
        else:
            info = judge.info.to_dict()
            request = None if judge.info.spec is None else _request(judge.info.spec, swap)
            config = _config(info, swap)
            store.remember_config(config, info, request)
        pending = store.pending(items, config)
        if pending and isinstance(judge, JudgeSpec) and ray is not None:
            config = _on_ray(store, judge, pending, swap, ray, request, config, progress)
        elif pending and not isinstance(judge, JudgeSpec):
            _here(store, judge, table, matchups, pending, swap, config or "", progress)
        stored = {} if config is None else store.results(config, {it.item_hash for it in items})
    battles = [battle_from(table, m, stored[it.item_hash].result) for m, it in zip(matchups, items, strict=True)]
    return battles, len(pending)


def _here(store: AuditStore, judge: RewardJudge, table: ArenaTable, matchups: Sequence[Matchup],
          pending: Sequence[AuditItem], swap: bool, config: str, progress: Progress) -> None:
    def commit(i: int, battle: Battle) -> None:
        store.put_results(None, config, "pairs", [(pending[i], battle.to_dict())])

    judge_matchups(judge, table, [matchups[it.position] for it in pending], swap=swap, progress=progress,
                   on_battle=commit)


def _on_ray(store: AuditStore, spec: JudgeSpec, pending: Sequence[AuditItem], swap: bool, ray: RayOptions,
            request: str | None, config: str | None, progress: Progress) -> str | None:
    """Judge ``pending`` on the actor pool, committing each batch as it arrives; returns the configuration
    (learnt from the first batch's judge info when the store did not know this spec)."""
    from brrm.arena.ray import ArenaActor
    from brrm.audit.ray_runner import DEFAULT_BATCH, map_on_ray

    by_key = {it.item_hash: it for it in pending}
    rows = [{"key": it.item_hash, "id": it.record_id, "record": json.dumps(it.record, ensure_ascii=False)}
            for it in pending]
    for out in map_on_ray(ArenaActor, {"spec": spec, "swap": swap}, rows, DEFAULT_BATCH, ray):
        if config is None:
            info = json.loads(str(out["info"][0]))
            config = _config(info, swap)
            store.remember_config(config, info, request)
        done = [(by_key[str(k)], json.loads(str(r))) for k, r in zip(out["key"], out["result"], strict=True)]
        store.put_results(None, config, "pairs", done)
        if progress is not None:
            progress(len(done))
    return config
