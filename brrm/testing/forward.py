"""One left-padded forward pass, as the transformers backend's decoder runs it: for tests and benchmarks that compare
a row's logits alone and in a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel


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
