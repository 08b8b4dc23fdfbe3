"""The two-turn Branch-and-Rethink (BR-RM) pairwise judge.

Protocol (released evaluation, ``../shared/reference/README.md``; BR-RM paper, NVIDIA 2025):

* P1 = chat template over one user message (the turn-1 text), generation prompt on, thinking left on;
* T1 = generation from P1, stopped by the end-of-turn token;
* P2 = P1 + T1 + ``"\\n"`` + the chat template's continuation (``<|im_end|>\\n`` + a user turn with the
  turn-2 text + the generation prompt). Raw concatenation keeps turn-1 thinking in P2 (re-rendering the
  messages through the Qwen3 template would drop it). The continuation is taken from the tokenizer's
  own template, so the protocol is template-driven (it renders Qwen's bytes exactly on Qwen3);
* T2 = generation from P2; the verdict is the last strict ranking block of T2.

Decoding modes: ``faithful`` (free generation, strict regex; a malformed output is a ``parse_failure``
with the raw text kept) and ``constrained`` (default: after the thinking block the turn structure is
enforced with outlines-core, so the verdict always parses, and P(response 1 better) is read from the
verdict-digit logits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from brrm.backends.base import Backend, Completion, GenerationRequest
from brrm.errors import ConfigError
from brrm.judges import brrm_format as fmt
from brrm.templates import ContextPolicy, render_brrm_turn1, render_brrm_turn2, strip_reasoning, template_hash
from brrm.types import (
    Conversation,
    PairwiseJudgment,
    Provenance,
    SamplingConfig,
    Status,
    Verdict,
    check_same_length,
)

DECODING_MODES = ("constrained", "faithful")
THINKING_MODES = ("auto", "on", "off")
_MARK = "\x00BRRM-TURN1\x00"


@dataclass(frozen=True)
class BRRMConfig:
    """Settings of the BR-RM judge.

    Attributes:
        decoding: ``constrained`` (default) or ``faithful`` (the released protocol exactly).
        sampling: decoding settings; defaults are the published ones (T=1.0, top_p=1.0, 8192 new tokens
            per turn, 16384 in total).
        thinking: ``auto`` (on when the tokenizer has single ``<think>``/``</think>`` tokens and the chat
            template uses them), ``on`` or ``off``. Only affects the constrained program.
        block_token_cap: token cap of each free-text block in constrained mode, >= 8.
        context: how earlier turns are flattened (history reasoning, system messages).
        neutralize_markers: rewrite judge-format markers inside responses (see
            :func:`brrm.judges.brrm_format.neutralize_markers`).
        strip_response_reasoning: remove a leading ``<think>…</think>`` block from each response.
        swap: judge both orders and combine (agree -> that winner, disagree -> tie).
        max_retries: re-run an ordered judgment that ended ``parse_failure``, ``truncated`` (turn budget)
            or ``backend_error`` up to this many times with a new seed, >= 0. Default 0: nothing is
            re-sampled behind the user's back; ``attempts`` on the result counts the runs.
        turn2_tokens: how P2's token ids are formed from the same P2 text. ``retokenize`` tokenizes
            P1 + T1 + continuation as one string, as the released evaluation did (vLLM re-tokenized the
            text); KV reuse then stops where T1's sampled ids differ from the canonical tokenization.
            ``concat`` keeps P1's and T1's ids as generated and appends the tokenized continuation, so
            turn 2 reuses all of turn 1's KV. ``auto`` (default): ``retokenize`` in faithful mode,
            ``concat`` in constrained mode (where fixed markers are emitted as their own tokens).

    Raises:
        ConfigError: naming the field and its valid options.
    """

    decoding: str = "constrained"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    thinking: str = "auto"
    block_token_cap: int = 512
    context: ContextPolicy = field(default_factory=ContextPolicy)
    neutralize_markers: bool = True
    strip_response_reasoning: bool = True
    swap: bool = False
    max_retries: int = 0
    turn2_tokens: str = "auto"

    def __post_init__(self) -> None:
        if self.turn2_tokens not in ("auto", "retokenize", "concat"):
            raise ConfigError(f"turn2_tokens {self.turn2_tokens!r} is not valid; expected auto, retokenize, concat")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if self.decoding not in DECODING_MODES:
            raise ConfigError(f"decoding {self.decoding!r} is not valid; expected one of {DECODING_MODES}")
        if self.thinking not in THINKING_MODES:
            raise ConfigError(f"thinking {self.thinking!r} is not valid; expected one of {THINKING_MODES}")
        if not isinstance(self.block_token_cap, int) or self.block_token_cap < fmt.MIN_BLOCK_CAP:
            raise ConfigError(f"block_token_cap must be an int >= {fmt.MIN_BLOCK_CAP}, got {self.block_token_cap!r}")

    def policies(self) -> dict[str, Any]:
        return {**self.context.to_dict(), "neutralize_markers": self.neutralize_markers,
                "strip_response_reasoning": self.strip_response_reasoning, "thinking": self.thinking,
                "turn2_tokens": self.p2_tokenization}

    @property
    def p2_tokenization(self) -> str:
        """``turn2_tokens`` with ``auto`` resolved for the decoding mode."""
        if self.turn2_tokens != "auto":
            return self.turn2_tokens
        return "retokenize" if self.decoding == "faithful" else "concat"


@dataclass
class _Item:
    """One ordered judgment in flight (position 1 = ``first``)."""

    pair: int
    flipped: bool
    seed: int
    p1_text: str = ""
    p1_ids: tuple[int, ...] = ()
    t1: Completion | None = None
    p2_ids: tuple[int, ...] = ()
    t2: Completion | None = None
    result: PairwiseJudgment | None = None
    attempts: int = 1
    retryable: bool = True

    def retry(self) -> _Item:
        """Reset for a fresh attempt of the same ordered judgment with a new (deterministic) seed."""
        self.seed += 1_000_003
        self.attempts += 1
        self.p1_text, self.p1_ids, self.t1, self.p2_ids, self.t2, self.result = "", (), None, (), None, None
        return self


class BRRMJudge:
    """The BR-RM judge over any :class:`~brrm.backends.base.Backend`.

    Args:
        backend: the model runner (transformers, vLLM, OpenAI-compatible, or a scripted fake).
        config: judge settings.
    """

    def __init__(self, backend: Backend, config: BRRMConfig | None = None) -> None:
        self.backend = backend
        self.config = config or BRRMConfig()
        self.tokenizer = backend.tokenizer
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer of {backend.info.model!r} has no chat template; BR-RM needs one")
        self.thinking = self._thinking_enabled()
        self.continuation = self._turn2_continuation()

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

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str],
                    responses_b: Sequence[str], /, *, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, swap: bool | None = None) -> list[PairwiseJudgment]:
        """Judge each (conversation, A, B); one judgment per pair, in input order.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N).
            responses_a, responses_b: candidate responses (N each).
            ids, labels: optional per-pair id and gold label, copied into the results.
            swap: override ``config.swap``.

        Raises:
            ConfigError: on mismatched lengths or an invalid conversation (use the CLI / records layer to
                turn bad records into ``invalid_input`` results instead).
        """
        n = check_same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b)
        convs = [Conversation.coerce(c, where=f"conversations[{i}]") for i, c in enumerate(conversations)]
        swap = self.config.swap if swap is None else swap
        seed = self.config.sampling.seed
        items = [_Item(i, False, seed + i) for i in range(n)]
        if swap:
            items += [_Item(i, True, seed + n + i) for i in range(n)]
        pairs = [self._prepare(convs[i], responses_a[i], responses_b[i]) for i in range(n)]
        for it in items:
            self._short_circuit(it, pairs[it.pair])
        live = [it for it in items if it.result is None]
        # Both turns run chunk by chunk so that at most one chunk's turn-1 KV is held for reuse.
        chunk = max(1, int(getattr(self.backend, "judge_chunk_size", len(live) or 1)))
        for start in range(0, len(live), chunk):
            part = live[start:start + chunk]
            while part:
                self._run_turn1(part, convs, pairs)
                self._run_turn2([it for it in part if it.result is None])
                for it in part:
                    if it.result is None:
                        it.result = self._finish(it)
                part = [it.retry() for it in part if self._should_retry(it)]
        return self._collect(items, n, swap, ids, labels)

    def _collect(self, items: list[_Item], n: int, swap: bool, ids: Sequence[str] | None,
                 labels: Sequence[Verdict] | None) -> list[PairwiseJudgment]:
        final: dict[tuple[int, bool], PairwiseJudgment] = {}
        for it in items:
            if it.result is not None:
                final[(it.pair, it.flipped)] = it.result
        out = []
        for i in range(n):
            orients = [final[(i, False)], final[(i, True)]] if swap else [final[(i, False)]]
            out.append(replace(combine(orients) if swap else orients[0], id=str(ids[i]) if ids else "",
                               label=labels[i] if labels else Verdict.NONE))
        return out

    def _should_retry(self, it: _Item) -> bool:
        return (it.retryable and it.attempts <= self.config.max_retries and it.result is not None
                and it.result.status in (Status.PARSE_FAILURE, Status.TRUNCATED, Status.BACKEND_ERROR))

    def _prepare(self, conv: Conversation, a: str, b: str) -> tuple[str, str]:
        out = []
        for r in (a, b):
            if not isinstance(r, str):
                raise ConfigError(f"responses must be strings, got {type(r).__name__}")
            if self.config.strip_response_reasoning:
                r, _ = strip_reasoning(r)
            if self.config.neutralize_markers:
                r = fmt.neutralize_markers(r)
            out.append(r)
        return out[0], out[1]

    def _short_circuit(self, it: _Item, pair: tuple[str, str]) -> None:
        a, b = pair
        winner, reason = Verdict.NONE, ""
        if a.strip() == b.strip():
            winner, reason = Verdict.TIE, "identical responses: tie without a model call"
        elif not a.strip() or not b.strip():
            winner = Verdict.B if not a.strip() else Verdict.A
            reason = f"response {'A' if winner is Verdict.B else 'B'} is empty: the other wins without a model call"
        if winner is not Verdict.NONE:
            it.result = PairwiseJudgment(winner=winner, status=Status.OK, reason=reason, attempts=0,
                                         p_a={Verdict.A: 1.0, Verdict.B: 0.0}.get(winner, 0.5),
                                         provenance=self._provenance(it))

    def _provenance(self, it: _Item) -> Provenance:
        return Provenance(model=self.backend.info.model, backend=self.backend.info.name,
                          template_hash=template_hash(), sampling=self.config.sampling, seed=it.seed,
                          decoding=self.config.decoding, policies=self.config.policies())

    def _encode(self, text: str) -> tuple[int, ...]:
        # The rendered text already holds every special token (BOS included, if the template adds one).
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

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

    def _run_turn1(self, items: list[_Item], convs: list[Conversation], pairs: list[tuple[str, str]]) -> None:
        reqs, todo = [], []
        for it in items:
            a, b = pairs[it.pair]
            r1, r2 = (b, a) if it.flipped else (a, b)
            turn1 = render_brrm_turn1(convs[it.pair], r1, r2, self.config.context)
            it.p1_text = self.tokenizer.apply_chat_template([{"role": "user", "content": turn1}],
                                                            add_generation_prompt=True, tokenize=False)
            it.p1_ids = self._encode(it.p1_text)
            plan = self._budget(it, len(it.p1_ids), 1)
            if plan:
                reqs.append(GenerationRequest(it.p1_ids, plan[0], seed=it.seed, program=plan[1]))
                todo.append(it)
        for it, comp in zip(todo, self._generate(reqs, keep_kv=True), strict=True):
            it.t1 = comp
            if comp.finish_reason == "error":
                it.result = self._failed(it, Status.BACKEND_ERROR, f"turn 1: {comp.error}")
            elif comp.finish_reason == "length":
                it.result = self._failed(it, Status.TRUNCATED, f"turn 1 used its {len(comp.token_ids)}-token "
                                         "budget without ending its turn")

    def _run_turn2(self, items: list[_Item]) -> None:
        reqs, todo = [], []
        for it in items:
            assert it.t1 is not None
            if self.config.p2_tokenization == "retokenize":
                it.p2_ids = self._encode(it.p1_text + it.t1.text + "\n" + self.continuation)
            else:
                it.p2_ids = it.p1_ids + it.t1.token_ids + self._encode("\n" + self.continuation)
            plan = self._budget(it, len(it.p2_ids), 2)
            if plan:
                reqs.append(GenerationRequest(it.p2_ids, plan[0], seed=it.seed, program=plan[1]))
                todo.append(it)
        for it, comp in zip(todo, self._generate(reqs, keep_kv=False), strict=True):
            it.t2 = comp

    def _generate(self, reqs: list[GenerationRequest], *, keep_kv: bool) -> list[Completion]:
        if not reqs:
            return []
        s = self.config.sampling
        kwargs = {"keep_kv": keep_kv} if hasattr(self.backend, "cache") else {}
        return self.backend.generate(reqs, temperature=s.temperature, top_p=s.top_p, **kwargs)

    def _failed(self, it: _Item, status: Status, reason: str, **extra: Any) -> PairwiseJudgment:
        return PairwiseJudgment(winner=Verdict.NONE, status=status, reason=reason, attempts=it.attempts,
                                provenance=self._provenance(it), **self._texts(it), **extra)

    def _texts(self, it: _Item) -> dict[str, Any]:
        t1, t2 = it.t1, it.t2
        gen = (len(t1.token_ids) if t1 else 0) + (len(t2.token_ids) if t2 else 0)
        return {"turn1_text": t1.text if t1 else "", "turn2_text": t2.text if t2 else "",
                "prompt_tokens": len(it.p1_ids) + len(it.p2_ids), "generated_tokens": gen}

    def _finish(self, it: _Item) -> PairwiseJudgment:
        assert it.t1 is not None and it.t2 is not None
        t1 = fmt.parse_turn1(it.t1.text)
        first, second = (t1.analysis_2, t1.analysis_1) if it.flipped else (t1.analysis_1, t1.analysis_2)
        fields: dict[str, Any] = {"dimensions": t1.dimensions, "unknown_dimensions": t1.unknown,
                                  "analysis_a": first, "analysis_b": second}
        budget_notes = [f"turn {k} thinking hit its budget and was closed"
                        for k, c in ((1, it.t1), (2, it.t2)) if c.think_budget_hit]
        t2 = it.t2
        if t2.finish_reason == "error":
            return self._failed(it, Status.BACKEND_ERROR, f"turn 2: {t2.error}", **fields)
        position, why = fmt.parse_verdict(t2.text)
        if not position:
            status = Status.TRUNCATED if t2.finish_reason == "length" else Status.PARSE_FAILURE
            reason = why + (" (turn 2 ran out of tokens)" if status is Status.TRUNCATED else "")
            return self._failed(it, status, reason, **fields)
        p1, logits = _digit_probability(t2)
        winner = Verdict.A if position == 1 else Verdict.B
        p_a = p1
        if it.flipped:
            winner, p_a = winner.mirrored(), (1 - p1 if not math.isnan(p1) else p1)
        return PairwiseJudgment(winner=winner, status=Status.OK, reason="; ".join(budget_notes), p_a=p_a,
                                logit_1=logits[0], logit_2=logits[1], provenance=self._provenance(it),
                                attempts=it.attempts,
                                **fields, **self._texts(it))


def _digit_probability(t2: Completion) -> tuple[float, tuple[float, float]]:
    """P(position 1 better) = softmax over the raw logits of "1" and "2" at the verdict digit."""
    if not t2.choice_logits:
        return math.nan, (math.nan, math.nan)
    l1, l2 = t2.choice_logits[-1][:2]
    return 1.0 / (1.0 + math.exp(l2 - l1)), (l1, l2)


def combine(orients: Sequence[PairwiseJudgment]) -> PairwiseJudgment:
    """Swap-order debiasing of the (A,B) and (B,A) judgments (already mapped back to A/B).

    Agree -> that winner; disagree -> ``tie`` with ``consistent=False``; P(A ≻ B) = mean of the two
    orientation-corrected probabilities (NaN if either is NaN). If either order failed, the combined
    result carries that failure (first failing order's status and reason).
    """
    fwd, rev = orients
    failed = next((j for j in (fwd, rev) if not j.ok), None)
    if failed is not None:
        return replace(failed, reason=f"{'reversed' if failed is rev else 'forward'} order: {failed.reason}",
                       sub_judgments=(fwd, rev), consistent=False)
    consistent = fwd.winner is rev.winner
    winner = fwd.winner if consistent else Verdict.TIE
    reason = "" if consistent else f"position inconsistent: forward says {fwd.winner.value}, reversed says " \
                                   f"{rev.winner.value}"
    p_a = (fwd.p_a + rev.p_a) / 2
    return replace(fwd, winner=winner, reason=reason, p_a=p_a, sub_judgments=(fwd, rev), consistent=consistent,
                   attempts=fwd.attempts + rev.attempts,
                   prompt_tokens=fwd.prompt_tokens + rev.prompt_tokens,
                   generated_tokens=fwd.generated_tokens + rev.generated_tokens)
