"""Fit a judge cascade's threshold from data (issue 48 item 2): the margin ``m`` or band ``δ`` at which the cascade
(:class:`~brrm.compose.cascade.CascadeJudge`) agrees with its second judge alone on at least a target share of
held-out content groups, escalating as few items as it can.

The data: each item's first-judge judgment and a **reference verdict** — the second judge's own verdict on the
same pair (a second-judge-judged set), or, where no second judge ran, the pair's label standing in for it (a
labelled set). Items whose reference is a tie or missing are left out (counted). At a threshold ``t`` an item is
decided by the first judge exactly when the cascade would decide it there (:meth:`Confidence.decide`: measure > t,
a failed or unmeasured first judgment always escalates, one decided without a model call never does); an
escalated item agrees with the second judge by construction. A content group (:func:`brrm.calibration.data.
content_key`) agrees when every one of its items does.

The split is the calibration's (:func:`brrm.calibration.split.sides`: by content group, seeded, at least
:data:`~brrm.calibration.split.MIN_GROUPS` groups a side). On the fit groups the fit takes the lowest threshold
whose **agreement bound** reaches the target: 1 − (F / G)·q⁺, where G is the fit groups, F those with an item the
first judge decides, and q⁺ the upper end of the Wilson score interval (Wilson 1927, "Probable inference, the law
of succession, and statistical inference", JASA 22:209-212) at ``confidence`` of the disagreement rate among those
F groups. Escalating everything gives F = 0 and bound 1, so a fit always exists; ``confidence=0`` reads the point
estimate. The held-out groups are then measured at that threshold: agreement with its Wilson interval, and the
escalation rate over items.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from brrm.calibration.split import sides, split_record
from brrm.compose.cascade import Confidence
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, Verdict
from brrm.types.calibration import read_format_file
from brrm.types.cascade import CascadeRule, CascadeWhy
from brrm.types.jsonread import as_object
from brrm.types.jsonvalue import record

FORMAT = "brrm-cascade-fit/1"
"""The ``format`` of a cascade fit file (``brrm calibrate --cascade --output``)."""

BAND_TOP = 0.5
"""δ must stay below this (the band [½ − δ, ½ + δ] inside [0, 1]; :class:`Confidence`)."""


@dataclass(frozen=True)
class CascadeObservation:
    """One item: its first judgment's measure under the rule and whether its verdict is the reference's.

    Attributes:
        key: the pair's content group.
        measure: what the rule measures on the first judgment (|r_A − r_B| or |P(A ≻ B) − ½|); +inf for a judgment
            decided without a model call (decided first at every threshold), NaN for a failed or unmeasured one
            (escalated at every threshold).
        agree: whether the first judgment's verdict is the reference verdict.
    """

    key: str
    measure: float
    agree: bool


def observe(firsts: Sequence[PairwiseJudgment], references: Sequence[Verdict], keys: Sequence[str], *,
            rule: CascadeRule | str) -> tuple[tuple[CascadeObservation, ...], dict[str, int]]:
    """The observations of first judgments against reference verdicts, and what was left out.

    Args:
        firsts: the first judge's judgments, one per item.
        references: the second judge's verdicts (or the labels standing in for them), in the same frame.
        keys: each item's content group (:func:`brrm.calibration.data.content_key`).
        rule: ``margin`` or ``band`` (``agree`` has no threshold to fit).

    Raises:
        ConfigError: on lengths that differ, or the ``agree`` rule.
    """
    rule = CascadeRule(rule)
    if rule is CascadeRule.AGREE:
        raise ConfigError("cascade_agree has no threshold to fit; fit cascade_margin (margin) or cascade_band (band)")
    if not len(firsts) == len(references) == len(keys):
        raise ConfigError(f"{len(firsts)} first judgments, {len(references)} reference verdicts, {len(keys)} keys")
    zero = Confidence(rule, 0.0)
    out, skipped = [], {"no_reference": 0}
    for j, ref, key in zip(firsts, references, keys, strict=True):
        if ref not in (Verdict.A, Verdict.B):
            skipped["no_reference"] += 1
            continue
        why, measure, _ = zero.decide(j)
        if why is CascadeWhy.NO_MODEL_CALL:
            measure = math.inf
        out.append(CascadeObservation(key, measure, j.ok and j.winner is ref))
    return tuple(out), skipped


def wilson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval (Wilson 1927) of a proportion ``successes / n`` at two-sided ``confidence``.

    Returns:
        (low, high) in [0, 1]; (NaN, NaN) when n = 0; the point estimate twice when ``confidence`` is 0.

    Raises:
        ConfigError: when ``confidence`` is outside [0, 1) or the counts are impossible.
    """
    if not 0.0 <= confidence < 1.0:
        raise ConfigError(f"confidence must be in [0, 1), got {confidence!r}")
    if not 0 <= successes <= n:
        raise ConfigError(f"{successes} successes of {n}")
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf((1.0 + confidence) / 2.0) if confidence else 0.0
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Agreement:
    """A cascade's agreement with its second judge on one side of the split, at one threshold.

    Attributes:
        groups: content groups measured; agreeing: those whose every item agrees.
        agreement: agreeing / groups in [0, 1] (NaN for no group); low, high: its Wilson interval.
        items: items measured; escalated: those sent to the second judge (the model calls the second judge makes,
            one per item); escalation_rate: escalated / items.
    """

    groups: int
    agreeing: int
    agreement: float
    low: float
    high: float
    items: int
    escalated: int
    escalation_rate: float

    def to_dict(self) -> dict[str, object]:
        """The fields by name, JSON-ready (:func:`~brrm.types.jsonvalue.record`: NaN as ``null``)."""
        return dict(record(self))


def measure(observations: Sequence[CascadeObservation], threshold: float, *, confidence: float = 0.95) -> Agreement:
    """The agreement and escalation of ``observations`` at ``threshold`` (items with measure > threshold decided
    first), the agreement's Wilson interval at ``confidence``."""
    broken: dict[str, bool] = {}
    escalated = 0
    for o in observations:
        first = o.measure > threshold  # NaN compares False: escalated
        escalated += not first
        broken[o.key] = broken.get(o.key, False) or (first and not o.agree)
    g, ok = len(broken), sum(not b for b in broken.values())
    low, high = wilson(ok, g, confidence)
    n = len(observations)
    return Agreement(g, ok, ok / g if g else math.nan, low, high, n, escalated, escalated / n if n else math.nan)


@dataclass(frozen=True)
class CascadeFit:
    """A fitted cascade threshold: what ``brrm calibrate --cascade`` writes and ``brrm.load`` takes
    (``brrm.load(first, cascade=second, **fit.keywords)``).

    Attributes:
        rule: ``margin`` or ``band``.
        threshold: m >= 0 (reward units) or δ in [0, 0.5).
        target: the agreement asked for, in (0, 1].
        confidence: the level of the Wilson intervals (0: point estimates).
        fit, heldout: the agreement and escalation on each side at ``threshold``.
        details: the split (seed, fraction, groups, digests, group keys), counts left out, models, source.
    """

    rule: CascadeRule
    threshold: float
    target: float
    confidence: float
    fit: Agreement
    heldout: Agreement
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def keywords(self) -> dict[str, float]:
        """The :func:`brrm.load` keyword of the fitted rule: ``{"cascade_margin": m}`` or ``{"cascade_band": δ}``."""
        return {f"cascade_{self.rule.value}": self.threshold}

    @property
    def hash(self) -> str:
        """sha256 (hex, first 16) over the canonical JSON of rule and threshold (what changes a result)."""
        key = json.dumps({"rule": self.rule.value, "threshold": self.threshold}, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def meets_target(self) -> bool:
        """Whether the held-out agreement reaches the target."""
        return self.heldout.agreement >= self.target

    def to_dict(self) -> dict[str, object]:
        return {"format": FORMAT, "rule": self.rule.value, "threshold": self.threshold,
                "keyword": next(iter(self.keywords)), "target": self.target, "confidence": self.confidence,
                "hash": self.hash, "fit": self.fit.to_dict(), "heldout": self.heldout.to_dict(), **dict(self.details)}


def fit_cascade(observations: Sequence[CascadeObservation], *, rule: CascadeRule | str, target: float = 0.99,
                heldout: float = 0.3, seed: int = 0, confidence: float = 0.95) -> CascadeFit:
    """The lowest threshold whose agreement bound on the fit groups reaches ``target`` (module docstring), measured
    on the held-out groups.

    Args:
        observations: from :func:`observe`.
        rule: ``margin`` or ``band``.
        target: the share of content groups that must agree, in (0, 1].
        heldout: the held-out fraction of groups, in (0, 1); seed: the split seed.
        confidence: the Wilson level in [0, 1) (0: the point estimate).

    Raises:
        ConfigError: on a target, fraction or level out of range, the ``agree`` rule, or fewer than
            :data:`~brrm.calibration.split.MIN_GROUPS` groups a side.
    """
    rule = CascadeRule(rule)
    if rule is CascadeRule.AGREE:
        raise ConfigError("cascade_agree has no threshold to fit; fit cascade_margin (margin) or cascade_band (band)")
    if isinstance(target, bool) or not isinstance(target, int | float) or not 0.0 < target <= 1.0:
        raise ConfigError(f"target must be an agreement in (0, 1], got {target!r}")
    if not 0.0 < heldout < 1.0:
        raise ConfigError(f"heldout must lie in (0, 1), got {heldout!r}")
    wilson(0, 0, confidence)  # checks the level
    fit_groups, held_groups = sides((o.key for o in observations), seed, heldout)
    held = set(held_groups)
    fit_side = [o for o in observations if o.key not in held]
    held_side = [o for o in observations if o.key in held]
    threshold = _lowest(fit_side, rule, target, confidence)
    digests = (observations_digest(fit_side), observations_digest(held_side))
    details = {"split": split_record(fit_groups, held_groups, seed, heldout, unit="items",
                                     counts=(len(fit_side), len(held_side)), digests=digests),
               "criterion": "lowest threshold with 1 - (F/G) * q_hi >= target on the fit groups (F: groups with an "
                            "item decided first; q_hi: the Wilson upper bound of their disagreement rate)"}
    return CascadeFit(rule, threshold, float(target), confidence, measure(fit_side, threshold, confidence=confidence),
                      measure(held_side, threshold, confidence=confidence), details)


def _lowest(obs: Sequence[CascadeObservation], rule: CascadeRule, target: float, confidence: float) -> float:
    """The lowest candidate threshold (0 or a measure) whose agreement bound on ``obs`` reaches ``target``."""
    top = BAND_TOP if rule is CascadeRule.BAND else math.inf
    finite = sorted({o.measure for o in obs if math.isfinite(o.measure) and o.measure < top} | {0.0})
    # a group disagrees at t when one of its disagreeing items is decided first: t below its largest such measure
    breaks: dict[str, float] = {}
    firsts: dict[str, float] = {}  # a group has an item decided first at t when t is below its largest measure
    for o in obs:
        if math.isnan(o.measure):
            continue
        firsts[o.key] = max(firsts.get(o.key, -math.inf), o.measure)
        if not o.agree:
            breaks[o.key] = max(breaks.get(o.key, -math.inf), o.measure)
    groups = len({o.key for o in obs})
    breaking, deciding = sorted(breaks.values()), sorted(firsts.values())
    for t in finite:
        f = len(deciding) - bisect.bisect_right(deciding, t)
        d = len(breaking) - bisect.bisect_right(breaking, t)
        q_hi = 1.0 - wilson(f - d, f, confidence)[0] if f else 0.0  # Wilson is symmetric: 1 - low of agreeing
        bound = 1.0 - f / groups * q_hi
        if bound >= target:
            return t
    return finite[-1]


def observations_digest(obs: Iterable[CascadeObservation]) -> str:
    """sha256 (64 hex) over the sorted (group, measure, agree) of observations: equal data give equal digests."""
    lines = sorted(f"{o.key}\t{o.measure!r}\t{int(o.agree)}" for o in obs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def write_cascade_fit(path: str | os.PathLike[str], fit: CascadeFit) -> None:
    """Write the fit as JSON (:meth:`CascadeFit.to_dict`)."""
    text = json.dumps(fit.to_dict(), indent=1, ensure_ascii=False, allow_nan=False)
    Path(path).expanduser().write_text(text + "\n", encoding="utf-8")


def read_cascade_fit(path: str | os.PathLike[str]) -> CascadeFit:
    """The fit in a file :func:`write_cascade_fit` wrote.

    Raises:
        ConfigError: naming the path when it is missing, not JSON, not a cascade fit, or its threshold is invalid.
    """
    data = read_format_file(path, "cascade fit", FORMAT, "brrm calibrate --cascade")
    try:
        rule = CascadeRule(str(data["rule"]))
        threshold = Confidence(rule, _number(data["threshold"])).threshold  # its range, named
        target, level = (_number(data[k]) for k in ("target", "confidence"))
        fit, held = (_agreement(as_object(data[k], k)) for k in ("fit", "heldout"))
    except (KeyError, TypeError, ValueError, ConfigError) as exc:
        raise ConfigError(f"cascade fit {str(path)!r}: {exc}") from None
    details = {k: v for k, v in data.items() if k not in _OWN}
    return CascadeFit(rule, threshold, target, level, fit, held, details)


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"expected a number, got {x!r}")
    return float(x)


def _agreement(d: Mapping[str, object]) -> Agreement:
    """An :class:`Agreement` from its :meth:`~Agreement.to_dict` (null as NaN).

    Raises:
        KeyError: on a missing field; TypeError: on one that is no number.
    """
    values = {k: math.nan if d[k] is None else _number(d[k]) for k in Agreement.__dataclass_fields__}
    ints = ("groups", "agreeing", "items", "escalated")
    return Agreement(*(int(values[k]) if k in ints else values[k]  # type: ignore[arg-type]
                       for k in Agreement.__dataclass_fields__))


_OWN = ("format", "rule", "threshold", "keyword", "target", "confidence", "hash", "fit", "heldout")
"""The keys of a fit file that :class:`CascadeFit` holds itself (the rest are its details)."""
