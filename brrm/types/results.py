"""Typed results: pairwise judgments, scalar rewards and group rankings, each with an explicit status.

Every result is a frozen dataclass with an explicit :class:`Status` and a ``reason``. A result that did
not produce a verdict carries ``Verdict.NONE`` and a non-``ok`` status; a reward that was not computed is
NaN with a non-``ok`` status (``null`` in JSON). Nothing is encoded as ``-1`` or a silent default, and
aggregates skip non-``ok`` results by status (see :mod:`brrm.types.summary`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brrm.errors import ConfigError
from brrm.types.cascade import CascadeDecision
from brrm.types.config import SamplingConfig, check_text
from brrm.types.jsonvalue import JSONDict, JSONValue, json_field
from brrm.types.usage import TurnTokens
from brrm.types.verdict import Status, Verdict
from brrm.types.verdict import parse_label as parse_label  # re-exported (its home is brrm.types.verdict)

LOGPROB_SEMANTICS = ("raw", "unknown")
"""What a result's verdict probability is the softmax of (``Provenance.logprob_semantics``).

``raw``: the raw logits of the verdict options, known to be so (the transformers backend reads its own logits;
vLLM runs ``logprobs_mode="raw_logits"`` or scores the verdict in its own temperature-1, top-p-1 step; an
OpenAI-compatible server whose ``--logprobs-mode`` was declared). ``unknown``: an OpenAI-compatible server whose
logprobs mode was not declared; the verdict is still sent in a temperature-1 step, but what the server
reports cannot be known. Aggregates refuse to mix the two (:func:`brrm.types.summary.check_logprob_semantics`).
"""


@dataclass(frozen=True)
class Provenance:
    """What produced a result: enough to reproduce or audit it.

    Attributes:
        model: model id or local path.
        backend: backend name (``transformers``, ``vllm``, ``openai``, ``fake``).
        template_hash: sha256 (hex, first 16 chars) over the prompt templates used.
        sampling: the decoding settings.
        seed: the seed this item's sampler streams derive from (:func:`brrm.seeds.item_seed`: the base seed
            and a stable key of the item; never its position in a batch).
        decoding: ``faithful`` or ``constrained``.
        policies: input-normalisation policies applied (e.g. history reasoning stripped), name -> value.
        calibration: the sha256 (hex, first 16) of the probability calibration applied to P(A ≻ B)
            (:mod:`brrm.calibration`); ``""`` when none was applied.
        fingerprint: the fingerprint of the weights that produced the result (:class:`brrm.JudgeSpec`); empty
            when the backend was built by hand or the result was replayed.
        logprob_semantics: what the result's probabilities are the softmax of, one of
            :data:`LOGPROB_SEMANTICS` (the backend's ``Capabilities.logprob_semantics``).
        seeded: whether the backend honoured ``seed`` (the backend's ``Capabilities.seeded``): True for the
            transformers and in-process vLLM backends, which seed each item's sampler streams themselves; False for
            an OpenAI-compatible server, which is sent the seed but may ignore it (a sampled result may then not
            reproduce), and for a replayed result (the seed recorded did not produce it). Greedy decoding does not
            depend on it. A stored provenance written before the field existed loads as False for backend
            ``openai`` and ``replay``, else True (what those backends did then: :func:`brrm.types.codec.stored_seeded`).

    Raises:
        ConfigError: on a ``logprob_semantics`` outside :data:`LOGPROB_SEMANTICS`.
    """

    model: str
    backend: str
    template_hash: str
    sampling: SamplingConfig
    seed: int
    decoding: str = "faithful"
    policies: Mapping[str, JSONValue] = field(default_factory=dict)
    calibration: str = ""
    fingerprint: str = ""
    logprob_semantics: str = "raw"
    seeded: bool = True

    def __post_init__(self) -> None:
        if self.logprob_semantics not in LOGPROB_SEMANTICS:
            raise ConfigError(f"provenance.logprob_semantics must be one of {list(LOGPROB_SEMANTICS)}, "
                              f"got {self.logprob_semantics!r}")

    @classmethod
    def of(cls, backend: Any, **fields: Any) -> Provenance:
        """The provenance of a result ``backend`` (a :class:`~brrm.backends.base.Backend`) produced: its model, name,
        fingerprint, logprob semantics and seeding, with ``fields`` (template hash, sampling, seed, decoding, …)."""
        info, caps = backend.info, backend.capabilities
        return cls(model=info.model, backend=info.name, fingerprint=info.fingerprint,
                   logprob_semantics=caps.logprob_semantics, seeded=caps.seeded, **fields)

    def to_dict(self) -> JSONDict:
        return {key: json_field(getattr(self, key)) for key in PROVENANCE_KEYS}


@dataclass(frozen=True)
class PairwiseJudgment:
    """The result of judging response A against response B for one conversation.

    Attributes:
        winner: ``A``, ``B``, ``TIE`` or ``NONE`` (no verdict; see ``status``). BR-RM itself never
            outputs a tie; ties come from swap-order debiasing or identical responses.
        status: outcome; only ``ok`` results carry a winner other than NONE.
        reason: human-readable explanation when ``status`` is not ``ok`` (empty otherwise).
        dimensions: the 1–3 quality dimensions turn 1 chose, in the judge's order.
        unknown_dimensions: names turn 1 wrote that are not among the 8 trained dimensions (faithful mode).
        analysis_a, analysis_b: turn-1 critical issues of A and B (mapped back from positions).
        turn1_text, turn2_text: raw generated texts (T1, T2), without the end-of-turn token.
        prompt_tokens: tokens of P1 plus tokens of P2 (what was prefilled, before any cache reuse).
        generated_tokens: tokens generated over both turns.
        p_a: P(A better than B) in [0, 1] from the verdict-digit logits, or NaN (``null`` in JSON) when no
            model call measured it (faithful mode, a short-circuited pair); a conditional probability of
            the model, not a calibrated one — unless a calibration was applied (``provenance.calibration``):
            then ``p_a`` is the calibrated probability and ``p_a_raw`` the model's own.
        p_a_raw: the uncalibrated P(A ≻ B) when a calibration was applied; NaN when none was (``p_a`` is then
            the raw value itself).
        logit_1, logit_2: raw float32 logits of the verdict digits "1" and "2" (NaN when not measured).
        provenance: what produced it.
        id: the record id, if any (swap sub-judgments carry the pair's id too).
        label: the gold label (``A``/``B``/``tie``) if the record had one, else ``Verdict.NONE``.
        attempts: model runs behind this judgment: 0 when short-circuited without a model call, else
            1 + retries (with swap: 1 + the retries of both orders, so a judgment that was never re-run
            says 1).
        sub_judgments: for swap-order debiasing, the (A,B) and (B,A) judgments.
        consistent: for swap-order debiasing, whether both orders agreed; None (``null``) when only one
            order was judged or an order failed. Under voting: whether both orders' majorities agreed.
        samples: self-consistency voting (:mod:`brrm.compose.vote`): the independent two-turn judgments per
            presentation order behind this result, int >= 1 (1: no voting). With ``samples`` > 1,
            ``sub_judgments`` holds every sampled judgment in the (A, B) frame (forward samples 0..k-1, then,
            under swap, reversed samples 0..k-1), ``winner`` is their majority, ``p_a`` their mean.
        agreement: under voting, the share of ok sampled judgments that gave the majority's verdict (the
            largest vote count over the ok ones), in [1/3, 1]; NaN (``null``) without voting or without an
            ok sample.
        cascade: which stage of a judge cascade decided this result and why, with the first stage's judgment when
            the second decided (:class:`~brrm.types.cascade.CascadeDecision`); None outside a cascade.
        turns: the tokens of each turn the backend ran (:class:`~brrm.types.usage.TurnTokens`: prompt, cached,
            generated; index 0 is turn 1), summed over every model run behind the result (both swap orders, every
            voting sample, a cascade's two stages, retried attempts), so they can exceed ``prompt_tokens`` and
            ``generated_tokens``, which count the final attempt. ``()`` when no model ran (or the result was
            recorded before turns were).
    """

    winner: Verdict
    status: Status
    reason: str = ""
    dimensions: tuple[str, ...] = ()
    unknown_dimensions: tuple[str, ...] = ()
    analysis_a: str = ""
    analysis_b: str = ""
    turn1_text: str = ""
    turn2_text: str = ""
    prompt_tokens: int = 0
    generated_tokens: int = 0
    p_a: float = math.nan
    p_a_raw: float = math.nan
    logit_1: float = math.nan
    logit_2: float = math.nan
    provenance: Provenance | None = None
    id: str = ""
    label: Verdict = Verdict.NONE
    attempts: int = 1
    sub_judgments: tuple[PairwiseJudgment, ...] = ()
    consistent: bool | None = None
    samples: int = 1
    agreement: float = math.nan
    cascade: CascadeDecision | None = None
    turns: tuple[TurnTokens, ...] = ()

    def __post_init__(self) -> None:
        if self.status is Status.OK and self.winner is Verdict.NONE:
            raise ConfigError("an ok judgment needs a winner (A, B or tie)")
        if self.status is not Status.OK and self.winner is not Verdict.NONE:
            raise ConfigError(f"a {self.status.value} judgment cannot carry winner {self.winner.value}")
        if self.status is not Status.OK and not self.reason:
            raise ConfigError(f"a {self.status.value} judgment needs a reason")

    def __repr__(self) -> str:
        """Short: winner, status, P(A ≻ B) and dimensions (plus id, consistency and reason when set); the texts,
        logits and provenance stay in the fields and ``to_dict()``."""
        parts = [f"winner={self.winner.value}", f"status={self.status.value}",
                 f"p_a={'nan' if math.isnan(self.p_a) else format(self.p_a, '.3f')}"]
        if self.dimensions:
            parts.append(f"dimensions={list(self.dimensions)}")
        if self.consistent is not None:
            parts.append(f"consistent={self.consistent}")
        if self.id:
            parts.append(f"id={self.id!r}")
        if self.reason:
            parts.append(f"reason={_short(self.reason)!r}")
        return f"PairwiseJudgment({', '.join(parts)})"

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def swapped(self) -> bool:
        """Whether both presentation orders were judged (swap): the sub-judgments hold 2 x ``samples``."""
        return len(self.sub_judgments) == 2 * self.samples

    def ordered_judgments(self) -> tuple[tuple[PairwiseJudgment, Verdict], ...]:
        """Each model-run (ordered) judgment behind this result, in the (A, B) frame, with the response it showed
        first: itself (``A``) when unswapped and unvoted, else its sub-judgments (the reversed ones showed B)."""
        if not self.sub_judgments:
            return ((self, Verdict.A),)
        return tuple((j, Verdict.A if pos < self.samples else Verdict.B) for pos, j in enumerate(self.sub_judgments))

    @property
    def correct(self) -> bool | None:
        """Whether the verdict matches the label; None when there is no label or no verdict."""
        if self.label is Verdict.NONE or not self.ok:
            return None
        return self.winner is self.label

    def to_dict(self) -> JSONDict:
        """A JSON-ready dict (NaN probabilities become ``null``; the status says why)."""
        out: JSONDict = {key: json_field(getattr(self, key)) for key in JUDGMENT_KEYS}
        if self.samples > 1:  # voting keys only where there was a vote (unvoted output stays as it was)
            out["samples"] = self.samples
            out["agreement"] = json_field(self.agreement)
        if self.sub_judgments:
            out["sub_judgments"] = json_field(self.sub_judgments)
        if self.cascade is not None:  # only a cascade's results carry it
            out["cascade"] = self.cascade.to_dict()
        return out


def check_same_length(**lists: Sequence[object]) -> int:
    """Return the common length of the named batch inputs, each string in them checked as valid text.

    Raises:
        ConfigError: naming every sequence and its length when they differ, or naming the item (``responses_b[3]``)
            that is not valid Unicode text (:func:`~brrm.types.config.check_text`) — before any model call, so
            no other item of the batch is lost to it.
    """
    lengths = {name: len(seq) for name, seq in lists.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ConfigError(f"batch inputs must have the same length, got {detail}")
    for name, seq in lists.items():
        if not isinstance(seq, str):
            for i, item in enumerate(seq):
                if isinstance(item, str):
                    check_text(f"{name}[{i}]", item)
    return next(iter(lengths.values()), 0)


@dataclass(frozen=True)
class ScalarReward:
    """The reward of one response (to one conversation, optionally under one principle).

    Attributes:
        reward: finite float when ``status`` is ok; NaN otherwise (never a sentinel such as -1 or 0).
            Bradley–Terry heads give an unbounded score (logit scale; compare only within one prompt);
            principle judges give logit(Yes) − logit(No); pairwise → scalar adapters give values in [0, 1].
        status: ``ok``, ``truncated``, ``backend_error``, ``invalid_input`` or ``empty``.
        reason: required when not ok; on an ok result an optional note (e.g. a thinking budget was hit).
        id: the record id, if any.
        principle: the principle judged against ("" for models without one).
        truncated: prompt-side tokens were dropped to fit the model's max length (the response and its
            end-of-turn tokens are always kept whole; an ok result may be truncated).
        truncated_tokens: how many prompt tokens were dropped, >= 0.
        input_tokens: tokens the model read; 0 when the model did not run for this item.
        thinking_stripped: a leading ``<think>…</think>`` block was removed from the response first.
        logits: the raw float32 logits the reward was computed from (principle judges: (yes, no)).
        text: generated text (principle judges that think first); "" for forward-pass models.
        card_reward: the number the model card's own code would return for this generation when brrm's result
            is not ok (GenRM-Principle ``card`` decoding: a last token other than Yes/No still gets the card's
            clamped formula at that step); NaN otherwise, and never part of an average.
        provenance: what produced it. Forward-pass models record ``decoding="score"`` and greedy sampling
            (no token is sampled).
        cascade: a judge cascade's P(response ≻ reference): which stage's judgment it is and why
            (:class:`~brrm.types.cascade.CascadeDecision`); None outside a cascade.

    Raises:
        ConfigError: when an ok reward is not finite, a non-ok one is not NaN, or a non-ok one has no reason.
    """

    reward: float
    status: Status
    reason: str = ""
    id: str = ""
    principle: str = ""
    truncated: bool = False
    truncated_tokens: int = 0
    input_tokens: int = 0
    thinking_stripped: bool = False
    logits: tuple[float, ...] = ()
    text: str = ""
    provenance: Provenance | None = None
    card_reward: float = math.nan
    cascade: CascadeDecision | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            raise ConfigError(f"status must be a Status, got {self.status!r}")
        object.__setattr__(self, "reward", float(self.reward))
        object.__setattr__(self, "card_reward", float(self.card_reward))
        if self.status is Status.OK and not math.isfinite(self.reward):
            raise ConfigError(f"an ok reward must be finite, got {self.reward!r}")
        if self.status is not Status.OK:
            if not math.isnan(self.reward):
                raise ConfigError(f"a {self.status.value} reward must be NaN, got {self.reward!r}")
            if not self.reason:
                raise ConfigError(f"a {self.status.value} reward needs a reason")

    @classmethod
    def failed(cls, status: Status, reason: str, **fields: Any) -> ScalarReward:
        """A reward without a value (NaN) and the status and reason saying why."""
        return cls(math.nan, status, reason, **fields)

    def __repr__(self) -> str:
        """Short: reward, status (plus id, principle and reason when set); the rest stays in the fields."""
        parts = [f"reward={'nan' if math.isnan(self.reward) else format(self.reward, '.4g')}",
                 f"status={self.status.value}"]
        parts += [f"{name}={_short(value)!r}" for name, value in
                  (("id", self.id), ("principle", self.principle), ("reason", self.reason)) if value]
        return f"ScalarReward({', '.join(parts)})"

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> JSONDict:
        """A JSON-ready dict; a missing reward is ``null`` and the status says why."""
        return {
            **{key: json_field(getattr(self, key)) for key in REWARD_KEYS},
            **({"card_reward": self.card_reward} if math.isfinite(self.card_reward) else {}),
            **({"cascade": self.cascade.to_dict()} if self.cascade is not None else {}),
        }


@dataclass(frozen=True)
class GroupResult:
    """A group of responses to one conversation, ranked by one strategy.

    Attributes:
        strategy: how it was ranked (``scores``, ``round_robin``, ``circular``, ``reference``, ``knockout``).
        rewards: one reward per response, in input order; failed ones keep their status and reason.
        reward_range: the closed range rewards lie in (``(-inf, inf)`` for raw model scores, ``(0, 1)`` for
            win rates, reference probabilities and knockout progress).
        wins: ``wins[i][j]`` = ok judgments in which response i beat response j.
        ties: ``ties[i][j]`` = ok judgments of i and j that were ties (symmetric).
        n_judgments: pairwise judgments used (run by a pairwise model, or derived from scalar rewards).
        n_scored: scalar rewards the model computed (0 for pairwise models).
        failed: judgments without a verdict; they never enter rewards, wins or ties.
        ranking: indices of responses with an ok reward, best first (equal rewards keep input order).
        judgments: the pairwise judgments behind ``wins``/``ties``, in the order they were made.
        pairs: ``pairs[k] = (i, j)``: judgment ``k`` showed response ``i`` as A and ``j`` as B (index N is the
            reference of the ``reference`` strategy).
    """

    strategy: str
    rewards: tuple[ScalarReward, ...]
    reward_range: tuple[float, float]
    wins: tuple[tuple[int, ...], ...]
    ties: tuple[tuple[int, ...], ...]
    n_judgments: int
    n_scored: int
    failed: int
    ranking: tuple[int, ...]
    judgments: tuple[PairwiseJudgment, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()

    @property
    def status(self) -> Status:
        """``ok`` when at least one response got a reward, else the first response's status."""
        if self.ranking or not self.rewards:
            return Status.OK
        return self.rewards[0].status

    @property
    def best(self) -> int:
        """Index of the best response.

        Raises:
            ConfigError: when no response has an ok reward (see each reward's status).
        """
        if not self.ranking:
            raise ConfigError("no response in the group has an ok reward; see rewards[i].status")
        return self.ranking[0]

    def win_rates(self) -> tuple[float, ...]:
        """Adjusted win rate (win + 0.5·tie) / games of each response (from wins/ties); NaN without games."""
        out = []
        for i in range(len(self.wins)):
            won = sum(self.wins[i])
            lost = sum(row[i] for row in self.wins)
            tied = sum(self.ties[i])
            games = won + lost + tied
            out.append((won + 0.5 * tied) / games if games else math.nan)
        return tuple(out)

    def expected_win_rates(self) -> tuple[float, ...]:
        """Soft win rate of each response: the mean over its ok judgments of P(it beats the other), from each
        judgment's P(A ≻ B) (a verdict stands in as 1 / 0.5 / 0 where P was not measured); NaN without games."""
        total = [0.0] * len(self.rewards)
        games = [0] * len(self.rewards)
        for (i, j), jd in zip(self.pairs, self.judgments, strict=True):
            if not jd.ok:
                continue
            p = jd.p_a if math.isfinite(jd.p_a) else {Verdict.A: 1.0, Verdict.TIE: 0.5, Verdict.B: 0.0}[jd.winner]
            for k, value in ((i, p), (j, 1.0 - p)):
                if k < len(total):
                    total[k] += value
                    games[k] += 1
        return tuple(t / g if g else math.nan for t, g in zip(total, games, strict=True))

    def to_dict(self) -> JSONDict:
        out: JSONDict = {key: json_field(getattr(self, key)) for key in GROUP_KEYS}
        out["reward_range"] = [x if math.isfinite(x) else None for x in self.reward_range]  # null: unbounded
        return out


PROVENANCE_KEYS = ("model", "fingerprint", "backend", "template_hash", "sampling", "seed", "decoding", "policies",
                   "calibration", "logprob_semantics", "seeded")
JUDGMENT_KEYS = ("id", "winner", "status", "reason", "p_a", "p_a_raw", "logit_1", "logit_2", "consistent",
                 "dimensions", "unknown_dimensions", "analysis_a", "analysis_b", "label", "correct", "prompt_tokens",
                 "generated_tokens", "turns", "attempts", "turn1_text", "turn2_text", "provenance")
REWARD_KEYS = ("id", "reward", "status", "reason", "principle", "truncated", "truncated_tokens", "input_tokens",
               "thinking_stripped", "logits", "text", "provenance")
GROUP_KEYS = ("strategy", "status", "rewards", "reward_range", "wins", "ties", "n_judgments", "n_scored", "failed",
              "ranking", "pairs", "judgments")
"""The keys (attributes) each result's ``to_dict()`` writes first, in their record order; the records' byte layout."""


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut), for reprs."""
    return text if len(text) <= limit else text[:limit - 1] + "…"
