"""Token bitmasks of a constraint's grammar: allocated, filled by an outlines-core ``Guide`` and applied to logits.

The layout is outlines-core's (``Guide.write_mask_into``): an int32 ``[rows, ceil(vocab / 32)]`` tensor in which bit
``b`` of word ``w`` is set when token ``32 * w + b`` is allowed. ``outlines_core.kernels.torch`` ships the same
three operations, but importing it wraps its kernel in ``torch.compile`` at import time, which loads torch's
inductor: about 1.5 s of every process that decodes under a grammar (the CLI, each server, each Ray actor), measured
with ``python -X importtime`` on a 2-core box, for a kernel brrm runs eagerly (the CLI sets
``TORCH_COMPILE_DISABLE``) and that ``brrm.load`` in a user's process would otherwise compile with inductor on its
first masked step (3.8 s, and 0.8 s again for each new row count, timed in a fresh process). These are the same
operations in eager torch: a mask is exact (each logit kept or set to ``-inf``), so the choice is the same bits
either way.
"""

from __future__ import annotations

import functools

import torch

WORD_BITS = 32
"""Tokens per int32 word of a bitmask."""


@functools.cache
def _shifts(device: torch.device) -> torch.Tensor:
    """``arange(32)`` as int32 on ``device``: a word's bit positions (made once per device, not per step)."""
    return torch.arange(WORD_BITS, dtype=torch.int32, device=device)


def allocate(vocab_size: int) -> torch.Tensor:
    """A one-row bitmask for ``vocab_size`` tokens, int32 ``[1, ceil(vocab_size / 32)]``, every token allowed."""
    return torch.full((1, -(-vocab_size // WORD_BITS)), -1, dtype=torch.int32)


def fill(guide: object, mask: torch.Tensor) -> None:
    """Write the tokens ``guide`` (an outlines-core ``Guide``) allows next into ``mask``, int32 ``[1, words]``,
    contiguous, on the CPU (the guide writes through the data pointer).

    Raises:
        ValueError: for a mask of another dtype, shape, layout or device (a programming error).
    """
    if mask.dtype != torch.int32 or mask.dim() != 2 or mask.shape[0] != 1 or not mask.is_contiguous() \
            or mask.device.type != "cpu":
        raise ValueError(f"a guide writes one contiguous int32 CPU row [1, words], not {mask.dtype} "
                         f"{tuple(mask.shape)} on {mask.device}")
    guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())  # type: ignore[attr-defined]


def apply(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """Set every logit the bitmask does not allow to ``-inf``, in place.

    Args:
        logits: float ``[rows, vocab]`` on any device; tokens past ``32 * words`` are disallowed.
        mask: int32 ``[rows, words]`` (moved to ``logits``' device).

    Raises:
        ValueError: for shapes that do not match (a programming error).
    """
    if mask.dtype != torch.int32 or mask.dim() != 2 or logits.dim() != 2 or mask.shape[0] != logits.shape[0]:
        raise ValueError(f"a bitmask int32 [rows, words] for logits [rows, vocab], not {mask.dtype} "
                         f"{tuple(mask.shape)} for {tuple(logits.shape)}")
    mask = mask.to(logits.device)  # blocking: the caller refills its CPU mask for the next row right after
    logits[:, WORD_BITS * mask.shape[1]:] = float("-inf")
    bits = (mask.unsqueeze(-1) >> _shifts(mask.device)) & 1
    allowed = bits.bool().view(mask.shape[0], -1).narrow(1, 0, min(logits.shape[1], WORD_BITS * mask.shape[1]))
    logits[:, :allowed.shape[1]].masked_fill_(~allowed, float("-inf"))
