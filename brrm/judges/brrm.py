"""The two-turn Branch-and-Rethink (BR-RM) pairwise judge: one judgment per presentation order.

Protocol (released evaluation, ``../shared/reference/README.md``; BR-RM paper, NVIDIA 2025):

* P1 = chat template over one user message (the turn-1 text), generation prompt on, thinking left on;
* T1 = generation from P1, stopped by the end-of-turn token;
* P2 = P1 + T1 + ``"\\n"`` + the chat template's continuation (``<|im_end|>\\n`` + a user turn with the
  turn-2 text + the generation prompt). Raw concatenation keeps turn-1 thinking in P2 (re-rendering the
  messages through the Qwen3 template would drop it). The continuation is taken from the tokenizer's
  own template, so the protocol is template-driven (it renders Qwen's bytes exactly on Qwen3);
* T2 = generation from P2; the verdict is read from T2 only.

Record text reaches the model through :mod:`brrm.tokens` (as text, never as control tokens). Each ordered
judgment samples from streams seeded by the base seed and the item's stable key (:mod:`brrm.seeds`).
Swap-order debiasing is :mod:`brrm.compose`'s job: it asks this judge for both orders in one call.

Decoding modes: ``faithful`` is the released protocol end to end — free generation, the released input
policies (no system or tool lines, history kept as is, no marker escaping, responses as given) and the first
regex match in T2; a malformed output is a ``parse_failure`` with the raw text kept. ``constrained``
(default): after the thinking block the turn structure is enforced with outlines-core so the verdict always
parses, P(response 1 better) is read from the verdict-digit logits, and brrm's safer input policies apply
(system and tool lines kept, history reasoning stripped, markers neutralised, the last ranking block after
thinking). Every policy can be set on its own; results record them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from brrm.backends.base import Backend, Completion, GenerationRequest
from brrm.errors import ConfigError, TemplateError
from brrm.judges import brrm_format as fmt
from brrm.numerics import sigmoid
from brrm.seeds import content_key, item_seed
from brrm.templates import (
    ContextPolicy,
    is_blank,
    neutralize_markers,
    render_brrm_turn1,
    render_brrm_turn2,
    strip_reasoning,
    template_hash,
    text_hash,
)
from brrm.tokens import encoder
from brrm.types import (
    Conversation,
    JudgeInfo,
    PairwiseJudgment,
    Provenance,
    SamplingConfig,
    Status,
    Verdict,
    check_bool,
    check_choice,
    check_int,
    check_same_length,
    override_config,
)
from brrm.types.conversation import ConversationLike

DECODING_MODES = ("constrained", "faithful")
THINKING_MODES = ("auto", "on", "off")
TURN2_TOKENS = ("auto", "retokenize", "concat")
_MARK = "\x00BRRM-TURN1\x00"

POLICY_DEFAULTS = {
    "constrained": {"system_messages": "include", "tool_messages": "include", "strip_history_reasoning": True,
                    "neutralize_markers": True, "strip_response_reasoning": True,
                    "verdict": "last_after_thinking"},
    "faithful": {"system_messages": "drop", "tool_messages": "drop", "strip_history_reasoning": False,
                 "neutralize_markers": False, "strip_response_reasoning": False, "verdict": "first"},
}
"""Input policies and verdict selection of each decoding mode when not set explicitly (``faithful``: what the
released evaluation does; ``constrained``: brrm's safer defaults)."""


@dataclass(frozen=True)
class BRRMConfig:
    """Settings of the BR-RM judge.

    Attributes:
        decoding: ``constrained`` (default) or ``faithful`` (the released protocol end to end).
        sampling: decoding settings; defaults are the published ones (T=1.0, top_p=1.0, 8192 new tokens
            per turn, 16384 in total).
        thinking: ``auto`` (on when the tokenizer has single ``<think>``/``</think>`` tokens and the chat
            template uses them), ``on`` or ``off``. Only affects the constrained program.
        block_token_cap: token cap of each free-text block in constrained mode, int >= 8.
        system_messages: ``include`` (``System: …`` lines) or ``drop``; None: the decoding mode's default.
        tool_messages: ``include`` (``Tool: …`` lines, tool calls) or ``drop``; None: the mode's default.
        strip_history_reasoning: drop ``<think>`` blocks of earlier assistant turns; None: the mode's default.
        neutralize_markers: rewrite BR-RM markers in responses and context turns; None: the mode's default.
        strip_response_reasoning: drop a leading ``<think>`` block of each response; None: the mode's default.
        verdict: ``last_after_thinking`` or ``first`` (see :data:`~brrm.judges.brrm_format.VERDICT_SELECTIONS`);
            None: the mode's default.
        swap: judge both presentation orders by default (used by :mod:`brrm.compose`).
        max_retries: re-run an ordered judgment that ended ``parse_failure``, ``truncated`` (turn budget) or
            ``backend_error`` up to this many times, each from fresh sampler streams, int >= 0. Default 0.
        turn2_tokens: how P2's ids are formed: ``retokenize`` (the released evaluation: P1 + T1 +
            continuation tokenized as one text after P1's last template token), ``concat`` (P1's and T1's ids
            as generated, then the continuation; turn 2 reuses all of turn 1's KV) or ``auto`` (retokenize in
            faithful mode, concat in constrained mode).

    Raises:
        ConfigError: naming the field and its valid options (bools must be bools, ints ints).
    """

    decoding: str = "constrained"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    thinking: str = "auto"
    block_token_cap: int = 512
    system_messages: str | None = None
    tool_messages: str | None = None
    strip_history_reasoning: bool | None = None
    neutralize_markers: bool | None = None
    strip_response_reasoning: bool | None = None
    verdict: str | None = None
    swap: bool = False
    max_retries: int = 0
    turn2_tokens: str = "auto"

    def __post_init__(self) -> None:
        check_choice("decoding", self.decoding, DECODING_MODES)
        if not isinstance(self.sampling, SamplingConfig):
            raise ConfigError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
        check_choice("thinking", self.thinking, THINKING_MODES)
        check_int("block_token_cap", self.block_token_cap, low=fmt.MIN_BLOCK_CAP)
        check_bool("swap", self.swap)
        check_int("max_retries", self.max_retries, low=0)
        check_choice("turn2_tokens", self.turn2_tokens, TURN2_TOKENS)
        for name in ("system_messages", "tool_messages"):
            if getattr(self, name) is not None:
                check_choice(name, getattr(self, name), ("include", "drop"))
        for name in ("strip_history_reasoning", "neutralize_markers", "strip_response_reasoning"):
            if getattr(self, name) is not None:
                check_bool(name, getattr(self, name))
        if self.verdict is not None:
            check_choice("verdict", self.verdict, fmt.VERDICT_SELECTIONS)

    def policy(self, name: str) -> Any:
        """An input policy's value: as set, else the decoding mode's default (:data:`POLICY_DEFAULTS`)."""
        value = getattr(self, name)
        return POLICY_DEFAULTS[self.decoding][name] if value is None else value

    @property
    def context(self) -> ContextPolicy:
        """How earlier turns are flattened, with every policy resolved."""
        return ContextPolicy(strip_history_reasoning=self.policy("strip_history_reasoning"),
                             system_messages=self.policy("system_messages"),
                             tool_messages=self.policy("tool_messages"),
                             neutralize_markers=self.policy("neutralize_markers"))

    def policies(self) -> dict[str, Any]:
        """Every input policy as applied (recorded in each result's provenance)."""
        return {**self.context.to_dict(), "neutralize_markers": self.policy("neutralize_markers"),
                "strip_response_reasoning": self.policy("strip_response_reasoning"),
                "verdict": self.policy("verdict"), "thinking": self.thinking, "turn2_tokens": self.p2_tokenization}

    @property
    def p2_tokenization(self) -> str:
        """``turn2_tokens`` with ``auto`` resolved for the decoding mode."""
        if self.turn2_tokens != "auto":
            return self.turn2_tokens
        return "retokenize" if self.decoding == "faithful" else "concat"


@dataclass
class _Item:
    """One ordered judgment in flight (position 1 = ``first``)."""

    index: int
    key: str
    conversation: Conversation
    first: str
    second: str
    rid: str
    attempt: int = 0
    p1_text: str = ""
    p1_ids: tuple[int, ...] = ()
    t1: Completion | None = None
    p2_ids: tuple[int, ...] = ()
    t2: Completion | None = None
    result: PairwiseJudgment | None = None
    retryable: bool = True

    def seed(self, base: int, turn: int) -> int:
        return item_seed(base, self.key, stream=f"turn{turn}", attempt=self.attempt)

    def retry(self) -> _Item:
        """Reset for a fresh attempt of the same ordered judgment (new sampler streams)."""
        self.attempt += 1
        self.p1_text, self.p1_ids, self.t1, self.p2_ids, self.t2, self.result = "", (), None, (), None, None
        return self


class BRRMJudge:
    """The BR-RM judge over any :class:`~brrm.backends.base.Backend` that generates.

    Implements :class:`~brrm.types.OrderedPairJudge`; :func:`brrm.load` wraps it in
    :class:`~brrm.compose.PairwiseRewardJudge` (swap, groups, the :class:`~brrm.RewardJudge` interface).

    Args:
        backend: the model runner (transformers, vLLM, OpenAI-compatible, or a scripted fake).
        config: judge settings.

    Raises:
        ConfigError: when the tokenizer has no chat template, or constrained decoding is asked of a backend
            that cannot run constraint programs.
    """

    def __init__(self, backend: Backend, config: BRRMConfig | None = None) -> None:
        self.backend = backend
        self.config = config or BRRMConfig()
        self.tokenizer = backend.tokenizer
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer of {backend.info.model!r} has no chat template; BR-RM needs one")
        if not backend.capabilities.generate:
            raise ConfigError(f"{backend.info.model!r} cannot generate (a sequence classifier?); BR-RM needs a "
                              "causal LM")
        if self.config.decoding == "constrained" and not backend.capabilities.programs:
            raise ConfigError(f"the {backend.info.name} backend cannot run constraint programs; use "
                              "decoding='faithful'")
        self.encoder = encoder(self.tokenizer)
        self.thinking = self._thinking_enabled()
        self.continuation = self._turn2_continuation()
        chat = text_hash(str(self.tokenizer.chat_template))
        self.info = JudgeInfo(model=backend.info.model, kind="brrm", recipe="brrm", backend=backend.info.name,
                              fingerprint=backend.info.fingerprint,
                              chat_template_hash=chat, template_hash=text_hash(template_hash(), chat),
                              default_strategy="round_robin", options=self._options(),
                              chunk_size=backend.capabilities.chunk_size,
                              concurrent=backend.capabilities.concurrent)

    def with_options(self, **options: Any) -> BRRMJudge:
        """This judge with other settings (``BRRMConfig`` fields and the sampling keywords of :func:`brrm.load`)
        on the same backend.

        Raises:
            ConfigError: on an option BR-RM does not take (naming the valid ones) or an invalid value.
        """
        return BRRMJudge(self.backend, override_config(self.config, options))

    def _options(self) -> dict[str, Any]:
        c = self.config
        return {"decoding": c.decoding, "swap": c.swap, "sampling": c.sampling.to_dict(), "thinking": c.thinking,
                "block_token_cap": c.block_token_cap, "max_retries": c.max_retries, "policies": c.policies()}

    def _thinking_enabled(self) -> bool:
        if self.config.thinking != "auto":
            return self.config.thinking == "on"
        vocab = self.tokenizer.get_vocab()
        return "<think>" in vocab and "</think>" in vocab and "<think>" in (self.tokenizer.chat_template or "")

    def _turn2_continuation(self) -> str:
        """What the chat template writes after an assistant turn's text up to the turn-2 generation prompt."""
        turn2 = render_brrm_turn2()
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARK},
             {"role": "user", "content": turn2}], add_generation_prompt=True, tokenize=False)
        if text.count(_MARK) != 1 or turn2 not in text:
            raise ConfigError("chat template does not render a user/assistant/user conversation verbatim")
        return text.split(_MARK, 1)[1]

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    # ------------------------------------------------------------------------------------------- judging
    def judge_ordered(self, conversations: Sequence[ConversationLike],
                      first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None,
                      progress: Callable[[float], None] | None = None) -> list[PairwiseJudgment]:
        """Judge each (conversation, first, second) in that presentation order; one judgment per item.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N).
            first, second: the responses shown as Response 1 and Response 2 (N each); the result's winner
                is ``A`` when ``first`` wins.
            ids: optional record ids (N); they also key each item's sampler streams.
            progress: called with the fraction of an item done (0.5 per finished turn).

        Raises:
            ConfigError: on mismatched lengths, an invalid conversation or a response that is not a string.
        """
        n = check_same_length(conversations=conversations, first=first, second=second)
        rids = [str(x) for x in ids] if ids is not None else [""] * n
        check_same_length(conversations=conversations, ids=rids)
        items = [self._item(i, conversations[i], first[i], second[i], rids[i]) for i in range(n)]
        live = [it for it in items if it.result is None]
        chunk = self.backend.capabilities.chunk_size
        for start in range(0, len(live), chunk):
            part = live[start:start + chunk]
            while part:
                self._run_turn1(part, progress)
                self._run_turn2([it for it in part if it.result is None], progress)
                for it in part:
                    if it.result is None:
                        it.result = self._finish(it)
                part = [it.retry() for it in part if self._should_retry(it)]
        return [it.result for it in items if it.result is not None]

    def _item(self, i: int, conversation: ConversationLike, first: Any, second: Any, rid: str) -> _Item:
        conv = Conversation.coerce(conversation, where=f"conversations[{i}]")
        texts = []
        for name, r in (("first", first), ("second", second)):
            if not isinstance(r, str):
                raise ConfigError(f"{name}[{i}] must be a string, got {type(r).__name__}")
            if self.config.policy("strip_response_reasoning"):
                r, _ = strip_reasoning(r)
            if self.config.policy("neutralize_markers"):
                r = neutralize_markers(r)
            texts.append(r)
        key = content_key(rid, conv.content_hash(), texts[0], texts[1])
        it = _Item(i, key, conv, texts[0], texts[1], rid)
        self._short_circuit(it)
        return it

    def _short_circuit(self, it: _Item) -> None:
        a, b = it.first, it.second
        winner, reason = Verdict.NONE, ""
        if a.strip() == b.strip():
            winner, reason = Verdict.TIE, "identical responses: tie without a model call"
        elif is_blank(a) or is_blank(b):
            winner = Verdict.B if is_blank(a) else Verdict.A
            reason = f"response {'A' if winner is Verdict.B else 'B'} is empty: the other wins without a model call"
        if winner is not Verdict.NONE:
            it.result = PairwiseJudgment(winner=winner, status=Status.OK, reason=reason, attempts=0, id=it.rid,
                                         provenance=self._provenance(it))

    def _should_retry(self, it: _Item) -> bool:
        return (it.retryable and it.attempt < self.config.max_retries and it.result is not None
                and it.result.status in (Status.PARSE_FAILURE, Status.TRUNCATED, Status.BACKEND_ERROR))

    def _provenance(self, it: _Item) -> Provenance:
        return Provenance(model=self.backend.info.model, backend=self.backend.info.name,
                          template_hash=self.info.template_hash, sampling=self.config.sampling,
                          seed=it.seed(self.config.sampling.seed, 1), decoding=self.config.decoding,
                          policies=self.config.policies(), fingerprint=self.backend.info.fingerprint)

    def _budget(self, it: _Item, prompt_len: int, turn: int) -> tuple[int, Any] | None:
        """(max_new_tokens, program) for a turn, or None after setting a truncated result."""
        s = self.config.sampling
        limit = min(s.max_total_tokens, self.backend.max_context)
        budget = min(s.max_new_tokens_per_turn, limit - prompt_len)
        if budget < 1:
            it.retryable = False
            it.result = self._failed(it, Status.TRUNCATED, f"turn-{turn} prompt has {prompt_len} tokens, which "
                                     f"leaves no room under the {limit}-token limit (max_total_tokens="
                                     f"{s.max_total_tokens}, model context {self.backend.max_context})")
            return None
        if self.config.decoding != "constrained":
            return budget, None
        program = fmt.plan_program(turn, budget, thinking=self.thinking, block_cap=self.config.block_token_cap)
        if program is None:
            need = fmt.min_budget(turn, thinking=self.thinking)
            it.retryable = False
            it.result = self._failed(it, Status.TRUNCATED, f"constrained turn {turn} needs at least {need} new "
                                     f"tokens for its format, but only {budget} are available")
            return None
        return budget, program

    def _run_turn1(self, items: list[_Item], progress: Callable[[float], None] | None) -> None:
        reqs, todo = [], []
        for it in items:
            turn1 = render_brrm_turn1(it.conversation, it.first, it.second, self.config.context)
            try:
                text, ids = self.encoder.chat([{"role": "user", "content": turn1}], add_generation_prompt=True)
            except TemplateError as exc:  # this record's problem, not the batch's
                it.retryable, it.result = False, self._failed(it, Status.INVALID_INPUT, str(exc))
                continue
            it.p1_text, it.p1_ids = text, tuple(ids)
            plan = self._budget(it, len(it.p1_ids), 1)
            if plan:
                reqs.append(GenerationRequest(it.p1_ids, plan[0], seed=it.seed(self.config.sampling.seed, 1),
                                              program=plan[1]))
                todo.append(it)
        for it, comp in zip(todo, self._generate(reqs, keep_kv=True, progress=progress), strict=True):
            it.t1 = comp
            if comp.finish_reason == "error":
                it.result = self._failed(it, Status.BACKEND_ERROR, f"turn 1: {comp.error}")
            elif comp.finish_reason == "length":
                it.result = self._failed(it, Status.TRUNCATED, f"turn 1 used its {len(comp.token_ids)}-token "
                                         "budget without ending its turn")
        if progress:
            progress(0.5 * sum(it.result is not None for it in todo))

    def _run_turn2(self, items: list[_Item], progress: Callable[[float], None] | None) -> None:
        reqs, todo = [], []
        for it in items:
            assert it.t1 is not None
            it.p2_ids = self._p2_ids(it)
            plan = self._budget(it, len(it.p2_ids), 2)
            if plan:
                reqs.append(GenerationRequest(it.p2_ids, plan[0], seed=it.seed(self.config.sampling.seed, 2),
                                              program=plan[1]))
                todo.append(it)
        for it, comp in zip(todo, self._generate(reqs, keep_kv=False, progress=progress), strict=True):
            it.t2 = comp
        if progress and len(todo) < len(items):
            progress(0.5 * (len(items) - len(todo)))

    def _p2_ids(self, it: _Item) -> tuple[int, ...]:
        """P2 in ids: P1 (record text kept as text) + T1 + ``"\\n"`` + the template's continuation.

        ``retokenize`` re-tokenizes the model's T1 text with the seam, as the released evaluation's
        re-tokenization of P1 + T1 does (T1's own ``<think>`` tokens stay special: the model wrote them);
        ``concat`` keeps T1's ids (all of turn 1's KV is reused) except the last pre-token, which is tokenized
        with the seam as the canonical tokenization would (``"]" + "\n"`` becomes the one token ``"]\n"``).
        """
        assert it.t1 is not None
        if self.config.p2_tokenization == "retokenize":
            return it.p1_ids + tuple(self.encoder.markup(it.t1.text + "\n" + self.continuation))
        keep, tail = self.encoder.seam(it.t1.token_ids, it.t1.text)
        return it.p1_ids + tuple(keep) + tuple(self.encoder.markup(tail + "\n" + self.continuation))

    def _generate(self, reqs: list[GenerationRequest], *, keep_kv: bool,
                  progress: Callable[[float], None] | None) -> list[Completion]:
        if not reqs:
            return []
        s = self.config.sampling
        on_complete = (lambda _i: progress(0.5)) if progress else None
        return self.backend.generate(reqs, temperature=s.temperature, top_p=s.top_p,
                                     keep_kv=keep_kv and self.backend.capabilities.kv_reuse,
                                     on_complete=on_complete)

    def _failed(self, it: _Item, status: Status, reason: str, **extra: Any) -> PairwiseJudgment:
        return PairwiseJudgment(winner=Verdict.NONE, status=status, reason=reason, attempts=it.attempt + 1,
                                id=it.rid, provenance=self._provenance(it), **self._texts(it), **extra)

    def _texts(self, it: _Item) -> dict[str, Any]:
        t1, t2 = it.t1, it.t2
        gen = (len(t1.token_ids) if t1 else 0) + (len(t2.token_ids) if t2 else 0)
        return {"turn1_text": t1.text if t1 else "", "turn2_text": t2.text if t2 else "",
                "prompt_tokens": len(it.p1_ids) + len(it.p2_ids), "generated_tokens": gen}

    def _finish(self, it: _Item) -> PairwiseJudgment:
        assert it.t1 is not None and it.t2 is not None
        t1 = fmt.parse_turn1(it.t1.text)
        fields: dict[str, Any] = {"dimensions": t1.dimensions, "unknown_dimensions": t1.unknown,
                                  "analysis_a": t1.analysis_1, "analysis_b": t1.analysis_2}
        budget_notes = [f"turn {k} thinking hit its budget and was closed"
                        for k, c in ((1, it.t1), (2, it.t2)) if c.think_budget_hit]
        t2 = it.t2
        if t2.finish_reason == "error":
            return self._failed(it, Status.BACKEND_ERROR, f"turn 2: {t2.error}", **fields)
        position, why = fmt.parse_verdict(t2.text, self.config.policy("verdict"))
        if not position:
            status = Status.TRUNCATED if t2.finish_reason == "length" else Status.PARSE_FAILURE
            reason = why + (" (turn 2 ran out of tokens)" if status is Status.TRUNCATED else "")
            return self._failed(it, status, reason, **fields)
        p1, logits = digit_probability(t2)
        return PairwiseJudgment(winner=Verdict.A if position == 1 else Verdict.B, status=Status.OK,
                                reason="; ".join(budget_notes), p_a=p1, logit_1=logits[0], logit_2=logits[1],
                                provenance=self._provenance(it), attempts=it.attempt + 1, id=it.rid,
                                **fields, **self._texts(it))


def digit_probability(t2: Completion) -> tuple[float, tuple[float, float]]:
    """P(position 1 better) = softmax over the raw logits of "1" and "2" at the verdict digit (overflow-safe:
    σ(l1 − l2) for any finite gap); NaN when the digit's logits were not measured."""
    if not t2.choice_logits:
        return math.nan, (math.nan, math.nan)
    l1, l2 = t2.choice_logits[-1][:2]
    return sigmoid(l1 - l2), (l1, l2)

