"""Scalar heads on transformers: one float per token sequence, whatever the batch.

How a score is computed (the transformers backend's ``classify``):

* the backbone (``model.base_model``) runs with an explicit attention mask and position ids
  ``cumsum(mask) - 1``, so left or right padding and batch partners do not change a row; with the batch-invariant
  forward (the CPU default) not one bit: only real tokens are computed, each row-wise layer and the head in tiles
  fixed by the row (:mod:`brrm.backends.transformers.invariant`);
* the score is read at the last real token, found from the attention mask (never from a fixed index, so a
  tokenizer without a pad token is fine). A sequence-classification head reads where the model's own forward
  reads (transformers' ``…ForSequenceClassification``: the rightmost token that is not ``config.pad_token_id``):
  with pad == eos and a template that ends its turn with eos, that is the token before the trailing eos, so the
  score equals ``model(input_ids).logits[0][0]`` (to float32 rounding under the batch-invariant forward, whose
  tiles sum in another order than the stock forward); a sequence made only of pad ids is refused with a reason;
* the head — the one-label classification row (``model.score``) or row ``token_id`` of the LM head — is
  applied in float32 to the float32-cast hidden state; a NaN/inf result is that item's error, never a number;
* sequences are sorted by length into batches under a padded-token budget and results come back in input
  order (:func:`brrm.backends.bucketing.bucket_by_length`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from brrm.backends.base import Score
from brrm.backends.transformers.bucketing import bucket_by_length
from brrm.backends.transformers.tiles import _padded, with_layout
from brrm.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PADDING_SIDES = ("right", "left")


class HeadScorer:
    """Runs one-label heads over token sequences for a loaded transformers model.

    Args:
        model: a ``PreTrainedModel`` in eval mode (sequence classifier or causal LM).
        pad_id: any token id (rows are read through the mask, so its value never matters).
        token_budget: most padded tokens per forward batch, >= 1.
        max_batch_size: most rows per forward batch, >= 1.
        padding_side: ``right`` or ``left``; results do not depend on it (kept for tests and benchmarks).
        bucketing: sort by length into batches (True) or batch in input order (False, naive).
        invariant: the model was made batch-invariant
            (:func:`~brrm.backends.transformers.invariant.make_batch_invariant`): the backbone then runs with the
            batch's layout (padding is not computed) and the head in fixed-shape tiles, so a score is the same bits
            whichever sequences share its batch.

    Raises:
        ConfigError: on an invalid option.
    """

    def __init__(self, model: PreTrainedModel, *, pad_id: int, token_budget: int = 16384, max_batch_size: int = 32,
                 padding_side: str = "right", bucketing: bool = True, invariant: bool = False) -> None:
        from brrm.types import check_bool, check_choice, check_int

        self.model = model
        self.pad_id = pad_id
        self.token_budget = check_int("token_budget", token_budget, low=1)
        self.max_batch_size = check_int("max_batch_size", max_batch_size, low=1)
        self.padding_side = check_choice("padding_side", padding_side, PADDING_SIDES)
        self.bucketing = check_bool("bucketing", bucketing)
        self.invariant = check_bool("invariant", invariant)
        weight = model.get_input_embeddings().weight
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"input embeddings without a weight tensor: {type(weight).__name__}")
        self.device = weight.device
        self.stats = {"classify_batches": 0, "classify_real_tokens": 0, "classify_padded_tokens": 0}
        self._heads: dict[int | None, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def head(self, token_id: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """float32 ``[1, hidden]`` weights (and bias) of the one-label head or of LM-head row ``token_id``.

        Raises:
            ConfigError: when the model has no such head, or a classification head is not one label wide.
        """
        if token_id in self._heads:
            return self._heads[token_id]
        if token_id is not None:
            head = self.model.get_output_embeddings()
            if head is None:
                raise ConfigError("this model has no LM head; a vocabulary logit needs a causal LM")
            if not 0 <= token_id < head.weight.shape[0]:
                raise ConfigError(f"token_id {token_id} is outside the vocabulary (0..{head.weight.shape[0] - 1})")
            weight = head.weight[token_id:token_id + 1]
        else:
            head = getattr(self.model, "score", None)
            if head is None or not hasattr(head, "weight"):
                raise ConfigError(
                    f"{type(self.model).__name__} has no `score` head; supported are decoder-only sequence "
                    "classifiers (Llama, Qwen, Mistral, Gemma, …) with num_labels=1"
                )
            if head.weight.shape[0] != 1:
                raise ConfigError(
                    f"the classification head is {head.weight.shape[0]} labels wide (num_labels); a "
                    "Bradley–Terry reward is exactly one logit"
                )
            weight = head.weight
        bias = getattr(head, "bias", None)
        if bias is not None and token_id is not None:
            bias = bias[token_id:token_id + 1]
        self._heads[token_id] = (weight.detach().float(), bias[:1].detach().float() if bias is not None else None)
        return self._heads[token_id]

    def scores(self, sequences: Sequence[Sequence[int]], token_id: int | None) -> list[Score]:
        """One score per sequence, batched by length under the token budget, in input order.

        A batch that fails with a runtime error (out of memory, a device error) makes its items' scores
        errors; the other batches go on.

        Raises:
            ConfigError: on an empty sequence or a missing head.
        """
        if any(len(s) == 0 for s in sequences):
            raise ConfigError("classify needs non-empty token sequences")
        weight, bias = self.head(token_id)
        out: list[Score] = [Score.failed("not run")] * len(sequences)
        batches = bucket_by_length([len(s) for s in sequences], token_budget=self.token_budget,
                                   max_batch_size=self.max_batch_size, sort=self.bucketing)
        for batch in batches:
            try:
                values = self._batch([sequences[i] for i in batch], weight, bias, token_id is None)
            except RuntimeError as exc:  # OOM / device failures lose only this batch
                values = [Score.failed(f"{type(exc).__name__}: {exc}")] * len(batch)
            for i, v in zip(batch, values, strict=True):
                out[i] = v
        return out

    def _backbone(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states ``[B, T, H]``; under the batch's layout when invariant (only real
        tokens computed, each in tiles fixed by its own row)."""
        forward = self.model.base_model
        kwargs = {"input_ids": input_ids, "attention_mask": mask, "position_ids": positions, "use_cache": False}
        out = with_layout(forward, **kwargs) if self.invariant else forward(**kwargs)
        return out.last_hidden_state

    def _batch(self, seqs: list[Sequence[int]], weight: torch.Tensor, bias: torch.Tensor | None,
               classifier: bool = False) -> list[Score]:
        b, t = len(seqs), max(len(s) for s in seqs)
        input_ids = torch.full((b, t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, t), dtype=torch.long)
        for i, s in enumerate(seqs):
            cols = slice(0, len(s)) if self.padding_side == "right" else slice(t - len(s), t)
            input_ids[i, cols] = torch.tensor(list(s), dtype=torch.long)
            mask[i, cols] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        config_pad = getattr(getattr(self.model, "config", None), "pad_token_id", None) if classifier else None
        readable = mask if config_pad is None else mask * (input_ids != config_pad)
        last = (torch.arange(t, device=self.device) * readable).argmax(-1)  # rightmost readable token of each row
        unreadable = (readable.sum(-1) == 0).tolist()
        with torch.inference_mode():
            hidden = self._backbone(input_ids, mask, positions)
            h = hidden[torch.arange(b, device=self.device), last].float()  # [B, H] float32
            w, bb = weight.to(h.device), bias.to(h.device) if bias is not None else None
            rewards = _padded(lambda x: torch.nn.functional.linear(x, w, bb), h) if self.invariant \
                else torch.nn.functional.linear(h, w, bb)  # [B, 1]
        if rewards.shape != (b, 1):
            raise ConfigError(f"reward head returned shape {tuple(rewards.shape)}, expected ({b}, 1)")
        self.stats["classify_batches"] += 1
        self.stats["classify_real_tokens"] += int(mask.sum())
        self.stats["classify_padded_tokens"] += b * t
        return [Score.failed(f"every token of the sequence is the model's pad id {config_pad}: its own forward "
                             "has no token to read the score at") if bad else Score(float(v))
                for v, bad in zip(rewards[:, 0].tolist(), unreadable, strict=True)]
