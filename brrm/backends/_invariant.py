"""Batch-invariant forward passes for the transformers backend (a row's logits never depend on its batch).

Batching changes a row's floats in two places, even though every row is computed "independently":

* **Attention over padded keys.** Left padding (and the masked holes of a batch's KV cache) moves a row's
  real keys to other offsets; SDPA's CPU kernels block and vectorise the key axis, so the row's softmax
  sums in another order (about 1e-5 on the logits of SmolLM2-135M, measured).
* **Matrix products with few rows.** CPU BLAS takes a matrix-vector path for 1–3 rows, which sums in
  another order than its matrix-matrix path, and a multi-threaded product splits its rows between threads,
  so a row count like 6 on 2 threads hands one thread a 3-row block. With the row count a multiple of 4, a
  row's product is the same bits whatever the count (measured for the linear shapes of the embedded
  SmolLM2, 1 to 200 rows, 1 to 16 threads, MKL on x86-64). Decoding a lone pair runs 1-row products;
  decoding 8 runs 8-row ones.

:func:`make_batch_invariant` fixes both: attention runs row by row on exactly the row's real keys and
queries (the shapes a row gets when it runs alone), and every ``nn.Linear`` input is zero-padded to a
multiple of :data:`MIN_ROWS` rows. With it, ``brrm judge`` gives the same bytes at
``--batch-size 1`` and ``8`` (``tests/test_batch_invariance.py``). It is the CPU default; on a GPU, cuBLAS
and attention kernels choose their reduction splits by shape, so invariance there needs batch-invariant
kernels (for example vLLM's batch-invariant mode), and the backend leaves the model as it is.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

ATTENTION = "brrm_rowwise"
"""Name under which the row-wise attention is registered with transformers' ``AttentionInterface``."""
MIN_ROWS = 4
"""Row granularity of a linear layer's input: rows are zero-padded up to a multiple of it (at least one
multiple). Below four rows, and with several threads at row counts that split into blocks under four rows per
thread, CPU BLAS switches to a differently ordered kernel; measured on MKL sgemm with 1-16 threads, every row
of a multiple-of-four input equals that row computed alone."""


def rowwise_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                      scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """Causal attention computed one batch row at a time on the row's real keys and queries only.

    Args:
        module: the attention module (its ``num_key_value_groups`` is read for grouped-query attention).
        query: ``[B, H, q, D]``; key, value: ``[B, H_kv, k, D]`` (the new keys are the last ``q``).
        attention_mask: transformers' SDPA mask, bool ``[B, 1, q, k]`` (True = attend), or None when no
            position is padded (plain causal attention).
        dropout: must be 0 (inference only).
        scaling: softmax scale (default ``D ** -0.5``).

    Returns:
        ``([B, q, H, D] output, None)``; padded query positions get zeros (nothing reads them).

    Raises:
        ValueError: on dropout > 0 or a non-boolean mask (a programming error).
    """
    import torch
    import torch.nn.functional as F

    if dropout:
        raise ValueError("rowwise_attention is for inference: dropout must be 0")
    b, h, q, d = query.shape
    k = key.shape[2]
    groups = h // key.shape[1]
    out = query.new_zeros((b, q, h, d))
    spans = [(slice(None), slice(None))] * b if attention_mask is None else _row_spans(attention_mask, q, k)
    for i, span in enumerate(spans):
        if span is None:
            continue
        rows, keys = span
        qs = query[i, :, rows] if isinstance(rows, slice) else query[i].index_select(1, rows)
        ks, vs = ((key[i, :, keys], value[i, :, keys]) if isinstance(keys, slice)
                  else (key[i].index_select(1, keys), value[i].index_select(1, keys)))
        n, kn = qs.shape[1], ks.shape[1]
        causal = torch.ones((n, kn), dtype=torch.bool, device=query.device).tril(kn - n) if n > 1 else None
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=causal, scale=scaling, enable_gqa=groups > 1)
        out[i, rows] = o.transpose(0, 1)
    return out, None


_LAST_SPANS = threading.local()
"""Per-thread one-entry cache ``(weakref to mask, spans)``: every layer of a forward gets the same mask object. A
weak reference keeps no large prefill mask alive, and a dead one never matches a later mask; per thread, so two
models running forwards in two threads never read each other's spans."""


def _row_spans(attention_mask: Any, q: int, k: int) -> list[tuple[Any, Any] | None]:
    """Per batch row, (real query positions, real key positions) from the mask, or None for a row of padding.

    A contiguous run becomes a slice (a view, no copy); holes keep an index tensor. Computed once per forward.
    """
    import torch

    last = getattr(_LAST_SPANS, "entry", None)
    if last is not None and last[0]() is attention_mask:
        return last[1]
    if attention_mask.dtype != torch.bool:
        raise ValueError(f"rowwise_attention needs a boolean mask, got {attention_mask.dtype}")
    spans: list[tuple[Any, Any] | None] = []
    diagonal = attention_mask[:, 0, torch.arange(q), torch.arange(k - q, k)]  # a real query attends to its own key
    for i in range(attention_mask.shape[0]):
        qi = diagonal[i].nonzero().squeeze(1)
        if not len(qi):
            spans.append(None)
            continue
        ki = attention_mask[i, 0, int(qi[-1])].nonzero().squeeze(1)  # the last real query sees every real key
        spans.append((_span(qi), _span(ki)))
    _LAST_SPANS.entry = (weakref.ref(attention_mask), spans)
    return spans


def _span(index: Any) -> Any:
    """``index`` (sorted positions) as a slice when it is one contiguous run (a view, no copy), else itself."""
    first, last = int(index[0]), int(index[-1])
    return slice(first, last + 1) if last - first + 1 == len(index) else index


def _pad_rows(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    x = args[0]
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    padded = max(MIN_ROWS, -(-rows // MIN_ROWS) * MIN_ROWS)
    if padded == rows or rows == 0:
        module._brrm_shape = None
        return None
    module._brrm_shape = x.shape
    flat = x.reshape(rows, x.shape[-1])
    import torch

    return (torch.cat([flat, flat.new_zeros((padded - rows, x.shape[-1]))]), *args[1:])


def _unpad_rows(module: Any, args: tuple[Any, ...], output: Any) -> Any:
    shape = module._brrm_shape
    if shape is None:
        return None
    rows = shape.numel() // shape[-1]
    return output[:rows].reshape(*shape[:-1], output.shape[-1])


def make_batch_invariant(model: Any, *, required: bool = True) -> bool:
    """Make a causal LM's forward batch-invariant on CPU, in place (see the module docstring).

    Registers :func:`rowwise_attention` (with transformers' SDPA mask builder) and switches the model to it,
    and zero-pads every ``nn.Linear`` input to a multiple of :data:`MIN_ROWS` rows. Idempotent.

    Args:
        model: a transformers ``PreTrainedModel``.
        required: raise when the architecture cannot take a registered attention function; False returns
            False and leaves the model as it was (the backend then records ``batch_invariant: false``).

    Returns:
        True when the model is now batch-invariant.

    Raises:
        ConfigError: when ``required`` and the architecture does not take a registered attention function.
    """
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from brrm.errors import ConfigError

    if getattr(model, "_brrm_batch_invariant", False):
        return True
    AttentionInterface.register(ATTENTION, rowwise_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    try:
        model.set_attn_implementation(ATTENTION)
    except (ValueError, ImportError) as exc:
        if not required:
            return False
        raise ConfigError(f"batch_invariant: {type(model).__name__} cannot use a custom attention function "
                          f"({exc}); pass batch_invariant=False") from exc
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_pre_hook(_pad_rows)
            layer.register_forward_hook(_unpad_rows)
    model._brrm_batch_invariant = True
    return True
