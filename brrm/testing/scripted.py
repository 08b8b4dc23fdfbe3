"""Scripted judges of known behaviour, for the judge cascade's tests and benchmark (issue 48).

:class:`ScriptedOrdered` answers BR-RM's ordered-pair interface (``judge_ordered``) from a table, and counts its
model calls; wrapped in :class:`brrm.compose.PairwiseRewardJudge` it is a :class:`~brrm.RewardJudge` like any other.
:func:`scripted_pair` draws a pair of them, seeded, whose agreement depends on the first judge's confidence in a
known way (:class:`Disagreement`): the data a cascade threshold is fitted on, where the right answer is known.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from brrm.types import JudgeInfo, PairwiseJudgment, Status, Verdict

Table = dict[tuple[str, str], tuple[Verdict, float]]
"""(response shown first, response shown second) -> (verdict in the shown frame, P(first ≻ second))."""


class ScriptedOrdered:
    """An ordered-pair judge answering from ``table``; a pair not in it: the first shown wins with P 0.9; a verdict
    of ``Verdict.NONE`` is a parse failure. ``calls`` counts ordered judgments (one model run each)."""

    def __init__(self, table: Table | None = None, name: str = "second") -> None:
        self.table = table or {}
        self.calls = 0
        self.info = JudgeInfo(model=f"scripted-{name}", kind="brrm", recipe="scripted", backend="fake",
                              chat_template_hash="", template_hash="", default_strategy="round_robin",
                              fingerprint=f"fp-{name}")

    def judge_ordered(self, conversations: Sequence[Any], first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None, **_: Any) -> list[PairwiseJudgment]:
        """One judgment per (first, second) from the table."""
        self.calls += len(first)
        out = []
        for k, (a, b) in enumerate(zip(first, second, strict=True)):
            verdict, p = self.table.get((a, b), (Verdict.A, 0.9))
            rid = ids[k] if ids is not None else ""
            out.append(PairwiseJudgment(Verdict.NONE, Status.PARSE_FAILURE, "scripted: no verdict", id=rid)
                       if verdict is Verdict.NONE else
                       PairwiseJudgment(verdict, Status.OK, p_a=p, id=rid, prompt_tokens=100, generated_tokens=40))
        return out

    def close(self) -> None:
        """Nothing to free."""


@dataclass(frozen=True)
class Disagreement:
    """How often the scripted first judge disagrees with the second, by its confidence c = |P(A ≻ B) − ½|:
    ``low`` for c < ``edges[0]``, ``middle`` for c < ``edges[1]``, ``high`` above; c is uniform on [0, 0.5)."""

    low: float = 0.45
    middle: float = 0.15
    high: float = 0.002
    edges: tuple[float, float] = (0.1, 0.2)

    def at(self, c: float) -> float:
        """The disagreement probability at confidence ``c``."""
        return self.low if c < self.edges[0] else self.middle if c < self.edges[1] else self.high


@dataclass(frozen=True)
class ScriptedPair:
    """A first and a second judge's tables over ``n`` pairs (``prompts[i]``, ``a[i]``, ``b[i]``), and the truth."""

    prompts: tuple[str, ...]
    a: tuple[str, ...]
    b: tuple[str, ...]
    first: Table
    second: Table
    confidence: tuple[float, ...]
    agrees: tuple[bool, ...]


def scripted_pair(n: int, *, seed: int = 0, disagreement: Disagreement = Disagreement()) -> ScriptedPair:
    """``n`` pairs, one content group each: the second judge's verdict uniform on A/B (P 0.9 or 0.1); the first
    judge's confidence c uniform on [0, 0.5), its verdict the second's except with probability
    ``disagreement.at(c)``, its P(A ≻ B) = ½ ± c on its verdict's side. Both tables hold both orders (mirrored)."""
    rng = random.Random(seed)
    prompts, a, b, conf, agrees = [], [], [], [], []
    first: Table = {}
    second: Table = {}
    for i in range(n):
        ra, rb = f"answer {i} one", f"answer {i} two"
        truth = rng.choice((Verdict.A, Verdict.B))
        c = rng.random() * 0.5
        agree = rng.random() >= disagreement.at(c)
        said = truth if agree else truth.mirrored()
        p = 0.5 + c if said is Verdict.A else 0.5 - c
        second[(ra, rb)] = (truth, 0.9 if truth is Verdict.A else 0.1)
        second[(rb, ra)] = (truth.mirrored(), 0.1 if truth is Verdict.A else 0.9)
        first[(ra, rb)] = (said, p)
        first[(rb, ra)] = (said.mirrored(), 1.0 - p)
        prompts.append(f"question {i}?")
        a.append(ra)
        b.append(rb)
        conf.append(c)
        agrees.append(agree)
    return ScriptedPair(tuple(prompts), tuple(a), tuple(b), first, second, tuple(conf), tuple(agrees))
