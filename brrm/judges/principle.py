"""RLBFF principle judges: the reward of a response is how strongly the model says it satisfies a principle.

Formats (model facts from ``DESIGN.md`` §3 and the model cards; arXiv 2509.21319):

* ``qwen3_genrm`` — nvidia/Qwen3-Nemotron-32B-GenRM-Principle: the conversation, the assistant response
  under judgment, then one message with role ``principle``; generation prompt on. The model thinks and ends
  with ``Final Judgement: Yes`` or ``… No``; reward = logit(" Yes") − logit(" No") (Qwen ids 7414 / 2308) at
  the step that emits the judgement. On our backends that step is reached by a constraint program,
  ``Think(budget) → "\\n{0,2}Final Judgement:" → Choice((" Yes", " No"))``, so it always exists and its raw
  float32 logits are recorded.
* ``llama_reward`` — nvidia/Llama-3.3-Nemotron-70B-Reward-Principle: the conversation, the response, then a
  user turn asking whether the response satisfies the principle and to answer only Yes or No; reward =
  logit("Yes") − logit("No") at the first generated token (a program of just ``Choice(("Yes", "No"))``).

The principle is required (the models document no default). Many principles per response are scored in
one batch (:meth:`PrincipleJudge.score_principles`). Judgement tokens are looked up through the tokenizer
at construction; a tokenizer that splits them is a :class:`~brrm.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from brrm.backends.base import Backend, Completion, GenerationRequest
from brrm.constraints import Choice, Pattern, Program, Think, single_token_id
from brrm.errors import ConfigError, TemplateError
from brrm.seeds import content_key, item_seed
from brrm.templates import is_blank, strip_end_tokens, strip_reasoning, text_hash
from brrm.tokens import encoder
from brrm.types import (
    Conversation,
    JudgeInfo,
    Provenance,
    SamplingConfig,
    ScalarReward,
    Status,
    check_bool,
    check_same_length,
)

FORMATS = ("qwen3_genrm", "llama_reward")
"""Principle-judge formats; ``auto`` picks one from the model id (see :func:`resolve_format`)."""

JUDGEMENT_OPTIONS = {"qwen3_genrm": (" Yes", " No"), "llama_reward": ("Yes", "No")}
"""The judgement tokens of each format, (yes, no); each must be a single token of the model's tokenizer."""

JUDGEMENT_PATTERN = r"\n{0,2}Final Judgement:"
"""What the GenRM-Principle model writes after thinking, before the judgement token (model card)."""

LLAMA_QUESTION = (
    "Does the response above satisfy the following principle? Answer only Yes or No.\n\n"
    "Principle: {principle}"
)
"""Default final user turn of ``llama_reward``. DESIGN.md §3 states its content (whether the response
satisfies the principle; answer only Yes or No); the card's exact wording was not available offline, so
pass ``PrincipleConfig(question=...)`` to match it verbatim. ``{principle}`` is replaced literally."""

PRINCIPLE_ROLE = "principle"
_MARKER = "BRRM-PRINCIPLE-ROLE-CHECK-7f3a"


def resolve_format(fmt: str, name: str) -> str:
    """The concrete format for ``fmt`` (``auto`` or one of :data:`FORMATS`) and model id ``name``.

    Raises:
        ConfigError: on an unknown format, or ``auto`` with an id that names neither released model.
    """
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ConfigError(f"format {fmt!r} is not valid; expected auto or one of {', '.join(FORMATS)}")
        return fmt
    low = name.lower()
    if "genrm-principle" in low:
        return "qwen3_genrm"
    if "reward-principle" in low:
        return "llama_reward"
    raise ConfigError(
        f"cannot tell the principle format of {name!r}; pass format= one of {', '.join(FORMATS)}"
    )


def judgement_token_ids(tokenizer: Any, fmt: str) -> tuple[int, int]:
    """The (yes, no) token ids of format ``fmt`` (Qwen3: 7414, 2308).

    Raises:
        ConfigError: when either option is not exactly one token of ``tokenizer``.
    """
    yes, no = JUDGEMENT_OPTIONS[fmt]
    try:
        return single_token_id(tokenizer, yes), single_token_id(tokenizer, no)
    except ConfigError as exc:
        raise ConfigError(f"format {fmt!r} reads the judgement from one token, but: {exc}") from None


@dataclass(frozen=True)
class PrincipleConfig:
    """Settings of a principle judge.

    Attributes:
        format: ``auto`` or one of :data:`FORMATS`.
        sampling: decoding of the thinking part (``qwen3_genrm``); default greedy (T=0, our choice: the
            card's sampling was not available offline), at most ``max_new_tokens_per_turn`` new tokens and
            ``max_total_tokens`` prompt + new tokens. Each item samples from a stream seeded by the base seed
            and its stable key (id, content, principle; :mod:`brrm.seeds`).
        strip_thinking: remove a leading ``<think>…</think>`` block from each response (recorded per result).
        strip_history_reasoning: remove ``<think>`` blocks from earlier assistant turns (recorded).
        question: final user turn of ``llama_reward``; ``{principle}`` is replaced by the principle.

    Raises:
        ConfigError: on an invalid format or a question without ``{principle}``.
    """

    format: str = "auto"
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0))
    strip_thinking: bool = True
    strip_history_reasoning: bool = True
    question: str = LLAMA_QUESTION

    def __post_init__(self) -> None:
        check_bool("strip_thinking", self.strip_thinking)
        check_bool("strip_history_reasoning", self.strip_history_reasoning)
        if not isinstance(self.sampling, SamplingConfig):
            raise ConfigError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
        if self.format != "auto" and self.format not in FORMATS:
            raise ConfigError(
                f"format {self.format!r} is not valid; expected auto or one of {', '.join(FORMATS)}"
            )
        if "{principle}" not in self.question:
            raise ConfigError("question must contain the placeholder {principle}")


@dataclass
class _Item:
    conversation: Conversation
    response: str
    principle: str
    rid: str
    stripped: bool = False
    prompt: tuple[int, ...] = ()
    result: ScalarReward | None = None

    def seed(self, base: int) -> int:
        key = content_key(self.rid, self.conversation.content_hash(), self.response, self.principle)
        return item_seed(base, key, stream="judgement")


class PrincipleJudge:
    """An RLBFF principle reward model over a backend with constraint programs (implements ScalarRewardModel).

    Args:
        backend: a model runner whose ``generate`` runs :class:`brrm.constraints.Program` s and reports
            Choice logits (the transformers backend does).
        config: judge settings.

    Raises:
        ConfigError: when the format cannot be resolved or " Yes"/" No" (or "Yes"/"No") are not single tokens.
        TemplateError: when the ``qwen3_genrm`` chat template does not render a ``principle`` message.
    """

    def __init__(self, backend: Backend, config: PrincipleConfig | None = None) -> None:
        self.backend = backend
        self.config = config or PrincipleConfig()
        self.tokenizer = backend.tokenizer
        if not backend.capabilities.programs:
            raise ConfigError(f"the {backend.info.name} backend cannot run constraint programs, which principle "
                              "judges need to reach the judgement step")
        self.format = resolve_format(self.config.format, backend.info.model)
        self.encoder = encoder(self.tokenizer)
        self.end_texts = tuple({t for t in (self.tokenizer.convert_ids_to_tokens(backend.end_of_turn_id),
                                            self.tokenizer.eos_token) if t})
        template = getattr(self.tokenizer, "chat_template", None)
        if not template:
            raise ConfigError(
                f"tokenizer of {backend.info.model!r} has no chat template; principle judges need one"
            )
        self.template_sha = text_hash(str(template))
        self.option_ids = judgement_token_ids(self.tokenizer, self.format)
        if self.format == "qwen3_genrm":
            self._check_principle_role()
        self.template_hash = text_hash(str(template), self.format, JUDGEMENT_PATTERN, self.config.question)
        self.info = JudgeInfo(model=backend.info.model, kind="principle", recipe=self.format,
                              backend=backend.info.name, chat_template_hash=self.template_sha,
                              template_hash=self.template_hash, default_strategy="scores",
                              options={"sampling": self.config.sampling.to_dict(), **self._policies()},
                              chunk_size=backend.capabilities.chunk_size)

    def _policies(self) -> dict[str, Any]:
        return {"format": self.format, "strip_thinking": self.config.strip_thinking,
                "strip_history_reasoning": self.config.strip_history_reasoning}

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    def _check_principle_role(self) -> None:
        name = getattr(self.tokenizer, "name_or_path", "") or self.backend.info.model
        where = f"the chat template of {name!r} (sha256 {self.template_sha})"
        messages = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": PRINCIPLE_ROLE, "content": _MARKER},
        ]
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:
            raise TemplateError(f"{where} fails on a message with role 'principle': {exc}") from exc
        if _MARKER not in text:
            raise TemplateError(
                f"{where} does not render messages with role 'principle' (it drops them); the "
                "GenRM-Principle format needs the model's own template, which knows that role"
            )

    # -------------------------------------------------------------------------------------------- public
    def score(
        self,
        conversations: Sequence[Any],
        responses: Sequence[str],
        /,
        *,
        principles: str | Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[ScalarReward]:
        """Score each (conversation, response) against a principle; one reward per item, in input order.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N), ending with a user turn.
            responses: responses under judgment (N strings).
            principles: required; one string for every item, or a sequence of N strings.
            ids: optional record ids (N).

        Returns:
            N rewards, logit(yes) − logit(no) (float32 logits), each with its principle, raw logits and
            generated text. Empty responses are ``empty``; prompts that leave no room for the judgement are
            ``truncated``; backend failures and non-finite logits are ``backend_error``.

        Raises:
            ConfigError: before any model call, on a missing principle, mismatched lengths, an invalid
                conversation or a missing (None) response.
        """
        n = check_same_length(conversations=conversations, responses=responses)
        if principles is None:
            raise ConfigError(
                "a principle is required (e.g. principle='The response is factually correct.'); "
                "principle models document no default"
            )
        chosen = [principles] * n if isinstance(principles, str) else list(principles)
        check_same_length(conversations=conversations, principles=chosen)
        rids = [str(x) for x in ids] if ids is not None else [""] * n
        check_same_length(conversations=conversations, ids=rids)
        return self._score_items([self._item(i, conversations[i], responses[i], chosen[i], rids[i]) for i in range(n)])

    def score_principles(
        self, conversations: Sequence[Any], responses: Sequence[str], principles: Sequence[str], /
    ) -> list[list[ScalarReward]]:
        """Score every response against every principle in one batch.

        Returns:
            ``out[i][k]`` = reward of response ``i`` under ``principles[k]`` (N × P).

        Raises:
            ConfigError: as :meth:`score`, or when ``principles`` is empty.
        """
        n = check_same_length(conversations=conversations, responses=responses)
        if isinstance(principles, str) or not principles:
            raise ConfigError("principles must be a non-empty list of strings")
        items = [self._item(i, conversations[i], responses[i], p, "") for i in range(n) for p in principles]
        flat = self._score_items(items)
        return [flat[i * len(principles) : (i + 1) * len(principles)] for i in range(n)]

    # ---------------------------------------------------------------------------------------- internals
    def _item(self, pos: int, conversation: Any, response: Any, principle: Any, rid: str) -> _Item:
        """Validate one input (``pos`` names it in errors)."""
        if response is None:
            raise ConfigError(f"responses[{pos}] is missing (None): scoring needs the assistant response")
        if not isinstance(response, str):
            raise ConfigError(f"responses[{pos}] must be a string, got {type(response).__name__}")
        if not isinstance(principle, str) or not principle.strip():
            raise ConfigError(f"principle of item {pos} must be a non-empty string, got {principle!r}")
        conv = Conversation.coerce(conversation, where=f"conversations[{pos}]")
        return _Item(conv, response, principle, rid)

    def _messages(self, it: _Item, response: str) -> list[dict[str, Any]]:
        history = it.conversation.to_list()
        if self.config.strip_history_reasoning:
            for m in history:
                if m["role"] == "assistant":
                    m["content"] = strip_reasoning(m["content"])[0]
        messages = [*history, {"role": "assistant", "content": response}]
        if self.format == "qwen3_genrm":
            return [*messages, {"role": PRINCIPLE_ROLE, "content": it.principle}]
        return [
            *messages,
            {"role": "user", "content": self.config.question.replace("{principle}", it.principle)},
        ]

    def _program(self, budget: int) -> Program | None:
        """The constraint program for ``budget`` new tokens, or None when the format does not fit."""
        choice = Choice(JUDGEMENT_OPTIONS[self.format])
        if self.format == "llama_reward":
            program = Program((choice,))
            return program if program.max_tokens() <= budget else None
        pattern = Pattern(JUDGEMENT_PATTERN, max_len=2 + len("Final Judgement:"))
        think = budget - Program((Think(0), pattern, choice)).max_tokens()
        return Program((Think(think), pattern, choice)) if think >= 1 else None

    def _prepare(self, it: _Item) -> GenerationRequest | None:
        meta = self._meta(it)
        text, it.stripped = (
            strip_reasoning(it.response) if self.config.strip_thinking else (it.response, False)
        )
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
        budget = min(s.max_new_tokens_per_turn, limit - len(it.prompt))
        program = self._program(budget)
        if program is None:
            it.result = ScalarReward.failed(
                Status.TRUNCATED,
                f"prompt has {len(it.prompt)} tokens, leaving {max(budget, 0)} new tokens under "
                f"the {limit}-token limit: too few for the {self.format} judgement",
                truncated=True,
                **meta,
            )
            return None
        return GenerationRequest(it.prompt, min(budget, program.max_tokens()), seed=it.seed(s.seed), program=program)

    def _score_items(self, items: list[_Item]) -> list[ScalarReward]:
        reqs, todo = [], []
        for it in items:
            req = self._prepare(it)
            if req is not None:
                reqs.append(req)
                todo.append(it)
        if reqs:
            s = self.config.sampling
            completions = self.backend.generate(reqs, temperature=s.temperature, top_p=s.top_p)
            for it, comp in zip(todo, completions, strict=True):
                it.result = self._finish(it, comp)
        return [it.result for it in items if it.result is not None]

    def _meta(self, it: _Item) -> dict[str, Any]:
        s = self.config.sampling
        prov = Provenance(
            model=self.backend.info.model,
            backend=self.backend.info.name,
            template_hash=self.template_hash,
            sampling=s,
            seed=it.seed(s.seed),
            decoding="constrained",
            policies=self._policies(),
        )
        return {"id": it.rid, "principle": it.principle, "thinking_stripped": it.stripped, "provenance": prov}

    def _finish(self, it: _Item, comp: Completion) -> ScalarReward:
        meta = {**self._meta(it), "input_tokens": len(it.prompt), "text": comp.text}
        if comp.finish_reason == "error":
            return ScalarReward.failed(Status.BACKEND_ERROR, comp.error or "backend error", **meta)
        if not comp.choice_logits:
            why = (
                "generation ended before the judgement token"
                if comp.finish_reason == "length"
                else "the backend reported no judgement logits (it must run constraint programs)"
            )
            status = Status.TRUNCATED if comp.finish_reason == "length" else Status.BACKEND_ERROR
            return ScalarReward.failed(status, why, **meta)
        yes, no = comp.choice_logits[-1][:2]
        note = "thinking hit its token budget and was closed" if comp.think_budget_hit else ""
        return ScalarReward(yes - no, Status.OK, note, logits=(yes, no), **meta)
