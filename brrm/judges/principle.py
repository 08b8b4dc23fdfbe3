"""RLBFF principle judges: the reward of a response is how strongly the model says it satisfies a principle.

Formats (``DESIGN.md`` §3; RLBFF, arXiv 2509.21319):

* ``qwen3_genrm`` — nvidia/Qwen3-Nemotron-32B-GenRM-Principle: the conversation, the assistant response under
  judgment, then one message with role ``principle``; generation prompt on. The card names no output format; it
  reads the token the model emits before its end of turn. Default decoding ``card`` (``DESIGN.md`` §3): generate
  freely with the checkpoint's full generation config (temperature, top_k, top_p; ``do_sample`` with an unset
  field takes transformers' default, see :data:`brrm.load.GENERATION_DEFAULTS`; up to 16,000 new tokens), then
  read the *processed* scores of the step that emitted the last token (``scores[-2]``: the last score is the
  end of turn's) — the raw logits after the same temperature, top-k and top-p processing transformers' sampling
  applies (:func:`~brrm.judges.principle_format.processed_scores`; greedy: the raw logits) — and reward =
  max(s_yes − s_max, −50) − max(s_no − s_max, −50), with s_max the step's largest score and a masked (−inf)
  label floored at −50. A generation whose last token is not " Yes" / " No" is a ``parse_failure`` with its text
  kept (brrm's rule), and one that never ends its turn is ``truncated``; both carry the card's number in
  ``card_reward`` (what the card's code returns from ``scores[-2]`` of that generation; never averaged).
  ``reward="logit_diff"`` gives the raw s_yes − s_no instead. Decoding ``constrained`` reaches the judgement
  through a constraint program of brrm's own, ``Think(budget) → "\\n{0,2}Final Judgement:" → Choice((" Yes",
  " No"))``, so it always exists (off the card's path).
* ``llama_reward`` — nvidia/Llama-3.3-Nemotron-70B-Reward-Principle: the conversation, the response, then a user
  turn with the card's question (:data:`LLAMA_QUESTION`); reward = logit("Yes") − logit("No") at the first
  generated token (a program of just ``Choice(("Yes", "No"))``).

Label ids are the tokens the model would emit in position (:func:`brrm.constraints.label_token_id`): ``" Yes"`` /
``" No"`` after a word (Qwen ids 7414 / 2308, resolved after brrm's ``"Final Judgement:"``), ``"Yes"`` /
``"No"`` at the start of the assistant turn; a label that is not one token there is a
:class:`~brrm.errors.ConfigError`. The principle is required (the models document no default). Record text
reaches the model through :mod:`brrm.tokens` (a response cannot forge a second ``principle`` turn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from brrm.backends.base import Backend, Completion, GenerationRequest
from brrm.constraints import Choice, Pattern, Program, Think
from brrm.errors import ConfigError, TemplateError
from brrm.judges.principle_format import (
    CLAMP,
    FORMATS,
    JUDGEMENT_AFTER,
    JUDGEMENT_OPTIONS,
    JUDGEMENT_PATTERN,
    LLAMA_QUESTION,
    PRINCIPLE_ROLE,
    card_reward,
    check_principle_role,
    generation_prompt_tail,
    judgement_token_ids,
    processed_scores,
    resolve_format,
    top_needed,
)
from brrm.seeds import content_key, item_seed
from brrm.templates import end_texts, is_blank, strip_end_tokens, strip_reasoning, text_hash
from brrm.tokens import encoder
from brrm.types import (
    Conversation,
    JudgeInfo,
    Provenance,
    SamplingConfig,
    ScalarReward,
    Status,
    check_choice,
    check_same_length,
    override_config,
)
from brrm.types.config import check_options, check_principle
from brrm.types.conversation import ConversationLike
from brrm.types.options import Flag, build, option, option_fields

__all__ = ["CLAMP", "FORMATS", "LLAMA_QUESTION", "PrincipleConfig", "PrincipleJudge", "judgement_token_ids",
           "resolve_format"]

DECODINGS = ("card", "constrained")
REWARDS = ("clamped", "logit_diff")


@dataclass(frozen=True)
class PrincipleConfig:
    """Settings of a principle judge (each field's help gives its values, default and source).

    ``sampling`` is the decoding of the thinking part (``qwen3_genrm``); :func:`brrm.load` fills it from the
    checkpoint's generation config (temperature, top_k, top_p; ``card`` budgets: 16,000 new tokens) unless set.
    Each item samples from a stream seeded by the base seed and its stable key (id, content, principle;
    :mod:`brrm.seeds`).

    Raises:
        ConfigError: on an invalid value (naming the field and its options).
    """

    format: str = option("auto", keyword="recipe",
                         help="auto (from the model id; the default), qwen3_genrm or llama_reward")
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0))
    decoding: str = option("card", choices=DECODINGS,
                           help="qwen3_genrm: card (free generation, logits read at the judgement step; the default) "
                                "or constrained (a constraint program reaches the judgement)")
    reward: str = option("clamped", help="qwen3_genrm: clamped (max(s_yes - s_max, -50) - max(s_no - s_max, -50); "
                                         "the default, the card's) or logit_diff (s_yes - s_no); llama_reward is "
                                         "always logit(Yes) - logit(No)")
    strip_thinking: bool = option(True, flag=Flag("--keep-thinking", store=False,
                                                  help="do not strip a leading <think> block from responses"),
                                  help="remove a leading <think>…</think> block from each response (default on; "
                                       "recorded per result)")
    strip_history_reasoning: bool = option(True, flag=Flag("--history-reasoning", words={"strip": True, "keep": False}),
                                           help="remove <think> blocks from earlier assistant turns (default on; "
                                                "recorded)")
    question: str = option(LLAMA_QUESTION, help="llama_reward: the final user turn, with {principle} in it "
                                                "(default: the card's question)")

    def __post_init__(self) -> None:
        if self.format != "auto":
            check_choice("format", self.format, FORMATS)
        check_options(self)  # decoding and the stripping flags
        check_choice("reward", self.reward, REWARDS)
        if not isinstance(self.sampling, SamplingConfig):
            raise ConfigError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
        if not isinstance(self.question, str) or "{principle}" not in self.question:
            raise ConfigError("question must contain the placeholder {principle}", field="question")

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> PrincipleConfig:
        """The settings a judge's record holds (``options`` of ``GET /v1/models``: ``sampling``, ``format``, the
        applied ``decoding`` and ``reward`` where the format has them, the stripping policies).

        Raises:
            ConfigError: on a missing or invalid entry (naming it).
        """
        given = {k: v for k, v in record.items() if k in {f.name for f in option_fields(cls)}}
        for name, valid in (("decoding", DECODINGS), ("reward", REWARDS)):
            if given.get(name) not in valid:  # a format without the setting records what it does instead
                given.pop(name, None)
        return build(cls, {**given, "sampling": SamplingConfig.from_record(record.get("sampling"))})


@dataclass
class _Item:
    conversation: Conversation
    response: str
    principle: str
    rid: str
    stripped: bool = False
    prompt: tuple[int, ...] = ()
    generated: Completion | None = None
    result: ScalarReward | None = None

    def seed(self, base: int) -> int:
        key = content_key(self.rid, self.conversation.content_hash(), self.response, self.principle)
        return item_seed(base, key, stream="judgement")


class PrincipleJudge:
    """An RLBFF principle reward model over a generating backend (a :class:`~brrm.types.ScalarRewardModel`).

    Args:
        backend: a model runner that runs constraint programs and reports Choice logits.
        config: judge settings.

    Raises:
        ConfigError: when the format cannot be resolved, the backend cannot run programs, or the judgement labels are
            not single tokens in position.
        TemplateError: when the ``qwen3_genrm`` chat template does not render a ``principle`` message.
    """

    def __init__(self, backend: Backend, config: PrincipleConfig | None = None) -> None:
        self.backend = backend
        self.config = config or PrincipleConfig()
        self.tokenizer = backend.tokenizer
        if not backend.capabilities.programs:
            raise ConfigError(f"the {backend.info.name} backend cannot run constraint programs, which principle "
                              "judges need to read the judgement logits")
        self.format = resolve_format(self.config.format, backend.info.model)
        template = getattr(self.tokenizer, "chat_template", None)
        if not template:
            raise ConfigError(f"tokenizer of {backend.info.model!r} has no chat template; principle judges need one")
        self.encoder = encoder(self.tokenizer)
        self.end_texts = end_texts(self.tokenizer, backend.end_of_turn_id)
        self.template_sha = text_hash(str(template))
        self.option_ids = judgement_token_ids(self.tokenizer, self.format)
        if self.format == "qwen3_genrm":
            check_principle_role(self.tokenizer, self.backend.info.model, self.template_sha)
        self.card = self.format == "qwen3_genrm" and self.config.decoding == "card"
        self.template_hash = text_hash(str(template), self.format, JUDGEMENT_PATTERN, self.config.question)
        self.info = JudgeInfo.of(backend, kind="principle", recipe=self.format, chat_template_hash=self.template_sha,
                                 template_hash=self.template_hash, default_strategy="scores",
                                 config=replace(self.config, format=self.format),
                                 record={"sampling": self.config.sampling.to_dict(), **self._policies()})


    def with_options(self, **options: object) -> PrincipleJudge:
        """This judge with other settings (``PrincipleConfig`` fields and the sampling keywords of
        :func:`brrm.load`) on the same backend.

        Raises:
            ConfigError: on an option this judge does not take (naming the valid ones) or an invalid value.
        """
        return PrincipleJudge(self.backend, override_config(self.config, options))
    def _policies(self) -> dict[str, Any]:
        decoding = self.config.decoding if self.format == "qwen3_genrm" else "first_token"
        reward = self.config.reward if self.format == "qwen3_genrm" else "logit_diff"
        return {"format": self.format, "decoding": decoding, "reward": reward,
                "strip_thinking": self.config.strip_thinking,
                "strip_history_reasoning": self.config.strip_history_reasoning}

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    # -------------------------------------------------------------------------------------------- public
    def score(self, conversations: Sequence[ConversationLike], responses: Sequence[str], /, *,
              principles: str | Sequence[str] | None = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        """Score each (conversation, response) against a principle; one reward per item, in input order.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N), ending with a user turn.
            responses: responses under judgment (N strings).
            principles: required; one string for every item, or a sequence of N strings.
            ids: optional record ids (N).

        Returns:
            N rewards (see the module docstring for each format's formula; float32 logits), each with its
            principle, raw logits (``(s_yes, s_no)`` or ``(s_yes, s_no, s_max)``) and generated text. Empty
            responses are ``empty``; prompts that leave no room are ``truncated``; a generation without a final
            Yes/No is ``parse_failure``; a conversation the chat template rejects is ``invalid_input``; backend
            failures and non-finite logits are ``backend_error``.

        Raises:
            ConfigError: before any model call, on a missing principle, mismatched lengths, an invalid conversation
                or a missing (None) response.
        """
        n = check_same_length(conversations=conversations, responses=responses)
        if principles is None:
            raise ConfigError("a principle is required (e.g. principle='The response is factually correct.'); "
                              "principle models document no default")
        chosen = [principles] * n if isinstance(principles, str) else list(principles)
        check_same_length(conversations=conversations, principles=chosen)
        rids = [str(x) for x in ids] if ids is not None else [""] * n
        check_same_length(conversations=conversations, ids=rids)
        return self._score_items([self._item(i, conversations[i], responses[i], chosen[i], rids[i]) for i in range(n)])

    def score_principles(self, conversations: Sequence[ConversationLike], responses: Sequence[str],
                         principles: Sequence[str], /) -> list[list[ScalarReward]]:
        """Score every response against every principle in one batch: ``out[i][k]`` (N × P).

        Raises:
            ConfigError: as :meth:`score`, or when ``principles`` is empty.
        """
        n = check_same_length(conversations=conversations, responses=responses)
        if isinstance(principles, str) or not principles:
            raise ConfigError("principles must be a non-empty list of strings")
        items = [self._item(i, conversations[i], responses[i], p, "") for i in range(n) for p in principles]
        flat = self._score_items(items)
        return [flat[i * len(principles):(i + 1) * len(principles)] for i in range(n)]

    # ---------------------------------------------------------------------------------------- internals
    def _item(self, pos: int, conversation: ConversationLike, response: object, principle: object, rid: str) -> _Item:
        """Validate one input (``pos`` names it in errors)."""
        if response is None:
            raise ConfigError(f"responses[{pos}] is missing (None): scoring needs the assistant response")
        if not isinstance(response, str):
            raise ConfigError(f"responses[{pos}] must be a string, got {type(response).__name__}")
        return _Item(Conversation.coerce(conversation, where=f"conversations[{pos}]"), response,
                     check_principle(f"principle of item {pos}", principle), rid)

    def _messages(self, it: _Item, response: str) -> list[dict[str, Any]]:
        strip = self.config.strip_history_reasoning
        history = [{**m, "content": strip_reasoning(m["content"])[0]} if strip and m["role"] == "assistant" else m
                   for m in it.conversation.to_list()]
        messages = [*history, {"role": "assistant", "content": response}]
        if self.format == "qwen3_genrm":
            return [*messages, {"role": PRINCIPLE_ROLE, "content": it.principle}]
        return [*messages, {"role": "user", "content": self.config.question.replace("{principle}", it.principle)}]

    def _program(self, budget: int) -> Program | None:
        """The constraint program for ``budget`` new tokens (None when it does not fit); None-program = free."""
        yes_no = JUDGEMENT_OPTIONS[self.format]
        if self.format == "llama_reward":
            program = Program((Choice(yes_no, after=generation_prompt_tail(self.tokenizer)),))
            return program if program.max_tokens() <= budget else None
        choice = Choice(yes_no, after=JUDGEMENT_AFTER)
        pattern = Pattern(JUDGEMENT_PATTERN, max_len=2 + len(JUDGEMENT_AFTER))
        think = budget - Program((Think(0), pattern, choice)).max_tokens()
        return Program((Think(think), pattern, choice)) if think >= 1 else None

    def _prepare(self, it: _Item) -> GenerationRequest | None:
        meta = self._meta(it)
        text, it.stripped = strip_reasoning(it.response) if self.config.strip_thinking else (it.response, False)
        meta["thinking_stripped"] = it.stripped
        text = strip_end_tokens(text, self.end_texts)
        if is_blank(text):
            why = "response is empty" + (" after removing its leading <think> block" if it.stripped else "")
            it.result = ScalarReward.failed(Status.EMPTY, why, **meta)
            return None
        try:
            _, ids = self.encoder.chat(self._messages(it, text), add_generation_prompt=True)
        except (TemplateError, ConfigError) as exc:
            it.result = ScalarReward.failed(Status.INVALID_INPUT, str(exc), **meta)
            return None
        it.prompt = tuple(ids)
        s = self.config.sampling
        limit = min(s.max_total_tokens, self.backend.max_context)
        budget = min(s.max_new_tokens, limit - len(it.prompt))
        if self.card:
            if budget >= 2:  # the judgement token and the end of turn, at least
                return GenerationRequest(it.prompt, budget, seed=it.seed(s.seed))
            program = None
        else:
            program = self._program(budget)
        if program is None:
            it.result = ScalarReward.failed(
                Status.TRUNCATED, f"prompt has {len(it.prompt)} tokens, leaving {max(budget, 0)} new tokens under the "
                f"{limit}-token limit: too few for the {self.format} judgement", truncated=True, **meta)
            return None
        return GenerationRequest(it.prompt, min(budget, program.max_tokens()), seed=it.seed(s.seed), program=program)

    def _score_items(self, items: list[_Item]) -> list[ScalarReward]:
        todo = [(it, req) for it in items if (req := self._prepare(it)) is not None]
        if todo:
            s = self.config.sampling
            comps = self.backend.generate([req for _, req in todo], temperature=s.temperature, top_p=s.top_p,
                                          top_k=s.top_k, keep_kv=self.card and self.backend.capabilities.kv_reuse)
            if self.card:
                self._read_judgement_steps([it for it, _ in todo], comps)
            else:
                for (it, _), comp in zip(todo, comps, strict=True):
                    it.result = self._finish(it, comp)
        return [it.result for it in items if it.result is not None]

    def _read_judgement_steps(self, items: list[_Item], comps: list[Completion]) -> None:
        """``card``: a second one-step request per item re-reads the logits of the step that emitted the last
        generated token (the card's ``scores[-2]``; the end of turn is not in ``token_ids``)."""
        reqs, pending = [], []
        s = self.config.sampling
        top = top_needed(s.temperature, s.top_k, s.top_p, len(self.tokenizer))
        program = Program((Choice(JUDGEMENT_OPTIONS[self.format], after=JUDGEMENT_AFTER, with_max=True, top=top),))
        for it, comp in zip(items, comps, strict=True):
            it.generated = comp
            meta = {**self._meta(it), "input_tokens": len(it.prompt), "text": comp.text}
            if comp.finish_reason == "error":
                it.result = ScalarReward.failed(Status.BACKEND_ERROR, comp.error or "backend error", **meta)
            elif comp.finish_reason == "length" and len(comp.token_ids) < 2:
                it.result = ScalarReward.failed(Status.TRUNCATED, f"the generation used its {len(comp.token_ids)}-"
                                                "token budget without ending its turn", truncated=True, **meta)
            elif not comp.token_ids:
                it.result = ScalarReward.failed(Status.PARSE_FAILURE, "the generation is empty: no judgement token",
                                                **meta)
            else:  # scores[-2]: the last token's step after an end of turn, the one before it without one
                cut = 2 if comp.finish_reason == "length" else 1
                reqs.append(GenerationRequest(it.prompt + comp.token_ids[:-cut], program.max_tokens(), seed=0,
                                              program=program))
                pending.append(it)
        if not reqs:
            return
        for it, step in zip(pending, self.backend.generate(reqs, temperature=0.0, top_p=1.0), strict=True):
            assert it.generated is not None
            it.result = self._card_result(it, it.generated, step)

    def _card_result(self, it: _Item, comp: Completion, step: Completion) -> ScalarReward:
        """brrm's result for a ``card`` generation; when brrm's status is not ok (no end of turn, or a last token
        other than Yes/No) the card's number for the same step rides along in ``card_reward``."""
        meta = {**self._meta(it), "input_tokens": len(it.prompt), "text": comp.text}
        failure: tuple[Status, str, dict[str, Any]] | None = None
        if comp.finish_reason == "length":
            failure = (Status.TRUNCATED, f"the generation used its {len(comp.token_ids)}-token budget without "
                       "ending its turn", {"truncated": True})
        elif comp.token_ids[-1] not in self.option_ids:
            failure = (Status.PARSE_FAILURE, "the generation does not end in the Yes/No judgement token (text kept)",
                       {})
        if step.finish_reason == "error" or not step.choice_logits:
            if failure is not None:
                return ScalarReward.failed(failure[0], failure[1] + "; the card's number was not measured",
                                           **failure[2], **meta)
            return ScalarReward.failed(Status.BACKEND_ERROR, step.error or "no judgement logits were reported", **meta)
        s = self.config.sampling
        yes, no, top, *largest = step.choice_logits[-1]
        p_yes, p_no, p_max = processed_scores(yes, no, top, largest, temperature=s.temperature, top_k=s.top_k,
                                              top_p=s.top_p)
        value = card_reward(p_yes, p_no, p_max) if self.config.reward == "clamped" else yes - no
        if failure is not None:
            return ScalarReward.failed(failure[0], failure[1] + "; card_reward holds the card's number (scores[-2])",
                                       logits=(yes, no, top), card_reward=value, **failure[2], **meta)
        return ScalarReward(value, Status.OK, logits=(yes, no, top), **meta)

    def _meta(self, it: _Item) -> dict[str, Any]:
        s = self.config.sampling
        prov = Provenance.of(self.backend, template_hash=self.template_hash, sampling=s, seed=it.seed(s.seed),
                             decoding="free" if self.card else "constrained", policies=self._policies())
        return {"id": it.rid, "principle": it.principle, "thinking_stripped": it.stripped, "provenance": prov}

    def _finish(self, it: _Item, comp: Completion) -> ScalarReward:
        meta = {**self._meta(it), "input_tokens": len(it.prompt), "text": comp.text}
        if comp.finish_reason == "error":
            return ScalarReward.failed(Status.BACKEND_ERROR, comp.error or "backend error", **meta)
        if not comp.choice_logits:
            why = ("generation ended before the judgement token" if comp.finish_reason == "length"
                   else "the backend reported no judgement logits (it must run constraint programs)")
            status = Status.TRUNCATED if comp.finish_reason == "length" else Status.BACKEND_ERROR
            return ScalarReward.failed(status, why, **meta)
        yes, no = comp.choice_logits[-1][:2]
        note = "thinking hit its token budget and was closed" if comp.think_budget_hit else ""
        return ScalarReward(yes - no, Status.OK, note, logits=(yes, no), **meta)
