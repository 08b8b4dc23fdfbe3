"""Bradley–Terry reward models: a scalar reward per (conversation, response) from one forward pass.

Recipes (model facts from ``DESIGN.md`` §3 and the model cards):

* ``sequence_classification`` — any ``AutoModelForSequenceClassification`` with one label; the chat
  template is applied as is; reward = ``logits[:, 0]`` at the last real token.
* ``qwen3_nemotron`` — nvidia/Qwen-3-Nemotron-32B-Reward: ``" /nothink"`` is appended to the last user turn
  and the response is prefixed with ``"<think>\\n\\n</think>\\n\\n"``; reward = ``logits[0][0]``.
* ``llama_nemotron`` — nvidia/Llama-3.1-Nemotron-70B-Reward-HF, Llama-3.3-Nemotron-70B-Reward(-Multilingual):
  an ``AutoModelForCausalLM``; plain user/assistant turns, no generation prompt; reward = vocab logit 0 at
  the last position (what the model card reads from the first generation step's scores).

How every recipe computes a reward, whatever the batch:

* tokens come from ``apply_chat_template(tokenize=True)``, so a template that writes BOS gets it once;
* the backbone runs with an explicit attention mask and position ids ``cumsum(mask) - 1``, so left or right
  padding and batch partners do not change a row; the score is read at the last real token, found from the
  attention mask (never from a fixed index or by searching for a pad id, so a tokenizer without a pad
  token, or with pad == eos, is fine);
* the head (one row of weights) is applied in float32 to the float32-cast hidden state; a NaN/inf result is
  a ``backend_error``, never a number;
* inputs are sorted by length into batches under a padded-token budget and results come back in input order;
* an input over ``max_length`` loses tokens from the start of the conversation (BOS kept), never from the
  assistant header, the response or its end-of-turn tokens; if those alone do not fit, the status is
  ``truncated`` with the reason.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from brrm.backends.base import common_prefix_length
from brrm.errors import ConfigError
from brrm.reward_models.batching import bucket_by_length
from brrm.templates import strip_reasoning, text_hash
from brrm.types import Conversation, Provenance, SamplingConfig, ScalarReward, Status, check_same_length

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

RECIPES = ("sequence_classification", "qwen3_nemotron", "llama_nemotron")
"""Reward recipes; ``auto`` picks one from the model id and class (see :func:`resolve_recipe`)."""

NOTHINK_SUFFIX = " /nothink"
"""Appended to the last user turn by the ``qwen3_nemotron`` recipe (Qwen-3-Nemotron-32B-Reward card)."""

EMPTY_THINK = "<think>\n\n</think>\n\n"
"""Prefixed to the response by the ``qwen3_nemotron`` recipe (Qwen-3-Nemotron-32B-Reward card)."""

TRUNCATION_SIDES = ("left", "none")
"""``left``: drop the oldest conversation tokens; ``none``: an over-long input is ``truncated``, unscored."""

PADDING_SIDES = ("right", "left")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")


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
        raise ConfigError(f"recipe {recipe!r} is not valid; expected auto or one of {', '.join(RECIPES)}")
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
            f"{name!r} is a causal LM; pass recipe='llama_nemotron' to read vocab logit 0 as the "
            "reward, or load a sequence-classification reward model"
        )
    return "sequence_classification"


@dataclass(frozen=True)
class Encoded:
    """One model input, or why there is none.

    Attributes:
        ids: token ids the model reads (after truncation); empty when ``status`` is not ok.
        response_start: index in ``ids`` where the protected part starts (assistant header, response,
            end-of-turn tokens); truncation never removes tokens at or after it.
        truncated_tokens: conversation tokens dropped to fit ``max_length``.
        status: ``ok``, ``empty`` or ``truncated``.
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
    """A scalar Bradley–Terry reward model on transformers (implements :class:`brrm.types.ScalarRewardModel`).

    Args:
        model: a loaded ``PreTrainedModel`` in eval mode: a sequence classifier with one label, or a causal
            LM for ``llama_nemotron``.
        tokenizer: its tokenizer, with a chat template.
        recipe: ``auto`` or one of :data:`RECIPES` (see :func:`resolve_recipe`).
        model_id: recorded in results; default the model's ``name_or_path``.
        max_length: most tokens per input, >= 8; default the model's ``max_position_embeddings``.
        truncation_side: one of :data:`TRUNCATION_SIDES`.
        strip_thinking: remove a leading ``<think>…</think>`` block from each response (recorded per result).
        token_budget: most padded tokens per forward batch, >= 1.
        max_batch_size: most rows per forward batch, >= 1.
        padding_side: ``right`` or ``left``; results do not depend on it (kept for tests and benchmarks).
        bucketing: sort by length into batches (True) or batch in input order (False, naive).

    Raises:
        ConfigError: on an invalid option, a tokenizer without a chat template, or a classification head
            that does not have exactly one output (a vector is not a reward).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        recipe: str = "auto",
        model_id: str = "",
        max_length: int | None = None,
        truncation_side: str = "left",
        strip_thinking: bool = True,
        token_budget: int = 16384,
        max_batch_size: int = 32,
        padding_side: str = "right",
        bucketing: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.model_id = model_id or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        causal = getattr(model, "score", None) is None and model.get_output_embeddings() is not None
        self.recipe = resolve_recipe(recipe, self.model_id, causal=causal)
        context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.max_length = context if max_length is None else max_length
        self.truncation_side = truncation_side
        self.strip_thinking = strip_thinking
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.padding_side = padding_side
        self.bucketing = bucketing
        self._validate()
        self._weight, self._bias = self._head()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0  # any id works: rows are read through the mask
        self.bos_id = tokenizer.bos_token_id
        self.device = model.get_input_embeddings().weight.device
        self.stats = {"batches": 0, "real_tokens": 0, "padded_tokens": 0}
        self.provenance = self._provenance()

    def _validate(self) -> None:
        if not isinstance(self.max_length, int) or isinstance(self.max_length, bool) or self.max_length < 8:
            raise ConfigError(f"max_length must be an int >= 8, got {self.max_length!r}")
        if self.truncation_side not in TRUNCATION_SIDES:
            raise ConfigError(
                f"truncation_side {self.truncation_side!r} is not valid; expected one of "
                f"{', '.join(TRUNCATION_SIDES)} (the response end is never cut)"
            )
        if self.padding_side not in PADDING_SIDES:
            raise ConfigError(f"padding_side {self.padding_side!r} is not valid; expected right or left")
        for name in ("token_budget", "max_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer of {self.model_id!r} has no chat template; reward models need one")

    def _head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The reward row of the output head as float32 ``[1, hidden]`` weights (and bias, if any)."""
        if self.recipe == "llama_nemotron":
            head = self.model.get_output_embeddings()
            if head is None:
                raise ConfigError(
                    f"{self.model_id!r} has no output embeddings; llama_nemotron needs a causal LM"
                )
            weight = head.weight[:1]
        else:
            head = getattr(self.model, "score", None)
            if head is None or not hasattr(head, "weight"):
                raise ConfigError(
                    f"{type(self.model).__name__} has no `score` head; supported are decoder-only "
                    "sequence classifiers (Llama, Qwen, Mistral, Gemma, …) with num_labels=1"
                )
            if head.weight.shape[0] != 1:
                raise ConfigError(
                    f"{self.model_id!r} has a {head.weight.shape[0]}-wide classification head "
                    "(num_labels); a Bradley–Terry reward is exactly one logit"
                )
            weight = head.weight
        bias = getattr(head, "bias", None)
        return weight.detach().float(), (bias[:1].detach().float() if bias is not None else None)

    def _provenance(self) -> Provenance:
        template = str(self.tokenizer.chat_template)
        policies = {
            "recipe": self.recipe,
            "strip_thinking": self.strip_thinking,
            "truncation_side": self.truncation_side,
            "max_length": self.max_length,
            "head_dtype": "float32",
            "dtype": str(self.model.dtype).replace("torch.", ""),
        }
        sampling = SamplingConfig(
            temperature=0.0, max_new_tokens_per_turn=1, max_total_tokens=max(2, self.max_length)
        )
        return Provenance(
            model=self.model_id,
            backend="transformers",
            template_hash=text_hash(template, self.recipe, NOTHINK_SUFFIX, EMPTY_THINK),
            sampling=sampling,
            seed=0,
            decoding="score",
            policies=policies,
        )

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        *,
        recipe: str = "auto",
        dtype: str = "auto",
        device: str = "auto",
        max_length: int | None = None,
        truncation_side: str = "left",
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> BradleyTerryRewardModel:
        """Load a reward model by hub id or local directory.

        Args:
            model_id: e.g. ``nvidia/Qwen-3-Nemotron-32B-Reward`` or a local directory.
            recipe: ``auto`` or one of :data:`RECIPES`; decides the auto class (causal LM for
                ``llama_nemotron``, sequence classification otherwise).
            dtype: ``auto`` (bf16 on GPU, fp32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
            device: ``auto`` (``device_map="auto"`` when CUDA is available, else CPU), ``cpu`` or ``cuda``.
            max_length, truncation_side: see the class.
            **kwargs: further constructor options (token_budget, max_batch_size, strip_thinking, …).

        Raises:
            ConfigError: on an unknown dtype, device or recipe.
        """
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )

        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} is not valid; expected one of {', '.join(DTYPES)}")
        if device not in DEVICES:
            raise ConfigError(f"device {device!r} is not valid; expected one of {', '.join(DEVICES)}")
        config = AutoConfig.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        archs = " ".join(getattr(config, "architectures", None) or [])
        causal = "ForSequenceClassification" not in archs and "ForCausalLM" in archs
        resolved = resolve_recipe(recipe, model_id, causal=causal)
        cuda = torch.cuda.is_available()
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        torch_dtype = dtypes.get(dtype) or (torch.bfloat16 if cuda and device != "cpu" else torch.float32)
        device_map = "auto" if device == "auto" and cuda else ("cuda" if device == "cuda" else "cpu")
        auto_cls = (
            AutoModelForCausalLM if resolved == "llama_nemotron" else AutoModelForSequenceClassification
        )
        model = auto_cls.from_pretrained(
            model_id, dtype=torch_dtype, device_map=device_map, trust_remote_code=trust_remote_code
        )
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        return cls(
            model,
            tokenizer,
            recipe=resolved,
            model_id=model_id,
            max_length=max_length,
            truncation_side=truncation_side,
            **kwargs,
        )

    # ----------------------------------------------------------------------------------------- encoding
    def _template(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=generation_prompt, return_dict=False
        )
        return [int(t) for t in ids]

    def _messages(self, conversation: Conversation) -> list[dict[str, Any]]:
        messages = conversation.to_list()
        if self.recipe == "qwen3_nemotron":
            last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
            messages[last_user] = {
                **messages[last_user],
                "content": messages[last_user]["content"] + NOTHINK_SUFFIX,
            }
        return messages

    def encode(self, conversation: Any, response: str) -> Encoded:
        """The token ids the model reads for one (conversation, response), after the recipe and truncation.

        Args:
            conversation: a Conversation, prompt string or message list ending with a user (or tool) turn.
            response: the assistant response under judgment.

        Raises:
            ConfigError: on an invalid conversation or a response that is not a string.
        """
        conv = Conversation.coerce(conversation)
        if not isinstance(response, str):
            raise ConfigError(f"response must be a string, got {type(response).__name__}")
        text, stripped = strip_reasoning(response) if self.strip_thinking else (response, False)
        if not text.strip():
            why = "response is empty" + (" after removing its leading <think> block" if stripped else "")
            return Encoded((), 0, status=Status.EMPTY, reason=why, thinking_stripped=stripped)
        if self.recipe == "qwen3_nemotron":
            text = EMPTY_THINK + text
        messages = self._messages(conv)
        full = self._template([*messages, {"role": "assistant", "content": text}], generation_prompt=False)
        start = common_prefix_length(self._template(messages, generation_prompt=False), full)
        return self._fit(full, start, stripped)

    def _fit(self, ids: list[int], start: int, stripped: bool) -> Encoded:
        """Apply ``max_length``: drop the oldest conversation tokens (BOS kept), never the protected part."""
        limit = self.max_length
        if len(ids) <= limit:
            return Encoded(tuple(ids), start, thinking_stripped=stripped)
        if self.truncation_side == "none":
            return Encoded(
                (),
                start,
                status=Status.TRUNCATED,
                thinking_stripped=stripped,
                reason=f"input has {len(ids)} tokens, over max_length {limit} (truncation_side='none')",
            )
        head = 1 if self.bos_id is not None and ids and ids[0] == self.bos_id and start > 0 else 0
        protected = len(ids) - start
        room = limit - head - protected
        if room < 0:
            return Encoded(
                (),
                start,
                status=Status.TRUNCATED,
                thinking_stripped=stripped,
                reason=f"the response with its assistant header and end-of-turn tokens has {protected} "
                f"tokens, over max_length {limit}; a response is never cut",
            )
        dropped = start - head - room
        kept = ids[:head] + ids[head + dropped :]
        return Encoded(tuple(kept), head + room, truncated_tokens=dropped, thinking_stripped=stripped)

    # ------------------------------------------------------------------------------------------ scoring
    def score(
        self,
        conversations: Sequence[Any],
        responses: Sequence[str],
        /,
        *,
        principle: str | Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[ScalarReward]:
        """Score each (conversation, response); one :class:`ScalarReward` per item, in input order.

        Args:
            conversations: Conversation objects, prompt strings or message lists (N); each ends with a user
                (or tool) turn — the response is passed separately.
            responses: the responses under judgment (N strings).
            principle: must be None (Bradley–Terry models take no principle).
            ids: optional record ids (N), copied into the results.

        Returns:
            N rewards. Empty responses are ``empty``; inputs that cannot fit are ``truncated``; a failed or
            non-finite forward pass is ``backend_error`` (only its batch is affected).

        Raises:
            ConfigError: before any model call, on mismatched lengths, a principle, an invalid conversation
                (e.g. one ending with an assistant turn) or a missing (None) response — naming the item.
        """
        if principle is not None:
            raise ConfigError("Bradley–Terry reward models take no principle; use brrm.judges.principle")
        n = check_same_length(conversations=conversations, responses=responses)
        if ids is not None:
            check_same_length(conversations=conversations, ids=ids)
        encoded = []
        for i in range(n):
            if responses[i] is None:
                raise ConfigError(
                    f"responses[{i}] is missing (None): scalar scoring needs the assistant response "
                    "to the conversation's last user turn"
                )
            try:
                encoded.append(self.encode(conversations[i], responses[i]))
            except ConfigError as exc:
                raise ConfigError(f"item {i}: {exc}") from None
        live = [i for i, e in enumerate(encoded) if e.status is Status.OK]
        values = self.forward([encoded[i].ids for i in live])
        results: dict[int, float | str] = dict(zip(live, values, strict=True))
        return [self._result(encoded[i], results.get(i), ids[i] if ids is not None else "") for i in range(n)]

    def score_one(self, conversation: Any, response: str) -> ScalarReward:
        """Score a single (conversation, response); see :meth:`score`."""
        return self.score([conversation], [response])[0]

    def _result(self, enc: Encoded, value: float | str | None, rid: str) -> ScalarReward:
        meta: dict[str, Any] = {
            "id": str(rid),
            "thinking_stripped": enc.thinking_stripped,
            "provenance": self.provenance,
            "truncated": enc.truncated_tokens > 0 or enc.status is Status.TRUNCATED,
            "truncated_tokens": enc.truncated_tokens,
        }
        if enc.status is not Status.OK:
            return ScalarReward.failed(enc.status, enc.reason, **meta)
        if isinstance(value, str) or value is None:
            return ScalarReward.failed(Status.BACKEND_ERROR, str(value), input_tokens=len(enc.ids), **meta)
        note = (
            f"{enc.truncated_tokens} conversation tokens dropped from the left"
            if enc.truncated_tokens
            else ""
        )
        return ScalarReward(value, Status.OK, note, input_tokens=len(enc.ids), **meta)

    def forward(self, sequences: Sequence[Sequence[int]]) -> list[float | str]:
        """Rewards of token sequences, batched by length under the token budget, in input order.

        Returns:
            Per sequence, the float32 reward as a Python float, or an error string (an exception in its
            batch, or a non-finite reward).
        """
        out: list[float | str] = [""] * len(sequences)
        batches = bucket_by_length(
            [len(s) for s in sequences],
            token_budget=self.token_budget,
            max_batch_size=self.max_batch_size,
            sort=self.bucketing,
        )
        for batch in batches:
            try:
                values: list[float | str] = list(self._forward_batch([sequences[i] for i in batch]))
            except Exception as exc:  # one failing batch must not lose the others
                values = [f"{type(exc).__name__}: {exc}"] * len(batch)
            for i, v in zip(batch, values, strict=True):
                out[i] = v
        return out

    def _forward_batch(self, seqs: list[Sequence[int]]) -> list[float | str]:
        b, t = len(seqs), max(len(s) for s in seqs)
        input_ids = torch.full((b, t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, t), dtype=torch.long)
        for i, s in enumerate(seqs):
            cols = slice(0, len(s)) if self.padding_side == "right" else slice(t - len(s), t)
            input_ids[i, cols] = torch.tensor(list(s), dtype=torch.long)
            mask[i, cols] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        last = (torch.arange(t, device=self.device) * mask).argmax(-1)  # rightmost real token of each row
        with torch.inference_mode():
            hidden = self.model.base_model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False
            ).last_hidden_state
            h = hidden[torch.arange(b, device=self.device), last].float()  # [B, H] float32
            weight = self._weight.to(h.device)
            bias = self._bias.to(h.device) if self._bias is not None else None
            rewards = torch.nn.functional.linear(h, weight, bias)  # [B, 1] float32
        if rewards.shape != (b, 1):
            raise ConfigError(f"reward head returned shape {tuple(rewards.shape)}, expected ({b}, 1)")
        self.stats["batches"] += 1
        self.stats["real_tokens"] += int(mask.sum())
        self.stats["padded_tokens"] += b * t
        return [
            v if math.isfinite(v) else f"non-finite reward ({v}) from the score head"
            for v in rewards[:, 0].tolist()
        ]

    @property
    def padding_waste(self) -> float:
        """Fraction of the tokens run so far that were padding, in [0, 1]; NaN before any batch."""
        padded = self.stats["padded_tokens"]
        return (padded - self.stats["real_tokens"]) / padded if padded else math.nan
