"""The one reward interface every model kind implements (:class:`RewardJudge`), and what sits beneath it.

``brrm.load(...)`` returns a :class:`RewardJudge` for a BR-RM judge, a Bradley–Terry reward model or a
principle reward model alike; the server, the RLHF adapters, audits and benchmarks call only this.
Beneath it, a model implements what it natively can — :class:`OrderedPairJudge` (BR-RM: one judgment per
presentation order) or :class:`ScalarRewardModel` (Bradley–Terry, principle models) — and
:mod:`brrm.compose` supplies the rest (swap-order debiasing, pairwise ↔ scalar, group strategies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from brrm.types.results import GroupResult, PairwiseJudgment, ScalarReward, Verdict

KINDS = ("brrm", "bt", "principle")
"""Model kinds: ``brrm`` (two-turn BR-RM pairwise judge), ``bt`` (Bradley–Terry scalar reward model),
``principle`` (RLBFF principle-following reward model)."""

Principles = str | Sequence[str] | None
"""One principle for every item, one per item, or None (the judge's default principle, if any)."""


@dataclass(frozen=True)
class JudgeInfo:
    """What a judge is: recorded by servers, audits and benchmarks next to its results.

    Attributes:
        model: the model's name (hub id, the served name, or the embedded model's hub id; never a cache path).
        kind: one of :data:`KINDS`.
        recipe: how inputs become model calls, e.g. ``brrm``, ``sequence_classification``,
            ``qwen3_nemotron``, ``llama_nemotron``, ``qwen3_genrm``, ``llama_reward``.
        backend: ``transformers``, ``vllm``, ``openai`` or ``fake``.
        chat_template_hash: sha256 (first 16 hex) of the model's chat template.
        template_hash: sha256 (first 16 hex) over everything that shapes the prompt (brrm's templates, the
            chat template, recipe constants).
        default_strategy: what ``rank(strategy="auto")`` resolves to (``scores`` for scalar models,
            ``round_robin`` for pairwise judges).
        options: the judge's resolved settings (decoding, swap, budgets, principle, …), JSON-ready.
        chunk_size: items per call the backend prefers (its decoding batch, or thousands for engines and
            servers); callers that stream results (the CLI) hand over this many at a time, >= 1.
        concurrent: calls may run from several threads at once and share the engine's running batch (vLLM,
            OpenAI-compatible servers); the HTTP server then runs several judge calls at a time.
    """

    model: str
    kind: str
    recipe: str
    backend: str
    chat_template_hash: str
    template_hash: str
    default_strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    chunk_size: int = 64
    concurrent: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kind": self.kind,
            "recipe": self.recipe,
            "backend": self.backend,
            "chat_template_hash": self.chat_template_hash,
            "template_hash": self.template_hash,
            "default_strategy": self.default_strategy,
            "options": dict(self.options),
            "chunk_size": self.chunk_size,
            "concurrent": self.concurrent,
        }


@runtime_checkable
class RewardJudge(Protocol):
    """The one reward interface: pairwise judgments, scalar rewards and group rankings from any model kind.

    Every implementation has these signatures and defaults. Batch calls take data positionally (N items,
    lengths checked) and options by keyword, and return one result per item in input order; a failed item
    is that item's status, never an exception or a number. Conversations are :class:`~brrm.types.Conversation`
    objects, prompt strings, or lists of ``{"role", "content"}`` messages ending with a user (or tool) turn.

    Methods:
        judge_pairs(conversations, responses_a, responses_b, /, *, swap=None, ids=None, labels=None,
            principles=None) -> list[PairwiseJudgment]: ``swap=None`` uses the judge's own setting; with
            swap both presentation orders are judged and disagreement is a tie (``consistent=False``).
        score(conversations, responses, /, *, principles=None, references=None, ids=None)
            -> list[ScalarReward]: the model's reward (scalar models), or P(response ≻ reference) in [0, 1]
            (pairwise judges, which need ``references``).
        rank(conversation, responses, /, *, strategy="auto", reference=None, swap=None, principles=None)
            -> GroupResult: per-response rewards, ranking and win matrix of one group.
        rank_groups(conversations, groups, /, *, strategy="auto", references=None, swap=None,
            principles=None) -> list[GroupResult]: many groups, their model calls batched together.
        judge(conversation, response_a, response_b, /, *, swap=None) -> PairwiseJudgment and
        score_one(conversation, response, /, *, principle=None, reference=None) -> ScalarReward: single
            items.
        close(): free the model (engines, threads); also on leaving a ``with`` block.

    Raises (every method):
        ConfigError: on mismatched lengths, an invalid conversation, a response that is not a string, or an
            option the judge cannot honour (e.g. ``references`` missing for a pairwise judge's ``score``),
            before any model call.
    """

    info: JudgeInfo

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None,
                    principles: Principles = None) -> list[PairwiseJudgment]: ...

    def score(self, conversations: Sequence[Any], responses: Sequence[str], /, *, principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> list[ScalarReward]: ...

    def rank(self, conversation: Any, responses: Sequence[str], /, *, strategy: str = "auto",
             reference: str | None = None, swap: bool | None = None,
             principles: Principles = None) -> GroupResult: ...

    def rank_groups(self, conversations: Sequence[Any], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None) -> list[GroupResult]: ...

    def judge(self, conversation: Any, response_a: str, response_b: str, /, *,
              swap: bool | None = None) -> PairwiseJudgment: ...

    def score_one(self, conversation: Any, response: str, /, *, principle: str | None = None,
                  reference: str | None = None) -> ScalarReward: ...

    def close(self) -> None: ...

    def __enter__(self) -> RewardJudge: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class ScalarRewardModel(Protocol):
    """A model that gives each (conversation, response) a scalar reward (Bradley–Terry, principle models)."""

    info: JudgeInfo

    def score(self, conversations: Sequence[Any], responses: Sequence[str], /, *, principles: Principles = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        """One reward per (conversation, response), in input order."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class OrderedPairJudge(Protocol):
    """A model that judges one presentation order of a pair (BR-RM): response A is shown first.

    Swap-order debiasing is not its job: :mod:`brrm.compose` asks for both orders in one call and combines.
    """

    info: JudgeInfo

    def judge_ordered(self, conversations: Sequence[Any], first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None) -> list[PairwiseJudgment]:
        """One judgment per ordered pair, with the winner in the caller's frame (A = ``first``)."""
        ...

    def close(self) -> None: ...
