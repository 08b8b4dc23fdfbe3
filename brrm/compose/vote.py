"""Self-consistency voting: k independent two-turn judgments per presentation order, and their majority.

Generative judges gain accuracy by sampling several judgments of the same pair and voting (maj@k,
self-consistency: Wang et al. 2023, "Self-Consistency Improves Chain of Thought Reasoning in Language
Models"). Each sample draws from its own sampler streams (:func:`brrm.seeds.item_seed` with the sample
index), so a voted result still depends only on the record, the options and the seed. All k x orders
ordered judgments of a batch go to the ordered judge in one call, each pair's samples next to each other (a
backend that shares the prefill of identical prompts, such as the transformers backend, prefills P1 once
per order instead of k times).

The vote works on the :class:`~brrm.types.Verdict` enum: the verdict with the most ok votes wins; when two
verdicts share the largest count the result is a tie (ties as ties). Failed samples never vote and never
enter the mean P(A ≻ B); they are counted in the reason.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from brrm.compose.swap import OrderedFn, mirror
from brrm.types import PairwiseJudgment, Verdict, check_int
from brrm.types.usage import merge_turns

_ORDER = (Verdict.A, Verdict.B, Verdict.TIE)


def check_samples(samples: object) -> int:
    """``samples`` as an int >= 1.

    Raises:
        ConfigError: naming ``samples`` and the valid range.
    """
    return check_int("samples", samples, low=1)


def vote(subs: Sequence[PairwiseJudgment], *, orders: int) -> PairwiseJudgment:
    """The majority of sampled judgments of one pair, all in the (A, B) frame.

    Args:
        subs: ``orders * k`` judgments: forward samples 0..k-1, then (``orders == 2``) the reversed samples
            already mirrored into the (A, B) frame.
        orders: 1 or 2.

    Returns:
        A judgment with the majority ``winner`` (a tie when two verdicts share the largest count), ``p_a`` the
        mean over ok samples (NaN when any ok sample did not measure it), ``agreement`` the majority's share of
        ok samples, ``consistent`` whether the forward and reversed majorities agree (None without swap or
        when an order has no ok sample), every sample in ``sub_judgments``, token counts and attempts summed.
        Its turn texts, dimensions and analyses are the first ok sample's; digit logits are NaN (each sample
        has its own). When no sample is ok it carries the first failure's status and reason.
    """
    k = len(subs) // orders
    ok = [j for j in subs if j.ok]
    common: dict[str, Any] = {"sub_judgments": tuple(subs), "samples": k,
                              "attempts": sum(j.attempts for j in subs),
                              "prompt_tokens": sum(j.prompt_tokens for j in subs),
                              "generated_tokens": sum(j.generated_tokens for j in subs),
                              "turns": merge_turns(*[j.turns for j in subs])}
    if not ok:
        first = subs[0]
        return replace(first, reason=f"all {len(subs)} sampled judgments failed; first: {first.reason}",
                       consistent=None, agreement=math.nan, **common)
    winner, top, counts = _majority(ok)
    notes = []
    if len(ok) < len(subs):
        notes.append(f"{len(subs) - len(ok)} of {len(subs)} sampled judgments failed and did not vote")
    if winner is Verdict.TIE and counts[Verdict.TIE] != top:
        notes.append("votes split: " + ", ".join(f"{v.value} {counts[v]}" for v in _ORDER if counts[v]))
    consistent = None
    if orders == 2:
        halves = [[j for j in subs[o * k:(o + 1) * k] if j.ok] for o in (0, 1)]
        consistent = None if not all(halves) else _majority(halves[0])[0] is _majority(halves[1])[0]
    p_a = math.fsum(j.p_a for j in ok) / len(ok)
    return replace(ok[0], winner=winner, reason="; ".join(notes), p_a=p_a, logit_1=math.nan, logit_2=math.nan,
                   consistent=consistent, agreement=top / len(ok), **common)


def _majority(ok: Sequence[PairwiseJudgment]) -> tuple[Verdict, int, Counter[Verdict]]:
    counts = Counter(j.winner for j in ok)
    top = max(counts.values())
    leaders = [v for v in _ORDER if counts[v] == top]
    return (leaders[0] if len(leaders) == 1 else Verdict.TIE), top, counts


def judge_with_votes(ordered: OrderedFn, conversations: Sequence[Any], responses_a: Sequence[str],
                     responses_b: Sequence[str], *, swap: bool, samples: int, ids: Sequence[str],
                     progress: Callable[[float], None] | None = None) -> list[PairwiseJudgment]:
    """Judge N pairs with ``samples`` judgments per order (and both orders when ``swap``) in one call; vote.

    Args:
        ordered: ``ordered(conversations, first, second, ids=…, samples=…, progress=…)`` of an ordered-pair
            judge that takes a sample index per item (:meth:`brrm.judges.brrm.BRRMJudge.judge_ordered`).
        samples: k >= 1.
        ids: N record ids (every sample carries its pair's id).
        progress: called with finished pairs (fractions).

    Returns:
        N voted judgments (:func:`vote`), in input order.
    """
    n, orders = len(conversations), 2 if swap else 1
    convs, first, second, rids, picks = [], [], [], [], []
    for i in range(n):  # each pair's samples side by side: identical prompts meet in one backend chunk
        for o in range(orders):
            a, b = (responses_a[i], responses_b[i]) if o == 0 else (responses_b[i], responses_a[i])
            for s in range(samples):
                convs.append(conversations[i])
                first.append(a)
                second.append(b)
                rids.append(ids[i])
                picks.append(s)
    scale = orders * samples
    part = (lambda x: progress(x / scale)) if progress else None
    flat = ordered(convs, first, second, ids=rids, samples=picks, progress=part)
    out = []
    for i in range(n):
        row = flat[i * scale:(i + 1) * scale]
        subs = [j if pos < samples else mirror(j) for pos, j in enumerate(row)]
        out.append(vote(subs, orders=orders))
    return out
