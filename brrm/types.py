"""Typed values that flow through brrm: conversations in, judgments and rewards out.

Every result is a frozen dataclass with an explicit :class:`Status` and a ``reason``. A result that did
not produce a verdict carries ``Verdict.NONE`` and a non-``ok`` status; nothing is encoded as ``None``,
``-1`` or a silent default, and aggregates skip non-``ok`` results by status (see
:func:`brrm.types.summarize`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from brrm.errors import ConfigError

ROLES = ("system", "user", "assistant", "tool")
"""Valid message roles. ``tool`` holds a tool's observation; it is never judged as the assistant's text."""


@dataclass(frozen=True)
class Message:
    """One chat message.

    Attributes:
        role: one of ``system``, ``user``, ``assistant``, ``tool``.
        content: the message text (may be empty only for an assistant turn that carries tool calls).
        tool_calls: tool calls made by an assistant turn, as ``{"name": str, "arguments": dict | str}``.

    Raises:
        ConfigError: on an unknown role, a non-string content, or tool calls on a non-assistant turn.
    """

    role: str
    content: str
    tool_calls: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"message role {self.role!r} is not valid; expected one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise ConfigError(
                f"message content must be a string, got {type(self.content).__name__} (role {self.role!r})"
            )
        if self.tool_calls and self.role != "assistant":
            raise ConfigError(f"tool_calls are only valid on assistant messages, not role {self.role!r}")

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "message") -> Message:
        """Build a message from ``{"role": ..., "content": ..., "tool_calls"?: [...]}``.

        Raises:
            ConfigError: naming ``where`` and the missing or invalid field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be an object with 'role' and 'content', got {type(data).__name__}")
        for key in ("role", "content"):
            if key not in data:
                raise ConfigError(f"{where} is missing field {key!r}")
        content = data["content"]
        if content is None and data.get("tool_calls"):
            content = ""
        calls = data.get("tool_calls") or ()
        if not isinstance(calls, list | tuple):
            raise ConfigError(f"{where}.tool_calls must be a list")
        try:
            return cls(role=data["role"], content=content, tool_calls=tuple(calls))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        return out


@dataclass(frozen=True)
class Conversation:
    """The turns before the judged response(s); the last turn must be a user (or tool) turn.

    Attributes:
        messages: the turns, oldest first; at least one user turn.

    Raises:
        ConfigError: when empty, when there is no user turn, or when it ends with an assistant turn
            (the response under judgment is passed separately, never as the last message).
    """

    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        if not self.messages:
            raise ConfigError("conversation is empty; it needs at least one user message")
        if not any(m.role == "user" for m in self.messages):
            raise ConfigError("conversation has no user message")
        if self.messages[-1].role not in ("user", "tool"):
            raise ConfigError(
                f"conversation must end with a user or tool turn (the judged responses are passed "
                f"separately), but it ends with role {self.messages[-1].role!r}"
            )

    @classmethod
    def from_prompt(cls, prompt: str) -> Conversation:
        """A single-turn conversation from a user prompt string."""
        return cls((Message("user", prompt),))

    @classmethod
    def coerce(cls, value: Any, *, where: str = "conversation") -> Conversation:
        """Accept a Conversation, a prompt string, or a list of message dicts / Messages.

        Raises:
            ConfigError: naming ``where`` and the problem.
        """
        if isinstance(value, Conversation):
            return value
        if isinstance(value, str):
            return cls.from_prompt(value)
        if isinstance(value, list | tuple):
            msgs = tuple(
                m if isinstance(m, Message) else Message.from_dict(m, where=f"{where}[{i}]")
                for i, m in enumerate(value)
            )
            try:
                return cls(msgs)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        raise ConfigError(
            f"{where} must be a prompt string or a list of messages, got {type(value).__name__}"
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.messages]


class Verdict(enum.StrEnum):
    """Which response won. ``NONE`` means no verdict was produced; the result's status says why."""

    A = "A"
    B = "B"
    TIE = "tie"
    NONE = "none"

    def mirrored(self) -> Verdict:
        """The verdict seen from the swapped order (A <-> B); TIE and NONE map to themselves."""
        return {Verdict.A: Verdict.B, Verdict.B: Verdict.A}.get(self, self)


class Status(enum.StrEnum):
    """Outcome of one judgment or reward.

    ``ok``: a verdict / reward was produced. ``parse_failure``: the output ended but held no valid verdict.
    ``truncated``: a token budget or context limit was hit before the verdict. ``backend_error``: the
    model backend failed (exception, NaN logits, HTTP error). ``invalid_input``: the record itself is
    malformed (reported with its reason; the rest of the batch goes on). ``empty``: an empty response.
    """

    OK = "ok"
    PARSE_FAILURE = "parse_failure"
    TRUNCATED = "truncated"
    BACKEND_ERROR = "backend_error"
    INVALID_INPUT = "invalid_input"
    EMPTY = "empty"


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings for a generative judge.

    Defaults are the published BR-RM settings (BR-RM paper / model card, and
    ``../shared/reference/README.md``): temperature 1.0, top_p 1.0, at most 8192 new tokens per turn and
    16384 tokens in total.

    Attributes:
        temperature: softmax temperature, >= 0; 0 means greedy decoding.
        top_p: nucleus mass in (0, 1].
        max_new_tokens_per_turn: new-token budget of each turn, >= 1.
        max_total_tokens: limit on the whole two-turn sequence (prompt + both turns), in tokens, >= 2.
        seed: base seed; item ``i`` of a batch call samples with its own generator seeded ``seed + i``, so
            results do not depend on batch size or composition.

    Raises:
        ConfigError: naming the field and its valid range.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens_per_turn: int = 8192
    max_total_tokens: int = 16384
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, int | float) and self.temperature >= 0):
            raise ConfigError(f"temperature must be a number >= 0 (0 = greedy), got {self.temperature!r}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not (isinstance(self.max_new_tokens_per_turn, int) and self.max_new_tokens_per_turn >= 1):
            raise ConfigError(f"max_new_tokens_per_turn must be an int >= 1, got {self.max_new_tokens_per_turn!r}")
        if not (isinstance(self.max_total_tokens, int) and self.max_total_tokens >= 2):
            raise ConfigError(f"max_total_tokens must be an int >= 2, got {self.max_total_tokens!r}")
        if not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an int, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens_per_turn": self.max_new_tokens_per_turn,
            "max_total_tokens": self.max_total_tokens,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class Provenance:
    """What produced a result: enough to reproduce or audit it.

    Attributes:
        model: model id or local path.
        backend: backend name (``transformers``, ``vllm``, ``openai``, ``fake``).
        template_hash: sha256 (hex, first 16 chars) over the prompt templates used.
        sampling: the decoding settings.
        seed: the seed this item sampled with (``sampling.seed + item index``).
        decoding: ``faithful`` or ``constrained``.
        policies: input-normalisation policies applied (e.g. history reasoning stripped), name -> value.
    """

    model: str
    backend: str
    template_hash: str
    sampling: SamplingConfig
    seed: int
    decoding: str = "faithful"
    policies: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "backend": self.backend,
            "template_hash": self.template_hash,
            "sampling": self.sampling.to_dict(),
            "seed": self.seed,
            "decoding": self.decoding,
            "policies": dict(self.policies),
        }


@dataclass(frozen=True)
class ResponseAnalysis:
    """Turn-1 analysis of one response: its critical issues (free text, as the judge wrote them)."""

    critical_issues: str


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
        p_a: P(A better than B) in [0, 1] from the verdict-digit logits, or NaN when not measured
            (faithful mode); a conditional probability of the model, not a calibrated one.
        provenance: what produced it.
        id: the record id, if any.
        label: the gold label (``A``/``B``/``tie``) if the record had one, else ``Verdict.NONE``.
        attempts: generations run for this judgment (>= 1 when the model ran, 0 when short-circuited).
        sub_judgments: for swap-order debiasing, the (A,B) and (B,A) judgments.
        consistent: for swap-order debiasing, whether both orders agreed; True otherwise.
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
    logit_1: float = math.nan
    logit_2: float = math.nan
    provenance: Provenance | None = None
    id: str = ""
    label: Verdict = Verdict.NONE
    attempts: int = 1
    sub_judgments: tuple[PairwiseJudgment, ...] = ()
    consistent: bool = True

    def __post_init__(self) -> None:
        if self.status is Status.OK and self.winner is Verdict.NONE:
            raise ConfigError("an ok judgment needs a winner (A, B or tie)")
        if self.status is not Status.OK and self.winner is not Verdict.NONE:
            raise ConfigError(f"a {self.status.value} judgment cannot carry winner {self.winner.value}")
        if self.status is not Status.OK and not self.reason:
            raise ConfigError(f"a {self.status.value} judgment needs a reason")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def correct(self) -> bool | None:
        """Whether the verdict matches the label; None when there is no label or no verdict."""
        if self.label is Verdict.NONE or not self.ok:
            return None
        return self.winner is self.label

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN probabilities become ``null``; the status says why)."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else x

        out: dict[str, Any] = {
            "id": self.id,
            "winner": self.winner.value,
            "status": self.status.value,
            "reason": self.reason,
            "p_a": num(self.p_a),
            "logit_1": num(self.logit_1),
            "logit_2": num(self.logit_2),
            "consistent": self.consistent,
            "dimensions": list(self.dimensions),
            "unknown_dimensions": list(self.unknown_dimensions),
            "analysis_a": self.analysis_a,
            "analysis_b": self.analysis_b,
            "label": self.label.value,
            "correct": self.correct,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "attempts": self.attempts,
            "turn1_text": self.turn1_text,
            "turn2_text": self.turn2_text,
            "provenance": self.provenance.to_dict() if self.provenance else None,
        }
        if self.sub_judgments:
            out["sub_judgments"] = [j.to_dict() for j in self.sub_judgments]
        return out


def parse_label(value: Any, *, where: str = "label") -> Verdict:
    """Map a label (``"A"``, ``"B"``, ``"tie"``, or ``1`` / ``2`` as in LLMBar) to a Verdict.

    Raises:
        ConfigError: naming the field and the valid options.
    """
    table = {"a": Verdict.A, "b": Verdict.B, "tie": Verdict.TIE, "1": Verdict.A, "2": Verdict.B}
    key = str(value).strip().lower()
    if isinstance(value, bool) or key not in table:
        raise ConfigError(f"{where} {value!r} is not valid; expected one of 'A', 'B', 'tie' (or 1, 2)")
    return table[key]


@dataclass(frozen=True)
class JudgmentSummary:
    """Counts over a batch of judgments. Only ``ok`` results with a label enter ``accuracy``."""

    total: int
    by_status: Mapping[str, int]
    by_winner: Mapping[str, int]
    labelled: int
    correct: int
    swapped: int
    consistent: int
    order_credit: float = 0.0
    order_labelled: int = 0

    @property
    def order_averaged_accuracy(self) -> float:
        """Swap-debiased pairs scored per order, as LLMBar's ``correct_average``: each labelled pair earns
        (forward correct + reversed correct) / 2, a failed order earning 0; NaN when there are none."""
        return self.order_credit / self.order_labelled if self.order_labelled else math.nan

    @property
    def accuracy(self) -> float:
        """Correct / labelled-and-ok; NaN when nothing was labelled and ok."""
        return self.correct / self.labelled if self.labelled else math.nan

    @property
    def consistency_rate(self) -> float:
        """Fraction of swap-debiased ok judgments whose two orders agreed; NaN when none."""
        return self.consistent / self.swapped if self.swapped else math.nan

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "total": self.total,
            "by_status": dict(self.by_status),
            "by_winner": dict(self.by_winner),
            "labelled_ok": self.labelled,
            "correct": self.correct,
            "accuracy": num(self.accuracy),
            "swapped_ok": self.swapped,
            "consistency_rate": num(self.consistency_rate),
            "order_averaged_accuracy": num(self.order_averaged_accuracy),
        }


def summarize(judgments: Iterable[PairwiseJudgment]) -> JudgmentSummary:
    """Aggregate judgments by status and winner; non-ok results never count as verdicts."""
    by_status = {s.value: 0 for s in Status}
    by_winner = {v.value: 0 for v in (Verdict.A, Verdict.B, Verdict.TIE)}
    total = labelled = correct = swapped = consistent = order_labelled = 0
    order_credit = 0.0
    for j in judgments:
        total += 1
        by_status[j.status.value] += 1
        if len(j.sub_judgments) == 2 and j.label is not Verdict.NONE:
            order_labelled += 1
            order_credit += sum(s.ok and s.winner is j.label for s in j.sub_judgments) / 2
        if not j.ok:
            continue
        by_winner[j.winner.value] += 1
        if j.correct is not None:
            labelled += 1
            correct += int(j.correct)
        if j.sub_judgments:
            swapped += 1
            consistent += int(j.consistent)
    return JudgmentSummary(total, by_status, by_winner, labelled, correct, swapped, consistent, order_credit,
                           order_labelled)


def check_same_length(**lists: Sequence[Any]) -> int:
    """Return the common length of the named sequences.

    Raises:
        ConfigError: naming every sequence and its length when they differ.
    """
    lengths = {name: len(seq) for name, seq in lists.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ConfigError(f"batch inputs must have the same length, got {detail}")
    return next(iter(lengths.values()), 0)


def _num(x: float) -> float | None:
    """JSON-ready float: NaN becomes ``None`` (the accompanying status says why)."""
    return None if math.isnan(x) else x


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
        provenance: what produced it. Forward-pass models record ``decoding="score"`` and greedy sampling
            (no token is sampled).

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

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            raise ConfigError(f"status must be a Status, got {self.status!r}")
        object.__setattr__(self, "reward", float(self.reward))
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

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; a missing reward is ``null`` and the status says why."""
        return {
            "id": self.id,
            "reward": _num(self.reward),
            "status": self.status.value,
            "reason": self.reason,
            "principle": self.principle,
            "truncated": self.truncated,
            "truncated_tokens": self.truncated_tokens,
            "input_tokens": self.input_tokens,
            "thinking_stripped": self.thinking_stripped,
            "logits": list(self.logits),
            "text": self.text,
            "provenance": self.provenance.to_dict() if self.provenance else None,
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "status": self.status.value,
            "rewards": [r.to_dict() for r in self.rewards],
            "reward_range": [x if math.isfinite(x) else None for x in self.reward_range],  # null: unbounded
            "wins": [list(r) for r in self.wins],
            "ties": [list(r) for r in self.ties],
            "n_judgments": self.n_judgments,
            "n_scored": self.n_scored,
            "failed": self.failed,
            "ranking": list(self.ranking),
            "judgments": [j.to_dict() for j in self.judgments],
        }


@runtime_checkable
class ScalarRewardModel(Protocol):
    """A model that gives each (conversation, response) a scalar reward (Bradley–Terry, principle judges)."""

    def score(self, conversations: Sequence[Any], responses: Sequence[str], /, *,
              principle: str | Sequence[str] | None = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        """One reward per (conversation, response), in input order."""
        ...


@runtime_checkable
class PairwiseJudge(Protocol):
    """A model that judges response A against response B (BR-RM, or a scalar model through an adapter)."""

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str],
                    responses_b: Sequence[str], /, *, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None,
                    swap: bool | None = None) -> list[PairwiseJudgment]:
        """One judgment per pair, in input order."""
        ...
