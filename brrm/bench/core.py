"""What every benchmark shares: items, the presentations a judge saw, per-item results, score tables.

A benchmark item holds a conversation, its candidate responses and the comparisons the benchmark asks for
(:class:`Pair`: is response ``i`` better than response ``j``, with the gold verdict in that frame). The
benchmark's protocol decides how each pair is *presented* to the judge (:class:`Shown`: given order, the
swapped order, or both); the judge's verdict is kept in the presented frame and mapped back to the pair frame
by enum arithmetic (:meth:`Shown.verdict`). Scalar reward models score each response once
(:attr:`ItemResult.rewards`) and every presentation is derived from those rewards, so the same metric code
scores both model kinds. Scores are :class:`Row` values in percent with ties and failures counted apart.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brrm.bench.orders import (  # noqa: F401  (re-exported: the presentation orders live in brrm.bench.orders)
    OFFICIAL_SEED,
    ORDER_POLICIES,
    SEQUENCE_KEY,
    presentations,
    random_swap,
    sequence_swaps,
)
from brrm.compose.pairwise import pairwise_from_rewards
from brrm.compose.swap import combine, mirror
from brrm.errors import ConfigError
from brrm.types import ConversationLike, PairwiseJudgment, ScalarReward, Status, Verdict
from brrm.types.jsonvalue import JSONValue, json_ready


@dataclass(frozen=True)
class Pair:
    """One comparison an item asks for, in the pair frame (response ``i`` is A, response ``j`` is B).

    Attributes:
        i, j: indices into :attr:`BenchItem.responses`, ``i != j``.
        gold: the benchmark's label in this frame: ``A`` (i is better), ``B`` (j is better) or ``TIE``.
    """

    i: int
    j: int
    gold: Verdict

    def __post_init__(self) -> None:
        if self.i == self.j or min(self.i, self.j) < 0:
            raise ConfigError(f"a pair compares two different responses, got ({self.i}, {self.j})")
        if self.gold not in (Verdict.A, Verdict.B, Verdict.TIE):
            raise ConfigError(f"a pair's gold must be A, B or tie, got {self.gold!r}")


@dataclass(frozen=True)
class BenchItem:
    """One benchmark item.

    Attributes:
        id: unique within the benchmark (keys sampler streams, random presentation orders and resumed runs).
        subset: the benchmark subset it belongs to (a folder, file, domain or category of the benchmark).
        conversation: a prompt string or a list of ``{"role", "content"}`` messages ending with a user turn.
        responses: the candidate responses (2 for a pair, 6 for RM-Bench's 3 styles x chosen/rejected, N for
            best-of-N lists).
        pairs: the comparisons the benchmark asks for.
        meta: JSON-ready fields the metric needs (category, scenario, style indices, …).
    """

    id: str
    subset: str
    conversation: ConversationLike
    responses: tuple[str, ...]
    pairs: tuple[Pair, ...]
    meta: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.pairs:
            if max(p.i, p.j) >= len(self.responses):
                raise ConfigError(f"item {self.id!r}: pair ({p.i}, {p.j}) but only {len(self.responses)} responses")

    def meta_str(self, key: str) -> str:
        """``meta[key]``, a string the benchmark put there.

        Raises:
            TypeError: when it is not a string (a benchmark that stored another value: a programming error).
        """
        value = self.meta[key]
        if not isinstance(value, str):
            raise TypeError(f"item {self.id!r}: meta[{key!r}] is {value!r}, not a string")
        return value

    def meta_int(self, key: str) -> int:
        """``int(meta[key])`` of a number (or numeric string) the benchmark put there.

        Raises:
            TypeError: when it is not a number or a string; ValueError: a string that is not an integer.
        """
        value = self.meta[key]
        if not isinstance(value, int | float | str):
            raise TypeError(f"item {self.id!r}: meta[{key!r}] is {value!r}, not a number")
        return int(value)

    def meta_strs(self, key: str) -> list[str]:
        """``meta[key]``, a list of strings the benchmark put there.

        Raises:
            TypeError: when it is not a list of strings.
        """
        value = self.meta[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"item {self.id!r}: meta[{key!r}] is {value!r}, not a list of strings")
        return [str(v) for v in value]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, without the texts (the per-item output file keeps ids, labels and verdicts); ``pair_keys``:
        each pair's content group (:func:`brrm.calibration.data.content_key`), which ``brrm calibrate`` splits by."""
        from brrm.calibration.data import content_key

        keys = [content_key(self.conversation, self.responses[p.i], self.responses[p.j]) for p in self.pairs]
        return {"id": self.id, "subset": self.subset, "n_responses": len(self.responses),
                "pairs": [[p.i, p.j, p.gold.value] for p in self.pairs], "pair_keys": keys, "meta": dict(self.meta)}


def content_hash(item: BenchItem) -> str:
    """sha256 (hex, first 16) of what a judge reads of an item and what scores it: id, subset, conversation,
    responses and pairs (not ``meta``: a run adds its strategy and shown order there)."""
    import json

    body = json.dumps([item.id, item.subset, item.conversation, list(item.responses),
                       [[p.i, p.j, p.gold.value] for p in item.pairs]], ensure_ascii=False, sort_keys=True,
                      default=str)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def item_keys(items: Sequence[BenchItem]) -> list[str]:
    """The identity of each item of a run, in item order: ``<content hash>#<n>``, ``n`` counting earlier items with
    the same content (0 for the first).

    Results are filed and resumed by this key, never by the benchmark's own ids: a file whose ids repeat (30, 31,
    30, 31) keeps every item apart, each with its own result. The key does not depend on which subsets or how many
    items (``--limit``) a run selects — a subset's first items come first in any selection — so a resumed run with
    another ``--limit`` finds what the earlier run judged. Two items with equal content and id are told apart by
    ``n`` (each keeps its own line and result).
    """
    seen: dict[str, int] = {}
    out = []
    for it in items:
        digest = content_hash(it)
        out.append(f"{digest}#{seen.get(digest, 0)}")
        seen[digest] = seen.get(digest, 0) + 1
    return out


@dataclass(frozen=True)
class Shown:
    """One presentation of a pair to the judge.

    Attributes:
        pair: index into :attr:`BenchItem.pairs`.
        swapped: False: response ``i`` was shown first (as A); True: response ``j`` was.
        judgment: the judge's result in the presented frame (A = the response shown first).
    """

    pair: int
    swapped: bool
    judgment: PairwiseJudgment

    @property
    def verdict(self) -> Verdict:
        """The verdict in the pair frame (A = response ``i``); ``NONE`` when the judgment failed."""
        if not self.judgment.ok:
            return Verdict.NONE
        return self.judgment.winner.mirrored() if self.swapped else self.judgment.winner


@dataclass(frozen=True)
class ItemResult:
    """Everything the judge said about one item.

    Attributes:
        item: the item.
        shown: every presentation, in the order the protocol listed them.
        rewards: scalar reward models: one reward per response (the presentations are derived from them);
            empty for pairwise judges.
        key: the item's identity in its run (:func:`item_keys`), which files and resumes it; ``""`` for results
            replayed from official output files or from a ``judgments.jsonl`` written before keys were recorded.
    """

    item: BenchItem
    shown: tuple[Shown, ...]
    rewards: tuple[ScalarReward, ...] = ()
    key: str = ""

    def statuses(self) -> list[str]:
        """The status value of every judgment and reward in it (what a resume reads to decide a retry)."""
        return [s.judgment.status.value for s in self.shown] + [r.status.value for r in self.rewards]

    @property
    def scalar(self) -> bool:
        """Whether a scalar reward model produced it (its verdicts come from rewards, not a pairwise judge)."""
        return bool(self.rewards)

    def presentations(self, pair: int) -> tuple[Shown, ...]:
        """The presentations of one pair, in protocol order."""
        return tuple(s for s in self.shown if s.pair == pair)

    def verdict(self, pair: int) -> Verdict:
        """One verdict per pair in the pair frame: the single presentation's, or both orders combined
        (:func:`brrm.compose.combine`: agreement gives that winner, disagreement a tie, a failed order NONE);
        kept beside the frozen fields, since scoring reads each pair many times. Raises ConfigError for a pair with
        neither one presentation nor both orders."""
        memo: dict[int, Verdict] = self.__dict__.setdefault("_verdicts", {})
        if pair not in memo:
            memo[pair] = self._verdict(pair)
        return memo[pair]

    def _verdict(self, pair: int) -> Verdict:
        shown = self.presentations(pair)
        if len(shown) == 1:
            return shown[0].verdict
        if len(shown) != 2 or shown[0].swapped == shown[1].swapped:
            raise ConfigError(f"item {self.item.id!r} pair {pair}: expected one presentation or both orders")
        fwd, rev = (s.judgment if not s.swapped else mirror(s.judgment) for s in shown)
        both = combine(fwd, rev)
        return both.winner if both.ok else Verdict.NONE


@dataclass(frozen=True)
class Row:
    """One line of a score table.

    Attributes:
        name: a subset, category or aggregate (``Overall``) as the benchmark names it.
        score: the benchmark's main figure in percent, [0, 100]; NaN when nothing could be scored.
        n: items behind it.
        ties: presentations that ended in a tie (counted apart; how they score is the benchmark's rule).
        failures: presentations without a verdict (parse failure, truncation, backend error).
        extra: further official figures (consistency, easy/normal/hard, LLMBar statistics, …), JSON-ready.
    """

    name: str
    score: float
    n: int
    ties: int = 0
    failures: int = 0
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready; an undefined figure (NaN, e.g. a kappa with one class) is ``null``."""
        return {"name": self.name, "score": json_ready(self.score), "n": self.n, "ties": self.ties,
                "failures": self.failures, **({"extra": json_ready(dict(self.extra))} if self.extra else {})}


@dataclass(frozen=True)
class Cost:
    """What a run cost.

    Attributes:
        judgments: model calls: ordered pairwise judgments, or responses scored by a scalar model.
        generated_tokens: tokens generated over all judgments (0 for scalar reward models: not measured).
        prompt_tokens: tokens read (prompts of every turn, or scored inputs).
        seconds: wall time of the judging, in seconds.
        unit: what ``judgments`` counts: ``judgments`` (pairwise judges) or ``rewards`` (scalar models).
        tokens: :func:`brrm.types.usage.token_report` of the results judged in this run (tokens per judgment by
            turn, mean and p95, cached where the backend reports it; judgments per second; a cascade's stage
            shares); None when not measured.
    """

    judgments: int
    generated_tokens: int
    prompt_tokens: int
    seconds: float
    unit: str = "judgments"
    tokens: Mapping[str, JSONValue] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {self.unit: self.judgments, "generated_tokens": self.generated_tokens,
                                  "prompt_tokens": self.prompt_tokens, "seconds": round(self.seconds, 3)}
        if self.tokens is not None:
            out["tokens"] = dict(self.tokens)
        return out


@dataclass(frozen=True)
class BenchResult:
    """A benchmark's scores.

    Attributes:
        benchmark: registry name (``llmbar``, ``rm-bench``, …).
        metric: what ``score`` means, in words (e.g. "accuracy, two-game rule, %").
        rows: per-subset rows, then aggregate rows, as the official script reports them.
        headline: the name of the row that is the benchmark's overall number.
        notes: caveats (missing data, rules that differ from an official script, ties and failures).
        cost: what the run cost (None for a replay of stored outputs).
        judge: the judge's :class:`~brrm.types.JudgeInfo` as a dict (empty for a replay of official files).
        data_revision: the data scored, by revision and digests: the dict ``run.json`` and ``result.json`` record
            (:func:`brrm.bench.data.run_revision`: ``source``, ``repository``, ``commit``, the files' ``sha256``
            and ``items_sha256``; a replay adds ``predictions_sha256``). Set by :func:`brrm.bench.evaluate` and
            ``brrm bench`` (the parsed-only figure too); empty when the result was made by
            :meth:`~brrm.bench.base.Benchmark.score` alone.
    """

    benchmark: str
    metric: str
    rows: tuple[Row, ...]
    headline: str
    notes: tuple[str, ...] = ()
    cost: Cost | None = None
    judge: Mapping[str, object] = field(default_factory=dict)
    data_revision: Mapping[str, object] = field(default_factory=dict)

    def row(self, name: str) -> Row:
        """The row called ``name``.

        Raises:
            ConfigError: when there is none (listing the rows).
        """
        for r in self.rows:
            if r.name == name:
                return r
        raise ConfigError(f"no row {name!r}; rows: {', '.join(r.name for r in self.rows)}")

    @property
    def scores(self) -> dict[str, float]:
        """Row name -> score (percent)."""
        return {r.name: r.score for r in self.rows}

    @property
    def overall(self) -> float:
        """The headline row's score (percent)."""
        return self.row(self.headline).score

    def to_dict(self) -> dict[str, object]:
        return {"benchmark": self.benchmark, "metric": self.metric, "headline": self.headline,
                "overall": json_ready(self.overall),
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes),
                "cost": self.cost.to_dict() if self.cost else None, "judge": dict(self.judge),
                "data_revision": dict(self.data_revision)}


def known_subset(value: object, known: Sequence[str], where: str) -> str:
    """``value`` when it is exactly one of the ``known`` subset names (as the data spells them).

    Official scripts group by the exact string, so a near miss would silently drop a subset from its row while
    still counting in the aggregates: a name that matches a known one only case-insensitively (``ties`` for
    ``Ties``) is refused naming the known spelling, before any model call.

    Raises:
        ConfigError: naming ``where`` (a file and row), the value and the known spelling (or all known names).
    """
    if isinstance(value, str) and value in known:
        return value
    near = [k for k in known if isinstance(value, str) and k.lower() == value.strip().lower()]
    if near:
        raise ConfigError(f"{where}: the subset {value!r} is not a known subset; the known one is {near[0]!r} (subset "
                          "names are matched exactly, as the official script groups them)")
    raise ConfigError(f"{where}: the subset {value!r} is not one of {', '.join(known)}")


def tally(results: Iterable[ItemResult], *, per_pair: bool = False) -> tuple[int, int]:
    """(ties, failures) over every presentation of the results, or over every pair's single verdict
    (``per_pair``: both orders combined, a position-inconsistent pair counting as a tie)."""
    ties = failures = 0
    for r in results:
        if per_pair:
            verdicts = [r.verdict(k) for k in range(len(r.item.pairs))]
        else:
            verdicts = [s.judgment.winner if s.judgment.ok else Verdict.NONE for s in r.shown]
        ties += sum(v is Verdict.TIE for v in verdicts)
        failures += sum(v is Verdict.NONE for v in verdicts)
    return ties, failures


def percent(numerator: float, denominator: float) -> float:
    """100 · numerator / denominator; NaN when the denominator is 0 (nothing to score)."""
    return 100.0 * numerator / denominator if denominator else math.nan


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values or any NaN value (a missing part is never silently dropped)."""
    return sum(values) / len(values) if values and not any(math.isnan(v) for v in values) else math.nan


def row(name: str, score: float, results: Sequence[ItemResult], *, per_pair: bool = False, **extra: object) -> Row:
    """A :class:`Row` over ``results`` with its ties and failures counted (see :func:`tally`)."""
    ties, failures = tally(results, per_pair=per_pair)
    return Row(name, score, len(results), ties, failures, extra)


def pair_row(name: str, score: float, results: Sequence[ItemResult], **extra: object) -> Row:
    """A :class:`Row` whose ties and failures are counted per pair verdict (benchmarks scoring one verdict per
    pair, where ``orders="both"`` combines the two orders first)."""
    return row(name, score, results, per_pair=True, **extra)


def group(results: Iterable[ItemResult], key: Callable[[ItemResult], str]) -> dict[str, list[ItemResult]]:
    """Results grouped by ``key(result)``, groups in first-seen order."""
    out: dict[str, list[ItemResult]] = {}
    for r in results:
        out.setdefault(key(r), []).append(r)
    return out


def failed_judgment(status: Status, reason: str, item_id: str = "") -> PairwiseJudgment:
    """A judgment without a verdict (a stored output that could not be parsed, a missing game)."""
    return PairwiseJudgment(Verdict.NONE, status, reason, id=item_id, attempts=0)


def ok_judgment(winner: Verdict, item_id: str = "", reason: str = "") -> PairwiseJudgment:
    """A judgment with a verdict, as read back from stored outputs (no model call here)."""
    return PairwiseJudgment(winner, Status.OK, reason, id=item_id, attempts=0)


def stored_judgment(verdicts: Mapping[Any, Verdict], value: object, reason: str, item_id: str) -> PairwiseJudgment:
    """A stored output read back: ``verdicts[value]`` as an ok judgment, or a parse failure saying ``reason`` where
    the table has no such value (a bool or a list never matches: ``True == 1``)."""
    if isinstance(value, Hashable) and not isinstance(value, bool) and value in verdicts:
        return ok_judgment(verdicts[value], item_id)
    return failed_judgment(Status.PARSE_FAILURE, reason, item_id)


def shown_from_rewards(item: BenchItem, rewards: Sequence[ScalarReward], plan: Sequence[tuple[int, bool]], *,
                       margin: float = 0.0) -> tuple[Shown, ...]:
    """Presentations of a scalar reward model, derived from one reward per response (no model call):
    σ(r_first − r_second), a tie when |Δ| ≤ ``margin`` (how a tie scores is the benchmark's rule).

    Raises:
        ConfigError: when there is not one reward per response.
    """
    if len(rewards) != len(item.responses):
        raise ConfigError(f"item {item.id!r}: {len(rewards)} rewards for {len(item.responses)} responses")
    out = []
    for k, swapped in plan:
        p = item.pairs[k]
        first, second = (p.j, p.i) if swapped else (p.i, p.j)
        judged = pairwise_from_rewards(rewards[first], rewards[second], margin=margin, id=item.id)
        out.append(Shown(k, swapped, judged))
    return tuple(out)
