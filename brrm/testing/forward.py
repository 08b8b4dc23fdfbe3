"""One forward pass of a batch, for tests and benchmarks that compare a row's logits alone and in a batch:
:func:`slot_forward` as the transformers backend's decoder runs it (every row in a slot of its own), and
:func:`left_padded_forward` over one left-padded ``DynamicCache`` with a 2D mask (the layout of a stock
``model.generate``, and of a sequence classifier's batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

    from brrm.backends.transformers.slots import SlotCache, Step


def left_padded_forward(model: PreTrainedModel, feeds: Sequence[Sequence[int]], past: Cache | None = None,
                        past_mask: torch.Tensor | None = None, *,
                        logits_to_keep: int = 1) -> tuple[torch.Tensor, Cache, torch.Tensor]:
    """Feed each row its tokens, left-padded to the longest (mask 0 on padding, positions counted over real tokens).

    Args:
        model: a causal LM (``transformers``).
        feeds: B token-id lists (>= 1 token each): a prompt, or the tokens of one decoding step.
        past, past_mask: the cache and ``[B, L]`` mask of the previous call (None for a prefill).
        logits_to_keep: as ``transformers``' argument (1: the last position only; 0: every position).

    Returns:
        (float logits of each row's last position ``[B, V]``, the cache, the full mask ``[B, L + T]``).
    """
    n = max(len(f) for f in feeds)
    ids = torch.zeros((len(feeds), n), dtype=torch.long)
    mask = torch.zeros((len(feeds), n), dtype=torch.long)
    for i, f in enumerate(feeds):
        ids[i, n - len(f):] = torch.tensor(list(f))
        mask[i, n - len(f):] = 1
    full = mask if past_mask is None else torch.cat([past_mask, mask], dim=1)
    pos = (full.cumsum(-1) - 1).clamp(min=0)[:, -n:]
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=full, position_ids=pos, past_key_values=past, use_cache=True,
                    logits_to_keep=logits_to_keep)
    return out.logits[:, -1], out.past_key_values, full


def step_forward(model: PreTrainedModel, cache: SlotCache, step: Step,
                 feeds: Sequence[Sequence[int]]) -> torch.Tensor:
    """One forward of ``step`` (its rows' new ids ``feeds``) through the transformers backend's own decoder
    forward (:meth:`brrm.backends.transformers.decode.Decoder.forward`), in inference mode as the backend runs it.

    Returns:
        float logits of each row's last position ``[step.rows, V]``.
    """
    from brrm.backends.transformers.decode import Decoder, mask_for
    from brrm.backends.transformers.rows import DecodeContext

    context = DecodeContext(model, None, 0, frozenset(), True, {"forward_calls": 0}, mask_for(model))
    with torch.inference_mode():
        decoder = Decoder(context, temperature=0.0, top_p=1.0, keep_kv=False)
        return decoder.forward(cache, step, [list(f) for f in feeds])


def slot_forward(model: PreTrainedModel, feeds: Sequence[Sequence[int]], cache: SlotCache | None = None,
                 starts: Sequence[int] | None = None) -> tuple[torch.Tensor, SlotCache, tuple[int, ...]]:
    """One forward exactly as the transformers backend's decoder runs it: row ``i`` in slot ``i`` of a
    :class:`~brrm.backends.transformers.slots.SlotCache`, its tokens left-padded to the longest, at positions
    ``starts[i], starts[i] + 1, …`` (:func:`step_forward`).

    Args:
        model: a causal LM (``transformers``).
        feeds: B token-id lists (>= 1 token each): a prompt, or the tokens of one decoding step.
        cache, starts: the cache and per-row lengths the previous call returned (None for a prefill).

    Returns:
        (float logits of each row's last position ``[B, V]``, the cache, each row's length after the call).
    """
    from brrm.backends.transformers.slots import SlotCache, Step

    before = tuple(starts) if starts is not None else (0,) * len(feeds)
    after = tuple(s + len(f) for s, f in zip(before, feeds, strict=True))
    if cache is None:
        cache = SlotCache(model.config, len(feeds), max(after))
    step = Step(0, before, tuple(len(f) for f in feeds), max(len(f) for f in feeds))
    return step_forward(model, cache, step, feeds), cache, after
