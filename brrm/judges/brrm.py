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
from typing import Any

from brrm.backends.base import Backend, Completion, GenerationRequest
from brrm.errors import ConfigError, TemplateError
from brrm.judges import brrm_format as fmt
from brrm.judges.brrm_config import BRRMConfig
from brrm.judges.brrm_run import Item as _Item
from brrm.judges.brrm_run import ItemRun, OnResult
from brrm.numerics import sigmoid
from brrm.seeds import content_key
from brrm.templates import (
    brrm_turn1_content,
    is_blank,
    neutralize_markers,
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
    Status,
    Verdict,
    check_int,
    check_same_length,
    override_config,
)
from brrm.types.conversation import ConversationLike

_MARK = "\x00BRRM-TURN1\x00"


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

    votes = True
    """Self-consistency voting: ``judge_ordered(..., samples=k)`` draws k separate samples per order (the trait
    :class:`~brrm.compose.PairwiseRewardJudge` reads; see :class:`~brrm.types.OrderedPairJudge`)."""

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
        self.info = JudgeInfo.of(backend, kind="brrm", recipe="brrm", chat_template_hash=chat,
                                 template_hash=text_hash(template_hash(), chat), default_strategy="round_robin",
                                 config=self.config, record=self._options())

    def with_options(self, **options: object) -> BRRMJudge:
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
    def judge_ordered(self, conversations: Sequence[ConversationLike], first: Sequence[str],
                      second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None, samples: Sequence[int] | None = None,
                      seed_texts: Sequence[tuple[str, str] | None] | None = None,
                      progress: Callable[[float], None] | None = None, on_result: OnResult | None = None,
                      on_step: Callable[[int, int], None] | None = None) -> list[PairwiseJudgment]:
        """Judge each (conversation, first, second) in that presentation order; one judgment per item.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N).
            first, second: the responses shown as Response 1 and Response 2 (N each); the result's winner
                is ``A`` when ``first`` wins.
            ids: optional record ids (N); they also key each item's sampler streams.
            samples: optional sample index of each item (N ints >= 0; default all 0): self-consistency voting
                (:mod:`brrm.compose.vote`) asks for the same ordered pair k times with indices 0..k-1, each
                drawing from its own sampler streams (:func:`brrm.seeds.item_seed`).
            seed_texts: optional (first, second) texts per item (N; None entries: the item's own) whose content
                keys the item's sampler streams instead of its own texts: robustness probes
                (:mod:`brrm.probes`) judge a manipulated variant from the original pair's streams (common random
                numbers), so a verdict that moves is moved by the manipulation, not by other samples.
            progress: called with the fraction of an item done (0.5 per finished turn).
            on_result: called with ``(index, judgment)`` as soon as item ``index`` is final (retries done), in
                the calling thread; on a continuously batching backend that is when its turn 2 ends.
            on_step: ``on_step(rows, tokens)`` after every decoding step of a continuously batching backend (rows
                in its batch, tokens the step added), for progress displays; other backends never call it.

        Raises:
            ConfigError: on mismatched lengths, an invalid conversation, a response that is not a string or a
                sample index that is not an int >= 0.
        """
        n = check_same_length(conversations=conversations, first=first, second=second)
        rids = [str(x) for x in ids] if ids is not None else [""] * n
        check_same_length(conversations=conversations, ids=rids)
        picks = [0] * n if samples is None else [check_int(f"samples[{i}]", s, low=0) for i, s in enumerate(samples)]
        check_same_length(conversations=conversations, samples=picks)
        keyed = list(seed_texts) if seed_texts is not None else [None] * n
        check_same_length(conversations=conversations, seed_texts=keyed)
        items = [self._item(i, conversations[i], first[i], second[i], rids[i], picks[i], keyed[i]) for i in range(n)]

        run = ItemRun(self, progress, on_result, on_step)
        for it in items:
            if it.result is not None:
                run.final(it)
        live = [it for it in items if it.result is None]
        chunk = self.backend.capabilities.chunk_size
        for start in range(0, len(live), chunk):
            run.chains(live[start:start + chunk])
        return [it.result for it in items if it.result is not None]

    def _item(self, i: int, conversation: ConversationLike, first: object, second: object, rid: str, sample: int = 0,
              seed_texts: tuple[str, str] | None = None) -> _Item:
        conv = Conversation.coerce(conversation, where=f"conversations[{i}]")
        texts = self._inputs(i, first, second)
        keyed = texts if seed_texts is None else self._inputs(i, *seed_texts)
        key = content_key(rid, conv.content_hash(), keyed[0], keyed[1])
        it = _Item(i, key, conv, texts[0], texts[1], rid, sample=sample)
        if self.config.shortcuts_on:
            self._short_circuit(it)
        return it

    def _inputs(self, i: int, first: object, second: object) -> list[str]:
        """The two responses as the judge reads them (input policies applied)."""
        texts = []
        for name, r in (("first", first), ("second", second)):
            if not isinstance(r, str):
                raise ConfigError(f"{name}[{i}] must be a string, got {type(r).__name__}")
            if self.config.strips_response_reasoning:
                r, _ = strip_reasoning(r)
            if self.config.neutralizes_markers:
                r = neutralize_markers(r)
            texts.append(r)
        return texts

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
        """Whether an in-run retry (``max_retries``) runs the item again: a backend error always; a parse failure or
        truncation only under sampled decoding, where the retry's fresh streams can differ (a greedy retry would
        repeat the identical request token for token; :mod:`brrm.types.retry`)."""
        if not (it.retryable and it.attempt < self.config.max_retries and it.result is not None):
            return False
        if it.result.status is Status.BACKEND_ERROR:
            return True
        return it.result.status in (Status.PARSE_FAILURE, Status.TRUNCATED) and not self.config.sampling.greedy

    def _provenance(self, it: _Item) -> Provenance:
        return Provenance.of(self.backend, template_hash=self.info.template_hash, sampling=self.config.sampling,
                             seed=it.seed(self.config.sampling.seed, 1), decoding=self.config.decoding,
                             policies=self.config.policies())

    def _budget(self, it: _Item, prompt_len: int, turn: int) -> tuple[int, Any] | None:
        """(max_new_tokens, program) for a turn, or None after setting a truncated result."""
        s = self.config.sampling
        limit = min(s.max_total_tokens, self.backend.max_context)
        budget = min(s.max_new_tokens, limit - prompt_len)
        if budget < 1:
            it.retryable = False
            it.result = self._failed(it, Status.TRUNCATED, f"turn-{turn} prompt has {prompt_len} tokens, which "
                                     f"leaves no room under the {limit}-token limit (max_total_tokens="
                                     f"{s.max_total_tokens}, model context {self.backend.max_context})")
            return None
        if self.config.decoding != "constrained":
            return budget, None
        seam = "\n" if turn == 1 and self.config.p2_tokenization == "concat" else ""
        program = fmt.plan_program(turn, budget, thinking=self.thinking, block_cap=self.config.block_token_cap,
                                   seam=seam)
        if program is None:
            need = fmt.min_budget(turn, thinking=self.thinking, seam=seam)
            it.retryable = False
            it.result = self._failed(it, Status.TRUNCATED, f"constrained turn {turn} needs at least {need} new "
                                     f"tokens for its format, but only {budget} are available")
            return None
        return budget, program

    def _turn1(self, it: _Item) -> GenerationRequest | None:
        """The item's turn-1 request, or None after setting its (invalid input / truncated) result."""
        turn1 = brrm_turn1_content(it.conversation, it.first, it.second, self.config.context)
        try:
            text, ids = self.encoder.chat([{"role": "user", "content": turn1}], add_generation_prompt=True)
        except TemplateError as exc:  # this record's problem, not the batch's
            it.retryable, it.result = False, self._failed(it, Status.INVALID_INPUT, str(exc))
            return None
        it.p1_text, it.p1_ids = text, tuple(ids)
        plan = self._budget(it, len(it.p1_ids), 1)
        return GenerationRequest(it.p1_ids, plan[0], seed=it.seed(self.config.sampling.seed, 1),
                                 program=plan[1]) if plan else None

    def _after_turn1(self, it: _Item, comp: Completion) -> GenerationRequest | None:
        """Record turn 1; the turn-2 request, or None after setting a failed result."""
        it.t1 = comp
        if comp.finish_reason == "error":
            it.result = self._failed(it, Status.BACKEND_ERROR, f"turn 1: {comp.error}")
        elif comp.finish_reason == "length":
            it.result = self._failed(it, Status.TRUNCATED, f"turn 1 used its {len(comp.token_ids)}-token "
                                     "budget without ending its turn")
        if it.result is not None:
            return None
        it.p2_ids = self._p2_ids(it)
        plan = self._budget(it, len(it.p2_ids), 2)
        return GenerationRequest(it.p2_ids, plan[0], seed=it.seed(self.config.sampling.seed, 2),
                                 program=plan[1]) if plan else None

    def _p2_ids(self, it: _Item) -> tuple[int, ...]:
        """P2 in ids: P1 (record text kept as text) + T1 + ``"\\n"`` + the template's continuation.

        ``retokenize`` re-tokenizes the model's T1 text with the seam, as the released evaluation's
        re-tokenization of P1 + T1 does (T1's own ``<think>`` tokens stay special: the model wrote them);
        ``concat`` is an exact extension: P1's ids, T1's ids as generated, then the continuation's ids (all of
        turn 1's KV is reused). In constrained mode turn 1's program already ends with the seam's ``"\n"``
        (the canonical ``"]\n"`` token, :func:`~brrm.judges.brrm_format.turn1_program`); a free turn 1 gets
        ``"\n"`` tokenized on its own, which may differ from the canonical tokenization at that one seam.
        """
        assert it.t1 is not None
        if self.config.p2_tokenization == "retokenize":
            return it.p1_ids + tuple(self.encoder.markup(it.t1.text + "\n" + self.continuation))
        seamed = self.config.decoding == "constrained" and it.t1.text.endswith("]\n")
        tail = ("" if seamed else "\n") + self.continuation
        return it.p1_ids + tuple(it.t1.token_ids) + tuple(self.encoder.markup(tail))

    def _failed(self, it: _Item, status: Status, reason: str, **extra: Any) -> PairwiseJudgment:
        return PairwiseJudgment(winner=Verdict.NONE, status=status, reason=reason, attempts=it.attempt + 1,
                                id=it.rid, provenance=self._provenance(it), **self._texts(it), **extra)

    def _texts(self, it: _Item) -> dict[str, Any]:
        t1, t2 = it.t1, it.t2
        gen = (len(t1.token_ids) if t1 else 0) + (len(t2.token_ids) if t2 else 0)
        return {"turn1_text": t1.text if t1 else "", "turn2_text": t2.text if t2 else "",
                "prompt_tokens": len(it.p1_ids) + len(it.p2_ids), "generated_tokens": gen, "turns": it.turns()}

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
        if self.config.verdict_selection == "official":
            ranking, why = fmt.official_ranking(t2.text)
            if ranking is not None and ranking not in (1, 2):
                return self._neither(it, ranking, budget_notes, fields)
            position = ranking or 0
        else:
            position, why = fmt.parse_verdict(t2.text, self.config.verdict_selection)
        if not position:
            status = Status.TRUNCATED if t2.finish_reason == "length" else Status.PARSE_FAILURE
            reason = why + (" (turn 2 ran out of tokens)" if status is Status.TRUNCATED else "")
            return self._failed(it, status, reason, **fields)
        p1, logits = digit_probability(t2)
        return PairwiseJudgment(winner=Verdict.A if position == 1 else Verdict.B, status=Status.OK,
                                reason="; ".join(budget_notes), p_a=p1, logit_1=logits[0], logit_2=logits[1],
                                provenance=self._provenance(it), attempts=it.attempt + 1, id=it.rid,
                                **fields, **self._texts(it))


    def _neither(self, it: _Item, ranking: int, notes: list[str], fields: dict[str, Any]) -> PairwiseJudgment:
        """An official-parser ranking that names neither response (``\\boxed{3}``): parsed, and — as the official
        scorer compares it with the gold 1 or 2 — correct for neither; a tie-valued OK judgment says so."""
        reason = (f"official parser: \\boxed{{{ranking}}} names neither response; the official scorer counts it "
                  "parsed and wrong, scored here as a tie (never correct where a tie is not)")
        return PairwiseJudgment(winner=Verdict.TIE, status=Status.OK, reason="; ".join([reason, *notes]),
                                provenance=self._provenance(it), attempts=it.attempt + 1, id=it.rid,
                                **fields, **self._texts(it))


def digit_probability(t2: Completion) -> tuple[float, tuple[float, float]]:
    """P(position 1 better) = softmax over the raw logits of "1" and "2" at the verdict digit (overflow-safe:
    σ(l1 − l2) for any finite gap); NaN when the digit's logits were not measured."""
    if not t2.choice_logits:
        return math.nan, (math.nan, math.nan)
    l1, l2 = t2.choice_logits[-1][:2]
    return sigmoid(l1 - l2), (l1, l2)

