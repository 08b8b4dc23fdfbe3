"""A judge cascade, as composition: a first judge decides alone where it is confident; a second judge decides the rest.

Fast/slow-thinking reward models spend long reasoning only on the pairs a fast judge is unsure of (arXiv
2603.20212), and E-GRM reasons only where parallel samples disagree (arXiv 2604.10072). :class:`CascadeJudge` does
this with any two :class:`~brrm.RewardJudge` s (issue 48): e.g. a Bradley–Terry model first and BR-RM second, or
BR-RM with swap first and BR-RM with voting second. "Confident" is one :class:`Confidence` rule
(:class:`~brrm.types.cascade.CascadeRule`): a Bradley–Terry margin above ``m``, a P(A ≻ B) outside [½ − δ, ½ + δ],
or agreement of the first judge's samples or swap orders.

Every result says which stage decided it and why (:attr:`~brrm.types.PairwiseJudgment.cascade`, a
:class:`~brrm.types.cascade.CascadeDecision`); an escalated result is the second judge's judgment (its provenance)
carrying the first judge's own in ``cascade.first``. A first-stage failure is never read as confidence: it
escalates. An item's escalation depends only on its own first judgment, and each stage's results depend only on
their own items (the judges' own batch invariance), so a result never depends on its neighbours. Costs come from the
two judges (:class:`~brrm.types.cost.CascadeCost`: worst case and expected at an escalation rate).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from brrm.compose.base import _ids, _labels
from brrm.compose.judges import PairwiseSurface
from brrm.compose.strategies import pairwise_cost, scalar_cost
from brrm.errors import ConfigError
from brrm.types import JudgeInfo, PairwiseJudgment, Progress, RewardJudge, Verdict, check_bool, check_same_length
from brrm.types.cascade import CascadeDecision, CascadeRule, CascadeStage, CascadeWhy
from brrm.types.composition import Composition
from brrm.types.config import check_float
from brrm.types.conversation import ConversationLike
from brrm.types.cost import CascadeCost, JudgmentCost
from brrm.types.protocols import OnResult, OnStep, Principles, kind_trait
from brrm.types.usage import merge_turns

__all__ = ["CascadeJudge", "Confidence", "described_cost", "escalation_rate"]


@dataclass(frozen=True)
class Confidence:
    """When a cascade's first judge is confident: one :class:`~brrm.types.cascade.CascadeRule` and its threshold.

    Attributes:
        rule: ``margin``, ``band`` or ``agree``.
        threshold: ``margin``: m in reward units, finite, >= 0 (confident when |r_A − r_B| > m); ``band``: δ in
            [0, 0.5) (confident when |P(A ≻ B) − ½| > δ); ``agree``: NaN (no threshold).

    The margin is read off the first judgment as |logit P(A ≻ B)| of its uncalibrated probability (``p_a_raw``
    where a calibration was applied): a scalar judge's P(A ≻ B) is σ(r_A − r_B) (:mod:`brrm.compose.pairwise`), so
    this is |r_A − r_B| up to float rounding; a P of exactly 0 or 1 (|r_A − r_B| beyond about 37 in float64) is an
    infinite margin. Over a pairwise judge it is the log-odds of its verdict. The band reads ``p_a`` as the result
    carries it (calibrated where a calibration was applied). A probability the judge did not measure (NaN) is
    never confident.

    Raises:
        ConfigError: on a threshold outside its range (naming the rule).
    """

    rule: CascadeRule
    threshold: float = math.nan

    def __post_init__(self) -> None:
        rule = CascadeRule(self.rule)
        object.__setattr__(self, "rule", rule)
        if rule is CascadeRule.MARGIN:
            object.__setattr__(self, "threshold", check_float("cascade_margin", self.threshold, low=0))
        elif rule is CascadeRule.BAND:
            delta = check_float("cascade_band", self.threshold, low=0)
            if delta >= 0.5:
                raise ConfigError(f"cascade_band must be in [0, 0.5) (the band [0.5 - d, 0.5 + d] inside [0, 1]), "
                                  f"got {delta!r}")
            object.__setattr__(self, "threshold", delta)
        else:
            object.__setattr__(self, "threshold", math.nan)

    @classmethod
    def of(cls, *, margin: float | None = None, band: float | None = None, agree: bool = False) -> Confidence:
        """The rule the options name: exactly one of ``margin`` (m), ``band`` (δ) or ``agree=True``.

        Raises:
            ConfigError: when none or several are given, or on a value outside its range.
        """
        given = [name for name, on in (("cascade_margin", margin is not None), ("cascade_band", band is not None),
                                        ("cascade_agree", check_bool("cascade_agree", agree))) if on]
        if len(given) != 1:
            raise ConfigError("a cascade needs exactly one confidence rule: cascade_margin=M (a Bradley-Terry margin "
                              "in reward units), cascade_band=D (P(A > B) outside [0.5 - D, 0.5 + D]) or "
                              f"cascade_agree=True (samples or swap orders agree); got {given or 'none'}")
        if margin is not None:
            return cls(CascadeRule.MARGIN, margin)
        if band is not None:
            return cls(CascadeRule.BAND, band)
        return cls(CascadeRule.AGREE)

    def decide(self, j: PairwiseJudgment) -> tuple[CascadeWhy, float, str]:
        """Whether the first judgment ``j`` decides alone: (why, the measure, one line for people)."""
        if not j.ok:
            return CascadeWhy.FIRST_FAILED, math.nan, f"first stage {j.status.value}: {j.reason}"
        if j.attempts == 0:
            return CascadeWhy.NO_MODEL_CALL, math.nan, f"decided without a model call: {j.reason or j.winner.value}"
        if self.rule is CascadeRule.AGREE:
            return _agreement(j)
        p = j.p_a_raw if self.rule is CascadeRule.MARGIN and math.isfinite(j.p_a_raw) else j.p_a
        if not math.isfinite(p):
            return CascadeWhy.UNCERTAIN, math.nan, "P(A > B) was not measured"
        if self.rule is CascadeRule.MARGIN:
            measure, name = (math.inf if p in (0.0, 1.0) else abs(math.log(p / (1.0 - p)))), "|r_A - r_B|"
        else:
            measure, name = abs(p - 0.5), "|P(A > B) - 0.5|"
        sure = measure > self.threshold
        why = CascadeWhy.CONFIDENT if sure else CascadeWhy.UNCERTAIN
        return why, measure, f"{name} = {measure:.4g} {'>' if sure else '<='} {self.threshold:g}"


    def escalation_rate(self, firsts: Sequence[PairwiseJudgment]) -> float:
        """The share of the first judge's own judgments ``firsts`` (e.g. an earlier run of the first judge alone)
        that this rule would send to the second judge, in [0, 1]; NaN for none: with
        :meth:`~brrm.types.cost.CascadeCost.expected`, the expected cost of a threshold before the second judge
        runs at all."""
        if not firsts:
            return math.nan
        return sum(self.decide(j)[0] not in _DECIDED_FIRST for j in firsts) / len(firsts)


def _agreement(j: PairwiseJudgment) -> tuple[CascadeWhy, float, str]:
    """The ``agree`` rule: every ordered judgment behind ``j`` ok and of one verdict (failed ones disagree)."""
    subs = [s for s, _ in j.ordered_judgments()]
    if len(subs) < 2:
        return CascadeWhy.UNCERTAIN, math.nan, "one ordered judgment: no samples or swap orders to agree"
    verdicts = [s.winner for s in subs if s.ok]
    top = max((verdicts.count(v) for v in set(verdicts)), default=0)
    failed = len(subs) - len(verdicts)
    detail = f"{top} of {len(subs)} ordered judgments agree" + (f" ({failed} failed)" if failed else "")
    why = CascadeWhy.CONFIDENT if top == len(subs) else CascadeWhy.UNCERTAIN
    return why, top / len(subs), detail


def escalation_rate(results: Sequence[PairwiseJudgment]) -> float:
    """The share of a cascade's results that its second judge decided, in [0, 1]; NaN for no results.

    Raises:
        ConfigError: on a result that no cascade produced (``cascade`` is None).
    """
    if any(r.cascade is None for r in results):
        raise ConfigError("escalation_rate: a result carries no cascade decision (not a cascade's result)")
    return sum(r.cascade is not None and r.cascade.escalated for r in results) / len(results) if results else math.nan


class CascadeJudge(PairwiseSurface):
    """A :class:`~brrm.RewardJudge` whose ``first`` judge decides alone where :class:`Confidence` says it is
    confident, and whose ``second`` judge decides every other item (uncertain or failed first judgments).

    ``judge_pairs`` runs the first judge on every pair, then the second on the escalated ones only, in one call
    each. ``score`` is P(response ≻ reference) from those judgments (``references=`` needed, as for any judge of
    pairs) and ``rank`` runs the pairwise strategies (``round_robin`` by default) over them; the ``scores`` strategy
    is refused (a cascade has no scalar reward of its own). ``swap`` goes to both stages (None: each stage's own
    default; a scalar stage ignores it); ``principles`` go to the stages that take them (a principle model) and
    are refused when neither does.

    Args:
        first: the cheap judge (e.g. a Bradley–Terry model, or BR-RM with swap or voting for ``agree``).
        second: the judge of the rest (e.g. BR-RM).
        confidence: the rule (:meth:`Confidence.of`).

    Raises:
        ConfigError: for ``agree`` over a first judge with neither swap nor voting samples (nothing can disagree).
    """

    def __init__(self, first: RewardJudge, second: RewardJudge, confidence: Confidence) -> None:
        comp = first.info.composition
        if confidence.rule is CascadeRule.AGREE and not (first.info.pairwise and (comp.swap or comp.samples > 1)):
            raise ConfigError("cascade_agree needs a first judge of pairs with swap=True or samples > 1 (its orders "
                              f"or samples agree or not); {first.info.describe()} has neither")
        self.first, self.second, self.confidence = first, second, confidence
        self.swap = None
        self.model = first  # closed by close() with the second
        s = second.info
        described = json.dumps({"rule": confidence.rule.value, "threshold": _num(confidence.threshold),
                                "second": {"model": s.model, "kind": s.kind, "backend": s.backend,
                                           "fingerprint": s.fingerprint, "options": s.to_dict()["options"]}},
                               sort_keys=True, separators=(",", ":"))
        self.info = replace(first.info, pairwise=True, needs_reference=True, default_strategy="round_robin",
                            takes_principle=bool(first.info.takes_principle or s.takes_principle),
                            chunk_size=min(first.info.chunk_size, s.chunk_size),
                            concurrent=first.info.concurrent and s.concurrent,
                            composition=replace(comp, cascade=described))

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        """One judgment per (conversation, A, B), in input order, each with its ``cascade`` decision;
        ``on_result(i, judgment)`` is called for each pair once its deciding stage has run.

        Raises:
            ConfigError: on mismatched lengths or invalid inputs, or principles that neither stage takes.
        """
        n = check_same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b)
        rids, gold = _ids(ids, n), _labels(labels, n)
        if swap is not None:
            check_bool("swap", swap)
        if principles is not None and not self.info.takes_principle:
            raise ConfigError("principles: neither stage of this cascade takes one (only principle models do)")
        if principles is not None and not isinstance(principles, str):
            check_same_length(conversations=conversations, principles=principles)
        firsts = self.first.judge_pairs(conversations, responses_a, responses_b, swap=swap, ids=rids,
                                        principles=self._principles(self.first, principles, range(n)),
                                        on_step=on_step)
        decided = [self.confidence.decide(j) for j in firsts]
        up = [i for i, (why, _, _) in enumerate(decided) if why not in _DECIDED_FIRST]
        out: list[PairwiseJudgment | None] = [None] * n
        escalated = set(up)
        for i, j in enumerate(firsts):
            if i not in escalated:
                out[i] = self._decided(j, CascadeStage.FIRST, decided[i], gold, i)
        self._report(out, progress, on_result)
        seconds = self.second.judge_pairs(
            [conversations[i] for i in up], [responses_a[i] for i in up], [responses_b[i] for i in up], swap=swap,
            ids=[rids[i] for i in up], principles=self._principles(self.second, principles, up),
            on_step=on_step) if up else []
        for i, j in zip(up, seconds, strict=True):
            out[i] = self._decided(j, CascadeStage.SECOND, decided[i], gold, i, first=firsts[i])
        self._report([out[i] if i in escalated else None for i in range(n)], progress, on_result)
        return [j for j in out if j is not None]

    def _decided(self, j: PairwiseJudgment, stage: CascadeStage, decided: tuple[CascadeWhy, float, str],
                 gold: list[Verdict] | None, i: int, first: PairwiseJudgment | None = None) -> PairwiseJudgment:
        """``j`` with its cascade decision and label (an escalated one's token counts include the first stage's)."""
        why, measure, detail = decided
        decision = CascadeDecision(stage, why, self.confidence.rule, self.confidence.threshold, measure, detail,
                                   first=first)
        label = gold[i] if gold is not None else j.label
        if first is None:
            return replace(j, cascade=decision, label=label)
        return replace(j, cascade=decision, label=label, prompt_tokens=j.prompt_tokens + first.prompt_tokens,
                       generated_tokens=j.generated_tokens + first.generated_tokens,
                       turns=merge_turns(first.turns, j.turns))

    @staticmethod
    def _report(out: Sequence[PairwiseJudgment | None], progress: Progress, on_result: OnResult) -> None:
        done = [(i, j) for i, j in enumerate(out) if j is not None]
        if on_result is not None:
            for i, j in done:
                on_result(i, j)
        if progress is not None and done:
            progress(float(len(done)))

    @staticmethod
    def _principles(stage: RewardJudge, principles: Principles, items: Sequence[int]) -> Principles:
        """The principles for ``stage`` over ``items`` (None for a stage that takes none)."""
        if principles is None or not stage.info.takes_principle or isinstance(principles, str):
            return principles if stage.info.takes_principle else None
        return [principles[i] for i in items]

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> CascadeCost:
        """Both stages' costs for a request (:class:`~brrm.types.cost.CascadeCost`): ``pairs`` n pairs, ``score`` n
        pairs (each response against its reference), ``group`` the pairwise strategy's pairs; the first stage on
        every pair, the second on at most all of them.

        Raises:
            ConfigError: on an unknown shape or strategy, ``scores``, n < 0, or as the stages' own costs.
        """
        plain = pairwise_cost(shape, n, strategy=strategy, swap=bool(swap))
        pairs, sw = plain.pairs, (False if plain.strategy == "round_robin" else swap)
        first = self.first.judgment_cost("pairs", pairs, swap=sw,
                                         principles=principles if self.first.info.takes_principle else None)
        second = self.second.judgment_cost("pairs", pairs, swap=sw,
                                           principles=principles if self.second.info.takes_principle else None)
        return CascadeCost(shape, n, first.units + second.units, strategy=plain.strategy, pairs=pairs, first=first,
                           second=second, unit="model call")

    def with_options(self, **overrides: object) -> CascadeJudge:
        """A variant: ``cascade_margin``, ``cascade_band`` or ``cascade_agree`` set a new rule (exactly one); every
        other option goes to each stage whose ``with_options`` takes it (e.g. ``max_new_tokens`` to a BR-RM second
        stage, ``margin`` to a Bradley–Terry first stage).

        Its ``info.spec`` is this judge's with the new rule when only the rule changes; None when a stage's option
        does (one ``brrm.load`` call's keywords cannot say which stage took it).

        Raises:
            ConfigError: on an option neither stage takes, or an invalid rule.
        """
        own = {k: overrides.pop(k) for k in _RULE_KEYWORDS if k in overrides}
        confidence = self.confidence
        if own:
            confidence = Confidence.of(margin=_opt_float(own.get("cascade_margin")),
                                       band=_opt_float(own.get("cascade_band")),
                                       agree=bool(own.get("cascade_agree", False)))
        stages, errors = [], []
        for stage in (self.first, self.second):
            try:
                stages.append(stage.with_options(**overrides) if overrides else stage)
            except ConfigError as e:
                errors.append(e)
                stages.append(stage)
        if len(errors) == 2:
            raise errors[0]
        variant = CascadeJudge(stages[0], stages[1], confidence)
        spec = self.info.spec
        if spec is not None and not overrides:
            kept = {k: v for k, v in spec.options.items() if k not in _RULE_KEYWORDS}
            variant.info = replace(variant.info, spec=replace(spec, options={**kept, **own}))
        else:
            variant.info = replace(variant.info, spec=None)
        return variant

    def close(self) -> None:
        """Close both stages."""
        try:
            self.first.close()
        finally:
            self.second.close()


def described_cost(info: JudgeInfo, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                   principles: int | None = None) -> CascadeCost:
    """What a request costs the cascade ``info`` describes, from its record alone (a served cascade, as
    :class:`~brrm.service.RemoteJudge` sees it): the first stage from ``info``'s kind and composition, the second
    from ``info.composition.cascade``; each stage's arithmetic is its kind's (:func:`pairwise_cost`,
    :func:`scalar_cost`), as :meth:`CascadeJudge.judgment_cost` asks of the judges themselves.

    Raises:
        ConfigError: for an info that describes no cascade, or as :meth:`CascadeJudge.judgment_cost`.
    """
    try:
        second = json.loads(info.composition.cascade)["second"]
        kind, options = str(second["kind"]), second["options"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{info.describe()} describes no judge cascade") from None
    plain = pairwise_cost(shape, n, strategy=strategy, swap=bool(swap))
    sw = False if plain.strategy == "round_robin" else swap
    first = _stage_cost(info.kind, info.composition, plain.pairs, sw, principles)
    last = _stage_cost(kind, Composition.from_record(options), plain.pairs, sw, principles)
    return CascadeCost(shape, n, first.units + last.units, strategy=plain.strategy, pairs=plain.pairs,
                       unit="model call", first=first, second=last)


def _stage_cost(kind: str, composition: Composition, pairs: int, swap: bool | None,
                principles: int | None) -> JudgmentCost:
    """One stage's cost for ``pairs`` pairs from its kind's traits and recorded composition."""
    if kind_trait(kind, "pairwise") is not False:
        both = bool(composition.swap if swap is None else swap)
        return pairwise_cost("pairs", pairs, swap=both, samples=composition.samples)
    per = principles if principles is not None and kind_trait(kind, "takes_principle") else None
    return scalar_cost("pairs", pairs, principles=per or max(1, len(composition.principles)))


_DECIDED_FIRST = (CascadeWhy.CONFIDENT, CascadeWhy.NO_MODEL_CALL)
"""Why a first judgment decides alone; any other why escalates."""

_RULE_KEYWORDS = ("cascade_margin", "cascade_band", "cascade_agree")
"""The keywords of a cascade's confidence rule (:meth:`Confidence.of`)."""


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def _opt_float(x: object) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ConfigError(f"a cascade threshold must be a number, got {x!r}")
    return float(x)
