"""Bradley–Terry reward models: a scalar reward per (conversation, response) from one forward pass.

Recipes (model facts from ``DESIGN.md`` §3 and the model cards):

* ``sequence_classification`` — any ``AutoModelForSequenceClassification`` with one label; the chat
  template is applied as is; reward = ``logits[:, 0]`` at the last real token.
* ``qwen3_nemotron`` — nvidia/Qwen-3-Nemotron-32B-Reward: ``" /nothink"`` is appended to the last user turn
  and the response is prefixed with ``"<think>\\n\\n</think>\\n\\n"``; reward = ``logits[0][0]``.
* ``llama_nemotron`` — nvidia/Llama-3.1-Nemotron-70B-Reward-HF, Llama-3.3-Nemotron-70B-Reward(-Multilingual):
  an ``AutoModelForCausalLM``; plain user/assistant turns, no generation prompt; reward = vocab logit 0 at
  the last position (what the model card reads from the first generation step's scores).

How every recipe computes a reward, whatever the batch or backend:

* tokens come from the chat template through :mod:`brrm.tokens` (a template that writes BOS gets it once;
  record text is tokenized as text, so a response holding ``<|im_end|>`` adds no end-of-turn token);
* the model runs through the backend's ``classify`` capability (the transformers backend reads the head in
  float32 at the last real token found from the attention mask — see :mod:`brrm.backends.transformers.classify`; vLLM
  uses its pooling API or a one-token request for the vocabulary logit; an OpenAI-compatible vLLM server its
  ``/classify`` endpoint or a one-token completion); a NaN/inf result is a ``backend_error``, never a number;
* an input over ``max_length`` loses tokens from the start of the conversation (BOS kept), never from the
  assistant header, the response or its end-of-turn tokens; if those alone do not fit, the status is
  ``truncated`` with the reason;
* earlier assistant turns lose their ``<think>`` blocks (``strip_history_reasoning``), the response its leading
  one (``strip_thinking``) and any trailing end-of-turn / EOS text (so a response that already ends in
  ``<|im_end|>`` is not scored with a doubled one); each policy is recorded in the result's provenance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brrm.backends.base import Backend, common_prefix_length
from brrm.backends.transformers.bucketing import bucket_by_length
from brrm.errors import ConfigError
from brrm.templates import end_texts, is_blank, strip_end_tokens, strip_reasoning, text_hash
from brrm.tokens import Markup, encoder
from brrm.types import (
    Conversation,
    JudgeInfo,
    Provenance,
    SamplingConfig,
    ScalarReward,
    Status,
    check_choice,
    check_int,
    check_same_length,
)
from brrm.types.config import check_options
from brrm.types.conversation import ConversationLike
from brrm.types.options import Flag, build, option, option_fields

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["EMPTY_THINK", "NOTHINK_SUFFIX", "RECIPES", "BradleyTerryRewardModel", "bucket_by_length",
           "resolve_recipe"]

RECIPES = ("sequence_classification", "qwen3_nemotron", "llama_nemotron")
"""Reward recipes; ``auto`` picks one from the model id and class (see :func:`resolve_recipe`)."""

NOTHINK_SUFFIX = " /nothink"
"""Appended to the last user turn by the ``qwen3_nemotron`` recipe (Qwen-3-Nemotron-32B-Reward card)."""

EMPTY_THINK = "<think>\n\n</think>\n\n"
"""Prefixed to the response by the ``qwen3_nemotron`` recipe (Qwen-3-Nemotron-32B-Reward card)."""

TRUNCATION_SIDES = ("left", "none")
"""``left``: drop the oldest conversation tokens; ``none``: an over-long input is ``truncated``, unscored."""

LLAMA_REWARD_TOKEN = 0
"""The Llama-Nemotron-Reward recipe reads vocabulary logit 0 at the last position (model card)."""


@dataclass(frozen=True)
class BTConfig:
    """The settings of a Bradley–Terry reward model, validated before anything loads (each field's help gives its
    values, default and source).

    Raises:
        ConfigError: naming the field and its valid values.
    """

    recipe: str = option("auto", help="auto (from the model id and head; the default), sequence_classification, "
                                      "qwen3_nemotron or llama_nemotron (DESIGN.md §3: how each published checkpoint "
                                      "reads its reward)")
    max_length: int | None = option(None, help="most tokens per input, int >= 8 (default: the backend's context)")
    truncation_side: str = option("left", choices=TRUNCATION_SIDES,
                                  help="drop the oldest conversation tokens (left, the default) or mark over-long "
                                       "inputs truncated (none)")
    strip_thinking: bool = option(True, flag=Flag("--keep-thinking", store=False,
                                                  help="do not strip a leading <think> block from responses"),
                                  help="remove a leading <think>…</think> block from each response (default on)")
    strip_history_reasoning: bool = option(True, flag=Flag("--history-reasoning", words={"strip": True, "keep": False}),
                                           help="remove <think> blocks from earlier assistant turns (default on)")

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> BTConfig:
        """The settings a model's record holds (``options`` of ``GET /v1/models``: the applied recipe, lengths and
        stripping policies).

        Raises:
            ConfigError: on an invalid entry (naming it).
        """
        return build(cls, {k: v for k, v in record.items() if k in {f.name for f in option_fields(cls)}})

    def __post_init__(self) -> None:
        check_choice("recipe", self.recipe, ("auto", *RECIPES))
        if self.max_length is not None:
            check_int("max_length", self.max_length, low=8)
        check_options(self)  # truncation_side and the stripping flags


def resolve_recipe(recipe: str, name: str, *, causal: bool) -> str:
    """The concrete recipe for ``recipe`` (``auto`` or one of :data:`RECIPES`).

    ``auto``: a model id naming a Nemotron reward model picks its recipe (``Qwen-3-Nemotron-…-Reward`` →
    ``qwen3_nemotron``, ``Llama-…-Nemotron-…-Reward`` → ``llama_nemotron``); otherwise a sequence
    classifier gets ``sequence_classification``. A causal LM needs ``llama_nemotron`` (named or explicit).

    Args:
        recipe: ``auto`` or a recipe name.
        name: model id or path (matched case-insensitively).
        causal: whether the model is a causal LM (no classification head).

    Raises:
        ConfigError: on an unknown recipe, a principle model (use :mod:`brrm.judges.principle`), or a causal
            LM under ``auto`` without a Nemotron reward id.
    """
    low = name.lower()
    if recipe not in ("auto", *RECIPES):
        raise ConfigError(f"recipe {recipe!r} is not valid; expected auto or one of {', '.join(RECIPES)}",
                          field="recipe")
    if "principle" in low or "genrm" in low:
        raise ConfigError(
            f"{name!r} is a principle/generative reward model; use brrm.judges.principle.PrincipleJudge"
        )
    if recipe != "auto":
        return recipe
    if "nemotron" in low and "reward" in low:
        if "qwen" in low:
            return "qwen3_nemotron"
        if "llama" in low:
            return "llama_nemotron"
    if causal:
        raise ConfigError(
            f"{name!r} is a causal LM; pass {{setting}} to read vocab logit 0 as the "
            "reward, or load a sequence-classification reward model", field="recipe", value="llama_nemotron"
        )
    return "sequence_classification"


@dataclass(frozen=True)
class Encoded:
    """One model input, or why there is none.

    Attributes:
        ids: token ids the model reads (after truncation); empty when ``status`` is not ok.
        response_start: index in ``ids`` where the protected part starts (assistant header, response,
            end-of-turn tokens); truncation never removes tokens at or after it. Found only when the input is
            over ``max_length`` (0 when nothing had to be cut).
        truncated_tokens: conversation tokens dropped to fit ``max_length``.
        status: ``ok``, ``empty``, ``truncated`` or ``invalid_input``.
        reason: why, when not ok.
        thinking_stripped: a leading ``<think>…</think>`` block was removed from the response.
    """

    ids: tuple[int, ...]
    response_start: int
    truncated_tokens: int = 0
    status: Status = Status.OK
    reason: str = ""
    thinking_stripped: bool = False


class BradleyTerryRewardModel:
    """A scalar Bradley–Terry reward model over any backend that can ``classify`` (a
    :class:`~brrm.types.ScalarRewardModel`).

    Args:
        backend: a backend holding the model: a one-label sequence classifier (``classify``), or a causal LM
            for ``llama_nemotron`` (``vocab_logit``).
        recipe: ``auto`` or one of :data:`RECIPES` (see :func:`resolve_recipe`).
        max_length: most tokens per input, int >= 8; default the backend's context window.
        truncation_side: one of :data:`TRUNCATION_SIDES`.
        strip_thinking: remove a leading ``<think>…</think>`` block from each response (recorded per result).
        strip_history_reasoning: remove ``<think>`` blocks from earlier assistant turns (recorded).

    Raises:
        ConfigError: on an invalid option, a tokenizer without a chat template, or a backend without the
            capability the recipe needs.
    """

    def __init__(self, backend: Backend, *, recipe: str = "auto", max_length: int | None = None,
                 truncation_side: str = "left", strip_thinking: bool = True,
                 strip_history_reasoning: bool = True) -> None:
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.model_id = backend.info.model
        caps = backend.capabilities
        self.recipe = resolve_recipe(recipe, self.model_id, causal=not caps.classify)
        needed = "vocab_logit" if self.recipe == "llama_nemotron" else "classify"
        if not (caps.vocab_logit if needed == "vocab_logit" else caps.classify):
            what = "a causal LM's vocabulary logit" if needed == "vocab_logit" else "a sequence-classification head"
            raise ConfigError(f"recipe {self.recipe!r} needs {what}, which this {backend.info.name} backend of "
                              f"{self.model_id!r} cannot run")
        given = BTConfig(self.recipe, max_length, truncation_side, strip_thinking, strip_history_reasoning)  # checked
        self.max_length = backend.max_context if max_length is None else max_length
        self.truncation_side, self.strip_thinking = given.truncation_side, given.strip_thinking
        self.strip_history_reasoning = given.strip_history_reasoning
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer of {self.model_id!r} has no chat template; reward models need one")
        self.encoder = encoder(self.tokenizer)
        self.bos_id = self.tokenizer.bos_token_id
        self.end_texts = end_texts(self.tokenizer, backend.end_of_turn_id)
        self.provenance = self._provenance()
        chat = text_hash(str(self.tokenizer.chat_template))
        self.info = JudgeInfo.of(backend, kind="bt", recipe=self.recipe, chat_template_hash=chat,
                                 template_hash=self.provenance.template_hash, default_strategy="scores",
                                 config=self.config(), record=dict(self.provenance.policies),
                                 chunk_size=max(caps.chunk_size, 64))

    def config(self) -> BTConfig:
        """This model's settings, resolved: its concrete recipe and the backend's context as ``max_length``."""
        return BTConfig(recipe=self.recipe, max_length=self.max_length, truncation_side=self.truncation_side,
                        strip_thinking=self.strip_thinking, strip_history_reasoning=self.strip_history_reasoning)

    @classmethod
    def from_config(cls, backend: Backend, config: BTConfig) -> BradleyTerryRewardModel:
        """The model with ``config``'s settings over ``backend`` (see the class for errors)."""
        return cls(backend, **{f.name: getattr(config, f.name) for f in option_fields(BTConfig)})

    def with_options(self, **options: object) -> BradleyTerryRewardModel:
        """This model with other :class:`BTConfig` settings on the same backend.

        Raises:
            ConfigError: on another option (naming the valid ones) or an invalid value.
        """
        current = vars(self.config())
        unknown = sorted(set(options) - set(current))
        if unknown:
            raise ConfigError(f"option {unknown[0]!r} cannot be varied on a Bradley–Terry model; valid: "
                              f"{', '.join(sorted(current))}")
        return BradleyTerryRewardModel.from_config(self.backend, build(BTConfig, {**current, **options}))

    @classmethod
    def from_model(cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, model_id: str = "",
                   token_budget: int = 16384, max_batch_size: int = 32, padding_side: str = "right",
                   bucketing: bool = True, **options: Any) -> BradleyTerryRewardModel:
        """Wrap an already loaded transformers model (tests, notebooks); see the class for ``options``."""
        from brrm.backends.transformers import TransformersBackend

        backend = TransformersBackend(model, tokenizer, model_id=model_id, batch_size=max_batch_size,
                                      classify_batch_size=max_batch_size, token_budget=token_budget,
                                      padding_side=padding_side, bucketing=bucketing)
        return cls(backend, **options)

    def _provenance(self) -> Provenance:
        policies = {
            "recipe": self.recipe,
            "strip_thinking": self.strip_thinking,
            "strip_history_reasoning": self.strip_history_reasoning,
            "truncation_side": self.truncation_side,
            "max_length": self.max_length,
            "head_dtype": "float32",
            **{k: v for k, v in self.backend.info.details.items() if k == "dtype"},
        }
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=1, max_total_tokens=max(2, self.max_length))
        template = str(self.tokenizer.chat_template)
        return Provenance.of(self.backend, template_hash=text_hash(template, self.recipe, NOTHINK_SUFFIX, EMPTY_THINK),
                             sampling=sampling, seed=0, decoding="score", policies=policies)

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    # ----------------------------------------------------------------------------------------- encoding
    def _messages(self, conversation: Conversation) -> list[dict[str, Any]]:
        strip = self.strip_history_reasoning
        messages = [{**m, "content": strip_reasoning(m["content"])[0]} if strip and m["role"] == "assistant" else m
                    for m in conversation.to_list()]
        if self.recipe == "qwen3_nemotron":
            last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
            messages[last_user] = {**messages[last_user],
                                   "content": [messages[last_user]["content"], Markup(NOTHINK_SUFFIX)]}
        return messages

    def encode(self, conversation: ConversationLike, response: str) -> Encoded:
        """The token ids the model reads for one (conversation, response), after the recipe and truncation.

        Args:
            conversation: a Conversation, prompt string or message list ending with a user (or tool) turn.
            response: the assistant response under judgment.

        Returns:
            The encoding; a chat template that fails on this conversation gives an ``invalid_input`` one.

        Raises:
            ConfigError: on an invalid conversation or a response that is not a string.
        """
        from brrm.errors import TemplateError

        conv = Conversation.coerce(conversation)
        if not isinstance(response, str):
            raise ConfigError(f"response must be a string, got {type(response).__name__}")
        text, stripped = strip_reasoning(response) if self.strip_thinking else (response, False)
        text = strip_end_tokens(text, self.end_texts)
        if is_blank(text):
            why = "response is empty" + (" after removing its leading <think> block" if stripped else "")
            return Encoded((), 0, status=Status.EMPTY, reason=why, thinking_stripped=stripped)
        content: Any = [Markup(EMPTY_THINK), text] if self.recipe == "qwen3_nemotron" else text
        messages = self._messages(conv)
        try:
            _, full = self.encoder.chat([*messages, {"role": "assistant", "content": content}],
                                        add_generation_prompt=False)
            # where the protected part starts matters only when the input must be cut
            prefix = self.encoder.chat(messages, add_generation_prompt=False)[1] if len(full) > self.max_length else []
        except (TemplateError, ConfigError) as exc:
            return Encoded((), 0, status=Status.INVALID_INPUT, reason=str(exc), thinking_stripped=stripped)
        start = common_prefix_length(prefix, full) if prefix else 0
        return self._fit(full, start, stripped)

    def _fit(self, ids: list[int], start: int, stripped: bool) -> Encoded:
        """Apply ``max_length``: drop the oldest conversation tokens (BOS kept), never the protected part."""
        limit = self.max_length
        if len(ids) <= limit:
            return Encoded(tuple(ids), start, thinking_stripped=stripped)
        if self.truncation_side == "none":
            return Encoded((), start, status=Status.TRUNCATED, thinking_stripped=stripped,
                           reason=f"input has {len(ids)} tokens, over max_length {limit} (truncation_side='none')")
        head = 1 if self.bos_id is not None and ids and ids[0] == self.bos_id and start > 0 else 0
        protected = len(ids) - start
        room = limit - head - protected
        if room < 0:
            return Encoded((), start, status=Status.TRUNCATED, thinking_stripped=stripped,
                           reason=f"the response with its assistant header and end-of-turn tokens has {protected} "
                           f"tokens, over max_length {limit}; a response is never cut")
        dropped = start - head - room
        kept = ids[:head] + ids[head + dropped:]
        return Encoded(tuple(kept), head + room, truncated_tokens=dropped, thinking_stripped=stripped)

    # ------------------------------------------------------------------------------------------ scoring
    def score(self, conversations: Sequence[ConversationLike], responses: Sequence[str], /, *,
              principles: str | Sequence[str] | None = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        """Score each (conversation, response); one :class:`ScalarReward` per item, in input order.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N); each ends with a user
                (or tool) turn — the response is passed separately.
            responses: the responses under judgment (N strings).
            principles: must be None (Bradley–Terry models take no principle).
            ids: optional record ids (N), copied into the results.

        Returns:
            N rewards (the head's raw float32 logit; compare only within one prompt). Empty responses are
            ``empty``; inputs that cannot fit are ``truncated``; a conversation the chat template rejects is
            ``invalid_input``; a failed or non-finite forward pass is ``backend_error`` (only its batch).

        Raises:
            ConfigError: before any model call, on mismatched lengths, a principle, an invalid conversation
                (e.g. one ending with an assistant turn) or a missing (None) response — naming the item.
        """
        if principles is not None:
            raise ConfigError("Bradley–Terry reward models take no principle; use {setting}", field="kind",
                              value="principle")
        n = check_same_length(conversations=conversations, responses=responses)
        if ids is not None:
            check_same_length(conversations=conversations, ids=ids)
        encoded = []
        for i in range(n):
            if responses[i] is None:
                raise ConfigError(f"responses[{i}] is missing (None): scalar scoring needs the assistant response "
                                  "to the conversation's last user turn")
            try:
                encoded.append(self.encode(conversations[i], responses[i]))
            except ConfigError as exc:
                raise ConfigError(f"item {i}: {exc}") from None
        live = [i for i, e in enumerate(encoded) if e.status is Status.OK]
        token_id = LLAMA_REWARD_TOKEN if self.recipe == "llama_nemotron" else None
        scores = self.backend.classify([encoded[i].ids for i in live], token_id=token_id) if live else []
        if len(scores) != len(live):
            raise RuntimeError(f"the {self.backend.info.name} backend returned {len(scores)} scores for {len(live)} "
                               "sequences (length mismatch: a backend bug, not an input error)")
        by_item = dict(zip(live, scores, strict=True))
        return [self._result(encoded[i], by_item.get(i), str(ids[i]) if ids is not None else "") for i in range(n)]

    def _result(self, enc: Encoded, score: Any, rid: str) -> ScalarReward:
        meta: dict[str, Any] = {
            "id": rid,
            "thinking_stripped": enc.thinking_stripped,
            "provenance": self.provenance,
            "truncated": enc.truncated_tokens > 0 or enc.status is Status.TRUNCATED,
            "truncated_tokens": enc.truncated_tokens,
        }
        if enc.status is not Status.OK:
            return ScalarReward.failed(enc.status, enc.reason, **meta)
        if score.error:
            return ScalarReward.failed(Status.BACKEND_ERROR, score.error, input_tokens=len(enc.ids), **meta)
        note = f"{enc.truncated_tokens} conversation tokens dropped from the left" if enc.truncated_tokens else ""
        return ScalarReward(score.value, Status.OK, note, input_tokens=len(enc.ids), **meta)

    @property
    def stats(self) -> dict[str, int]:
        """The backend's counters (classify batches, real and padded tokens, …)."""
        return self.backend.stats

    @property
    def padding_waste(self) -> float:
        """Fraction of the tokens run so far that were padding, in [0, 1]; NaN before any batch."""
        padded = self.backend.stats.get("classify_padded_tokens", 0)
        real = self.backend.stats.get("classify_real_tokens", 0)
        return (padded - real) / padded if padded else float("nan")
