"""Judging an arena's matchups through the judge's :class:`~brrm.RewardJudge`, by :func:`brrm.service.run.run` (the
one batching door every surface uses), into :class:`Battle` values in LMArena's battle columns.

With a generative (pairwise) judge both presentation orders are judged by default (``swap``): the verdict and
P(A ≻ B) are then the judge's swap-debiased ones (:mod:`brrm.compose.swap`), and ``consistent`` says whether the
two orders agreed — the judge's position bias, measured. A scalar judge (Bradley–Terry, a principle model) scores
each answer; its P(A ≻ B) is σ of the reward difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from brrm.arena.pairing import Matchup
from brrm.arena.table import ArenaTable
from brrm.errors import ConfigError
from brrm.service.items import PairItem, PairsCall
from brrm.types import JudgeInfo, JudgeSpec, PairwiseJudgment, RewardJudge, Status, Verdict
from brrm.types.jsonvalue import JSONDict
from brrm.types.protocols import kind_trait
from brrm.types.usage import Tokens, tokens_of

WINNERS = ("model_a", "model_b", "tie")
"""LMArena's ``winner`` values."""

OUTCOMES = ("soft", "hard")
"""How a battle enters the fit: ``soft`` (P(A ≻ B) as a fractional win) or ``hard`` (the verdict as a vote)."""


@dataclass(frozen=True)
class Battle:
    """One judged matchup.

    Attributes:
        prompt_id, category: the prompt (category ``""``: none).
        model_a, model_b: the models, ``model_a``'s answer shown first.
        status: ``ok``, or why no verdict came (a :class:`~brrm.types.Status` value; ``winner`` is then ``""``).
        reason: why, when not ``ok`` (empty otherwise).
        winner: ``model_a``, ``model_b`` or ``tie`` (``""`` when not ``ok``).
        p_a: the judge's P(``model_a`` ≻ ``model_b``) in [0, 1] (swap-debiased under swap; calibrated when the
            judge carries a calibration), or NaN when the judge measured none (faithful decoding).
        consistent: under swap, whether both orders agreed; None with one order or a failed order.
        swapped: whether both presentation orders were judged.
        judge: the judge's model; fingerprint: its weights' fingerprint (``""`` when unknown).
        position_bias: under swap, how much P(the answer shown first wins) exceeds ½ in this battle: half the
            forward order's P(A ≻ B) minus the reversed order's (both in the A, B frame; means over the samples
            under voting), in [-½, ½]; NaN without swap or where an order's P(A ≻ B) was not measured.
        tokens: the judgment's tokens, every turn and order together (:class:`~brrm.types.usage.Tokens`: prompt,
            cached or None where the backend does not report it, generated); None when not measured (no model
            call, or a battles file written before tokens were recorded).
        cascade_stage: the stage of a judge cascade that decided it (``first``, ``second``); ``""`` outside one.
    """

    prompt_id: str
    category: str
    model_a: str
    model_b: str
    status: str
    reason: str
    winner: str
    p_a: float
    consistent: bool | None
    swapped: bool
    judge: str
    fingerprint: str
    position_bias: float = math.nan
    tokens: Tokens | None = None
    cascade_stage: str = ""

    @property
    def ok(self) -> bool:
        """Whether the battle has a verdict."""
        return self.status == Status.OK.value

    def outcome(self, outcomes: str) -> float:
        """The score of ``model_a`` in [0, 1] entered in the fit: ``hard``: 1 / 0 / 0.5 for a win, a loss, a tie
        (ties count half, as Arena-Hard-Auto and LMArena count them); ``soft``: ``p_a`` (the verdict's hard value
        when ``p_a`` is NaN).

        Raises:
            ConfigError: for a battle that is not ``ok`` or an unknown ``outcomes``.
        """
        if outcomes not in OUTCOMES:
            raise ConfigError(f"--outcomes {outcomes!r} is not valid; expected one of {', '.join(OUTCOMES)}")
        if not self.ok:
            raise ConfigError(f"battle {self.prompt_id}: {self.model_a} vs {self.model_b} has no outcome "
                              f"({self.status})")
        if outcomes == "soft" and not math.isnan(self.p_a):
            return self.p_a
        return {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}[self.winner]

    def to_dict(self) -> JSONDict:
        """The battle as one ``battles.jsonl`` line: LMArena's ``model_a``, ``model_b``, ``winner`` columns first,
        then the provenance (``p_a`` null when not measured)."""
        return {"model_a": self.model_a, "model_b": self.model_b, "winner": self.winner or None,
                "prompt_id": self.prompt_id, "category": self.category, "status": self.status,
                "reason": self.reason, "p_a": None if math.isnan(self.p_a) else self.p_a,
                "consistent": self.consistent, "swapped": self.swapped, "judge": self.judge,
                "fingerprint": self.fingerprint,
                "position_bias": None if math.isnan(self.position_bias) else self.position_bias,
                "tokens": None if self.tokens is None else self.tokens.to_dict(),
                "cascade_stage": self.cascade_stage or None}


def default_swap(judge: RewardJudge | JudgeSpec, single_order: bool = False) -> bool:
    """Whether an arena judges both orders: yes for a generative (pairwise) judge unless ``single_order``;
    a scalar judge scores each answer on its own, so order does not arise. For a :class:`~brrm.JudgeSpec`
    (Ray) the kind's trait decides; kind ``auto`` asks for both, and each actor drops the swap for a scalar
    judge."""
    if single_order:
        return False
    if isinstance(judge, JudgeSpec):
        return kind_trait(judge.kind, "pairwise") is not False
    return bool(judge.info.pairwise)


def judge_matchups(judge: RewardJudge, table: ArenaTable, matchups: Sequence[Matchup], *, swap: bool,
                   progress: Callable[[float], None] | None = None,
                   on_battle: Callable[[int, Battle], None] | None = None) -> list[Battle]:
    """Judge every matchup; one :class:`Battle` per matchup, in order (failures included, with their reason).

    Args:
        judge: any :class:`~brrm.RewardJudge`.
        table: the answers the matchups name (each must exist: :func:`brrm.arena.pairing.plan` makes such).
        matchups: what to judge.
        swap: judge both orders (generative judges; see :func:`default_swap`).
        progress: called with the number of pairs just judged.
        on_battle: ``on_battle(index, battle)`` once per matchup as soon as it is judged.

    Raises:
        ConfigError: for a matchup naming an answer the table lacks, or what the judge raises before its calls.
    """
    from brrm.service.run import run

    items = [_item(table, m) for m in matchups]
    reporter = None if on_battle is None else (
        lambda i, j: on_battle(i, _battle(judge, table, matchups[i], j, swap)))
    results = run(judge, items, call=PairsCall(swap=swap if judge.info.pairwise else None),
                  chunk_size=judge.info.chunk_size, progress=progress, on_result=reporter)
    return [_battle(judge, table, m, j, swap) for m, j in zip(matchups, results, strict=True)]


def _item(table: ArenaTable, m: Matchup) -> PairItem:
    a, b = table.answer(m.prompt_id, m.model_a), table.answer(m.prompt_id, m.model_b)
    if a is None or b is None:
        raise ConfigError(f"matchup {m} names an answer that {table.source} does not hold")
    return PairItem(table.prompts[m.prompt_id].text, a.response, b.response,
                    id=f"{m.prompt_id}|{m.model_a}|{m.model_b}")


def _battle(judge: RewardJudge, table: ArenaTable, m: Matchup, j: PairwiseJudgment, swap: bool) -> Battle:
    return battle_from(table, m, outcome(judge.info, j, swap))


def outcome(info: JudgeInfo, j: PairwiseJudgment, swap: bool) -> JSONDict:
    """What a judgment decides of a battle, without its names (``status``, ``reason``, ``winner``, ``p_a``,
    ``consistent``, ``swapped``, ``judge``, ``fingerprint``, ``position_bias``; NaN as None): the stored row of
    :mod:`brrm.arena.resume`, and what a Ray actor sends back (:mod:`brrm.arena.ray`)."""
    winner = {Verdict.A: "model_a", Verdict.B: "model_b", Verdict.TIE: "tie"}.get(j.winner, "")
    ok = j.status is Status.OK
    bias = _position_bias(j) if swap else math.nan
    return {"status": j.status.value, "reason": j.reason, "winner": winner if ok else "",
            "p_a": None if math.isnan(j.p_a) else float(j.p_a), "consistent": j.consistent,
            "swapped": swap and bool(info.pairwise), "judge": info.model, "fingerprint": info.fingerprint,
            "position_bias": None if math.isnan(bias) else bias,
            "tokens": None if (spent := tokens_of(j)) is None else spent.to_dict(),
            "cascade_stage": j.cascade.stage.value if j.cascade is not None else None}


def battle_from(table: ArenaTable, m: Matchup, row: Mapping[str, object]) -> Battle:
    """The battle of matchup ``m`` from its :func:`outcome` fields (or a stored ``battles.jsonl`` row: the names
    are the matchup's own)."""
    def num(key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else math.nan

    consistent = row.get("consistent")
    return Battle(m.prompt_id, table.prompts[m.prompt_id].category, m.model_a, m.model_b, str(row["status"]),
                  str(row.get("reason") or ""), str(row.get("winner") or ""), num("p_a"),
                  consistent if isinstance(consistent, bool) else None, bool(row.get("swapped")),
                  str(row.get("judge") or ""), str(row.get("fingerprint") or ""), num("position_bias"),
                  Tokens.from_dict(row.get("tokens")), str(row.get("cascade_stage") or ""))


def _position_bias(j: PairwiseJudgment) -> float:
    """Half the forward orders' mean P(A ≻ B) minus the reversed orders' (see :attr:`Battle.position_bias`)."""
    subs = j.sub_judgments
    if len(subs) < 2 or len(subs) % 2:
        return math.nan
    half = len(subs) // 2
    fwd = sum(s.p_a for s in subs[:half]) / half
    rev = sum(s.p_a for s in subs[half:]) / half
    return (fwd - rev) / 2.0
