"""Robustness probes: judge each pair and its manipulated variants with the same sampler streams; report per probe
the verdict flip rate (and, for scalar models, the mean reward shift) with a seeded bootstrap interval.

The original pairs and every probe's variants are judged through the judge's own ``judge_pairs`` path (swap,
voting), with one change where the judge allows it (a BR-RM judge): a variant's sampler streams are keyed by the
original pair's texts (``seed_texts`` of :meth:`brrm.judges.brrm.BRRMJudge.judge_ordered`), so the variant draws
the same random numbers as the original (common random numbers) and a verdict that moves was moved by the
manipulation. Scalar models are deterministic; a generative judge reached only through ``judge_pairs`` (a remote
one) samples each variant afresh; the report says which applies (``streams``).

A flip is a pair whose original and variant verdicts are both ok and differ (the variant seen in the original's
(A, B) frame). Failed judgments never count as flips or non-flips: they are counted apart, with their reasons.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, TypeGuard

from brrm.compose.swap import mirror
from brrm.probes.variants import PROBES, parse_probes
from brrm.seeds import item_seed
from brrm.types import Conversation, ConversationLike, PairwiseJudgment, RewardJudge, Verdict, check_float, check_int
from brrm.types.jsonvalue import JSONDict, record

if TYPE_CHECKING:
    from brrm.compose import PairwiseRewardJudge


class _Record:
    """A result dataclass dumped by :func:`~brrm.types.jsonvalue.record`."""

    def to_dict(self) -> JSONDict:
        """The fields by name, JSON-ready (:func:`~brrm.types.jsonvalue.record`: NaN as ``null``)."""
        return record(self)


@dataclass(frozen=True)
class Interval(_Record):
    """A statistic with its percentile-bootstrap confidence interval.

    Attributes:
        value: the statistic over all items (NaN when no item counts).
        low, high: the interval's bounds at ``confidence`` (NaN without items).
        n: items the statistic is over.
    """

    value: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class ProbeItem(_Record):
    """One pair under one probe.

    Attributes:
        id: the record id.
        original, variant: the verdicts (``A``/``B``/``tie``/``none``), the variant in the original's frame.
        flipped: both ok and different; None when either failed.
        target: which response was manipulated (``A`` or ``B``; ``""`` for ``position``).
        p_shift: P(target ≻ other) under the variant minus under the original, in [-1, 1]; NaN when either P was
            not measured (``position``: the shift of P(A ≻ B)).
        reward_shift: scalar models: the target's reward under the variant minus under the original; NaN else.
        reason: why the item does not count (a failed judgment's status and reason), else "".
    """

    id: str
    original: str
    variant: str
    flipped: bool | None
    target: str
    p_shift: float = math.nan
    reward_shift: float = math.nan
    reason: str = ""


@dataclass(frozen=True)
class ProbeFigures(_Record):
    """What one probe did to the judge.

    Attributes:
        probe: its name; description: what it manipulates.
        flip_rate: share of counted pairs whose verdict flipped, in [0, 1], with its interval.
        p_shift: mean shift of P(target ≻ other) (``position``: of P(A ≻ B)), with its interval.
        reward_shift: scalar models: mean shift of the target's reward (reward units), with its interval;
            None for pairwise judges.
        toward_target: share of flips whose variant verdict is the target (NaN without flips or for ``position``).
        failed: pairs that did not count (a failed original or variant judgment).
        most_moved: up to ``top`` items, flips first, then by |p_shift| (or |reward_shift|).
        items: every pair's :class:`ProbeItem`, in input order.
    """

    probe: str
    description: str
    flip_rate: Interval
    p_shift: Interval
    reward_shift: Interval | None
    toward_target: float
    failed: int
    most_moved: tuple[ProbeItem, ...]
    items: tuple[ProbeItem, ...] = field(repr=False, default=())


@dataclass(frozen=True)
class ProbeReport(_Record):
    """Every probe's figures over one set of pairs.

    Attributes:
        pairs: pairs probed.
        judgments: pairwise judgments run (originals and variants; each counts its orders and samples apart).
        streams: ``shared`` (variants drew the originals' sampler streams), ``deterministic`` (a scalar model) or
            ``independent`` (a generative judge reached only through ``judge_pairs``, e.g. a remote one: each
            variant drew its own streams, so part of each flip rate is sampling noise).
        confidence: the intervals' level, in (0, 1); bootstrap: resamples; seed: the bootstrap's base seed.
        probes: one :class:`ProbeFigures` per probe, in the requested order.
    """

    pairs: int
    judgments: int
    streams: str
    confidence: float
    bootstrap: int
    seed: int
    probes: tuple[ProbeFigures, ...]


def probe_cost(judge: RewardJudge, pairs: int, probes: Sequence[str]) -> int:
    """Model calls a probe run takes: (1 + probes) x the judge's cost of ``pairs`` (:meth:`~brrm.RewardJudge.cost`:
    a pairwise judge's ordered judgments, orders x samples; a scalar model's scored sequences); an object with only
    ``info`` and ``judge_pairs`` counts one per pair."""
    per = judge.cost("pairs", pairs) if isinstance(judge, RewardJudge) else pairs
    return (1 + len(probes)) * per


def bootstrap(values: Sequence[float], *, resamples: int, confidence: float, seed: int) -> Interval:
    """The mean of ``values`` and its percentile-bootstrap interval (numpy ``default_rng(seed)``; resampled with
    replacement ``resamples`` times; NaN bounds without values)."""
    import numpy as np

    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(data.mean()), float(low), float(high), n)


def run_probes(judge: RewardJudge, conversations: Sequence[ConversationLike], responses_a: Sequence[str],
               responses_b: Sequence[str],
               /, *, probes: str | Sequence[str], ids: Sequence[str], display_ids: Sequence[str] | None = None,
               resamples: int = 1000, confidence: float = 0.95, seed: int = 0, top: int = 5,
               progress: Callable[[float], None] | None = None,
               finished: Callable[[int], None] | None = None) -> ProbeReport:
    """Probe a judge on N pairs.

    Args:
        judge: a :class:`~brrm.RewardJudge` (from :func:`brrm.load`).
        conversations, responses_a, responses_b: the N pairs.
        probes: names from :data:`~brrm.probes.variants.PROBES` (a list or ``"length,injection"``).
        ids: N record ids that key the sampler streams (``""`` where a record named none, as ``brrm judge``).
        display_ids: N ids the report shows (default: ``ids``).
        resamples: bootstrap resamples, int >= 1; confidence: interval level in (0, 1); seed: bootstrap seed.
        top: most-moved items kept per probe, int >= 0.
        progress: called with pairs' worth of finished turns (fractions of a pair) as the judge reports them.
        finished: called with N after each pass (the originals, then each probe's variants) is judged.

    Raises:
        ConfigError: on an unknown probe, mismatched lengths or invalid settings (before any model call).
    """
    from brrm.errors import ConfigError

    names = parse_probes(probes)
    check_int("resamples", resamples, low=1)
    check_float("confidence", confidence, low=0, high=1, low_open=True)
    check_int("top", top, low=0)
    n = len(conversations)
    shown = list(display_ids) if display_ids is not None else list(ids)
    if not (len(responses_a) == len(responses_b) == len(ids) == len(shown) == n):
        raise ConfigError("conversations, responses_a, responses_b, ids and display_ids must have the same length")
    a, b = list(responses_a), list(responses_b)
    original = _judge(judge, conversations, a, b, ids, a, b, progress)
    if finished is not None:
        finished(n)
    targets = ["A" if j.winner is Verdict.B else "B" for j in original]
    figures = []
    for name in names:
        va, vb, judged = _variants(judge, name, conversations, a, b, ids, targets, progress)
        if finished is not None:
            finished(n)
        items = [_item(shown[i], original[i], judged[i], "" if name == "position" else targets[i])
                 for i in range(n)]
        if not judge.info.pairwise and name != "position":
            items = _with_rewards(judge, conversations, a, b, va, vb, targets, items)
        figures.append(_figures(name, items, resamples, confidence, item_seed(seed, "probe", stream=name), top))
    streams = "shared" if _seedable(judge) else "deterministic" if not judge.info.pairwise else "independent"
    return ProbeReport(n, probe_cost(judge, n, names), streams, confidence, resamples, seed, tuple(figures))


def _seedable(judge: RewardJudge) -> TypeGuard[PairwiseRewardJudge]:
    """Whether the judge is a :class:`~brrm.compose.PairwiseRewardJudge` whose ordered judge takes ``seed_texts``."""
    from brrm.compose import PairwiseRewardJudge

    if not isinstance(judge, PairwiseRewardJudge):
        return False
    return "seed_texts" in inspect.signature(judge.model.judge_ordered).parameters


def _judge(judge: RewardJudge, convs: Sequence[ConversationLike], first: list[str], second: list[str],
           ids: Sequence[str],
           seed_a: list[str], seed_b: list[str],
           progress: Callable[[float], None] | None = None) -> list[PairwiseJudgment]:
    """``judge.judge_pairs`` of (first, second), each pair's streams keyed by (seed_a, seed_b) where possible."""
    if not _seedable(judge):
        return judge.judge_pairs(convs, first, second, ids=list(ids), progress=progress)
    from brrm.compose.swap import judge_with_swap
    from brrm.compose.vote import judge_with_votes

    def where(rid: str, conv: ConversationLike, x: str, y: str) -> tuple[str, str, str, str]:
        return rid, Conversation.coerce(conv).content_hash(), x, y

    table: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    for rid, conv, x, y, ox, oy in zip(ids, convs, first, second, seed_a, seed_b, strict=True):
        table[where(rid, conv, x, y)], table[where(rid, conv, y, x)] = (ox, oy), (oy, ox)
    inner = judge.model

    def ordered(c: Sequence[ConversationLike], f: Sequence[str], s: Sequence[str], /, *, ids: Sequence[str],
                **kw: object) -> list[PairwiseJudgment]:
        keys = [table.get(where(r, conv, x, y)) for r, conv, x, y in zip(ids, c, f, s, strict=True)]
        return inner.judge_ordered(c, f, s, ids=ids, seed_texts=keys, **kw)

    if judge.samples > 1:
        return judge_with_votes(ordered, convs, first, second, swap=judge.swap, samples=judge.samples,
                                ids=list(ids), progress=progress)
    return judge_with_swap(ordered, convs, first, second, swap=judge.swap, ids=list(ids), progress=progress)


def _variants(judge: RewardJudge, name: str, convs: Sequence[ConversationLike], a: list[str], b: list[str],
              ids: Sequence[str],
              targets: list[str], progress: Callable[[float], None] | None = None,
              ) -> tuple[list[str], list[str], list[PairwiseJudgment]]:
    """The variant pairs of one probe and their judgments in the original's (A, B) frame."""
    if name == "position":
        judged = _judge(judge, convs, b, a, ids, a, b, progress)
        return b, a, [mirror(j) for j in judged]
    make = PROBES[name].make
    assert make is not None
    va = [make(x, 1) if t == "A" else x for x, t in zip(a, targets, strict=True)]
    vb = [make(y, 2) if t == "B" else y for y, t in zip(b, targets, strict=True)]
    return va, vb, _judge(judge, convs, va, vb, ids, a, b, progress)


def _p_target(j: PairwiseJudgment, target: str) -> float:
    return j.p_a if target in ("A", "") else 1.0 - j.p_a


def _item(rid: str, orig: PairwiseJudgment, var: PairwiseJudgment, target: str) -> ProbeItem:
    if not orig.ok or not var.ok:
        bad = orig if not orig.ok else var
        where = "original" if bad is orig else "variant"
        return ProbeItem(rid, orig.winner.value, var.winner.value, None, target,
                         reason=f"{where} {bad.status.value}: {bad.reason}")
    return ProbeItem(rid, orig.winner.value, var.winner.value, orig.winner is not var.winner, target,
                     p_shift=_p_target(var, target) - _p_target(orig, target))


def _with_rewards(judge: RewardJudge, convs: Sequence[ConversationLike], a: list[str], b: list[str], va: list[str],
                  vb: list[str],
                  targets: list[str], items: list[ProbeItem]) -> list[ProbeItem]:
    """Scalar models: the target's reward shift (one scoring pass over original and variant targets)."""
    from dataclasses import replace

    n = len(items)
    before = [x if t == "A" else y for x, y, t in zip(a, b, targets, strict=True)]
    after = [x if t == "A" else y for x, y, t in zip(va, vb, targets, strict=True)]
    scores = judge.score([*convs, *convs], [*before, *after])
    return [replace(it, reward_shift=scores[n + i].reward - scores[i].reward)
            if scores[i].ok and scores[n + i].ok else it for i, it in enumerate(items)]


def _figures(name: str, items: list[ProbeItem], resamples: int, confidence: float, seed: int,
             top: int) -> ProbeFigures:
    counted = [it for it in items if it.flipped is not None]
    flips = [float(bool(it.flipped)) for it in counted]
    shifts = [it.p_shift for it in counted if not math.isnan(it.p_shift)]
    rewards = [it.reward_shift for it in counted if not math.isnan(it.reward_shift)]
    flipped = [it for it in counted if it.flipped]
    toward = (sum(it.variant == it.target for it in flipped) / len(flipped)
              if flipped and name != "position" else math.nan)

    def moved(it: ProbeItem) -> tuple[bool, float]:
        size = it.reward_shift if not math.isnan(it.reward_shift) else it.p_shift
        return bool(it.flipped), abs(size) if not math.isnan(size) else 0.0

    ranked = sorted(counted, key=moved, reverse=True)
    interval = partial(bootstrap, resamples=resamples, confidence=confidence)
    return ProbeFigures(name, PROBES[name].description, interval(flips, seed=seed), interval(shifts, seed=seed + 1),
                        interval(rewards, seed=seed + 2) if rewards else None, toward, len(items) - len(counted),
                        tuple(ranked[:top]), tuple(items))
