"""Batch-invariant forward passes for the transformers backend (a row's logits never depend on its batch).

Batching changes a row's floats even though every row is computed "independently", because CPU kernels pick
their code path and their reduction split from the shape of the whole call: SDPA blocks and vectorises the key
axis (left padding moves a row's keys), BLAS takes other kernels and thread splits for other row counts, and
ATen's elementwise loops run vectorised or scalar code depending on an element's offset in the flattened tensor
(``cos``/``sin`` of the rotary embedding, ``silu``). Padding the row count to a multiple of 4 (the rule before
issue 19) was measured on one model's shapes and one BLAS, and failed on others.

:func:`make_batch_invariant` removes the dependence by construction: every kernel a row's computation goes
through is called with one fixed shape, layout and alignment, whatever batch the row runs in.

* **Attention** runs row by row on exactly the row's real queries and keys (:func:`rowwise_attention`): the
  shapes the row has when it runs alone. In the backend's decoder each row's keys are one contiguous run of its
  own slot (:mod:`brrm.backends.transformers.slots`), read as a view, and the forward's
  :class:`~brrm.backends.transformers.slots.Step` says which queries and keys are real; a forward over a 2D
  mask (a sequence classifier's batch, ``model.generate``) splits its rows from the mask once per forward. A
  decoding row (one query) takes three calls of its own shapes (scores, softmax, values) instead of SDPA, whose
  per-call setup was most of a decode step's attention time (55-500 us per row vs 23-90 us, measured on the tiny
  model, SmolLM2 and Qwen3-0.6B shapes); rows with several queries (prompts, forced markers) take scores, a
  masked softmax and values in blocks of queries fixed by the row's own shapes (:func:`_prompt_attention`).
  (All rows at once, with keys gathered into fixed 128-key chunks, was built and measured before the slot cache:
  3-4x slower on CPU, because each step then copied every row's keys out of the batch's padded layout, per
  layer.)
* **Row-wise layers** (every ``nn.Linear`` including the head and tied embeddings, RMS/layer norms, position-wise
  MLPs, so their ``silu`` too) run only on tiles of a fixed shape (:mod:`brrm.backends.transformers.tiles`): a row
  that feeds several tokens (a prompt, forced markers) puts its last tokens in 256-token tiles of its own and its
  first ones (under 256) in 32-token tiles shared with the other such rows; rows decoding one token share 8-token
  tiles; padding positions are not computed.
* **Rotary cos/sin** come from a per-position table filled in fixed blocks
  (:class:`~brrm.backends.transformers.tiles.RotaryTable`).
* What is left is exact per element (embedding lookup, residual adds, the rotary multiply-adds: one correctly
  rounded operation each, in vectorised and scalar code alike).

What this rests on, and what it does not promise:

* A kernel called with the same shape, strides, alignment and thread count runs the same operations in the same
  order (true of MKL's GEMM and ATen's CPU loops: no atomics, no data-dependent branches), and an output row of a
  row-wise kernel depends on its own input row only. Both are properties of the kernels, not of any size.
* In a shared tile (8 decoding tokens, or 32 tokens of several rows' prompts and forced markers) a token's place
  depends on its neighbours; blocked GEMMs reduce every row of a call over the inner dimension in the same blocks,
  so the place does not change the bits. This one is checked, not constructed: ``tests/test_invariance_matrix.py``
  runs three model shapes at 1, 2 and 4 threads and batch sizes 1, 3, 8 and 16, with rows at every place of a
  decode tile and prompts at many offsets of the shared prompt tiles. Likewise a row's keys are views into its
  slot: each head's ``[n, D]`` matrix is laid out as when the row runs alone (rows ``D`` floats apart, 64-byte
  aligned for ``D >= 16``), only the distance between heads (the slot's capacity) differs, and a batched matmul
  computes each head's product on its own.
* Across thread counts nothing is promised: a GEMM of one shape may split its work differently on 2 threads than
  on 1, so results at one thread count may differ from those at another in the last bits. At any one thread count
  results do not depend on the batch.
* Architectures it cannot reproduce are refused (:func:`_unsupported`); layers it does not recognise as row-wise
  (say, a mixture-of-experts router) still run on the whole batch.

It is the CPU default. On a GPU, cuBLAS and attention kernels choose their reduction splits by shape, so
invariance there needs batch-invariant kernels (vLLM's batch-invariant mode, ``batch_invariant=True`` on the vLLM
backend), and this backend leaves the model as it is.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from brrm.backends.transformers.slots import Step, current
from brrm.backends.transformers.tiles import RotaryTable, _padded, with_layout

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ATTENTION = "brrm_rowwise"
"""Name under which the row-wise attention is registered with transformers' ``AttentionInterface``."""


def _decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """One decoding row's attention: its one query over its real keys, in three calls of the row's own shapes.

    Args:
        query: ``[H, D]``; key, value: ``[H_kv, n, D]`` (views into the batch's cache: the row's real keys).
        scale: softmax scale.

    Returns:
        ``[H, D]``. Equal to SDPA's value up to rounding, at a fraction of its per-call cost (no kernel setup,
        no key blocking): ``[H_kv, G, D] x [H_kv, D, n]`` scores, a softmax over ``n``, ``[H_kv, G, n] x
        [H_kv, n, D]`` values.
    """
    h, d = query.shape
    hkv = key.shape[0]
    scores = torch.bmm((query * scale).view(hkv, h // hkv, d), key.transpose(1, 2))
    return torch.bmm(scores.softmax(-1), value).view(h, d)


def rowwise_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: object) -> tuple[torch.Tensor, None]:
    """Causal attention computed one batch row at a time on the row's real keys and queries only: a row with one
    real query (decoding) by :func:`_decode_attention`, a row with several by :func:`_prompt_attention`.

    Args:
        module: the attention module (unused: grouped-query attention is read from the shapes).
        query: ``[B, H, q, D]``; key, value: ``[B, H_kv, k, D]`` (the new keys are the last ``q``).
        attention_mask: transformers' SDPA mask, bool ``[B, 1, q, k]`` (True = attend), or None when no
            position is padded (plain causal attention).
        dropout: must be 0 (inference only).
        scaling: softmax scale (default ``D ** -0.5``).

    Returns:
        ``([B, q, H, D] output, None)``; padded query positions get zeros (nothing reads them).

    Raises:
        ValueError: on dropout > 0, a non-boolean mask, or a sliding window, softcap or sinks (programming
            errors: :func:`make_batch_invariant` refuses such models).
    """
    if dropout:
        raise ValueError("rowwise_attention is for inference: dropout must be 0")
    if kwargs.get("sliding_window") or kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise ValueError("rowwise_attention is plain causal attention (no sliding window, softcap or sinks)")
    b, h, q, d = query.shape
    k = key.shape[2]
    scale = float(scaling) if scaling is not None else d ** -0.5
    step = current()
    if step is not None:
        return _slot_attention(query, key, value, step, scale), None
    out = query.new_zeros((b, q, h, d))
    plan = _forward_plan(attention_mask, b, q, k)
    if plan.decode:
        decoding = [i for i, _, _ in plan.decode]
        positions = [p for _, p, _ in plan.decode]
        outs = [_decode_attention(query[i, :, p], key[i, :, keys], value[i, :, keys], scale)
                if isinstance(keys, slice) else
                _decode_attention(query[i, :, p], key[i].index_select(1, keys), value[i].index_select(1, keys), scale)
                for i, p, keys in plan.decode]
        out[decoding, positions] = torch.stack(outs)
    for i, span in plan.spans:
        rows, keys = span
        qs = query[i, :, rows] if isinstance(rows, slice) else query[i].index_select(1, rows)
        ks, vs = ((key[i, :, keys], value[i, :, keys]) if isinstance(keys, slice)
                  else (key[i].index_select(1, keys), value[i].index_select(1, keys)))
        out[i, rows] = _prompt_attention(qs, ks, vs, scale).transpose(0, 1)
    return out, None


def _slot_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, step: Step,
                    scale: float) -> torch.Tensor:
    """:func:`rowwise_attention` over slot rows (:mod:`brrm.backends.transformers.slots`): row ``b``'s real queries
    are its last ``step.news[b]``, its keys the first ``starts[b] + news[b]`` of its slot (a view: a row's keys are
    one contiguous run, laid out as when it runs alone). Returns ``[B, q, H, D]``; padded queries get zeros."""
    b, h, q, d = query.shape
    ones = [i for i, n in enumerate(step.news) if n == 1]
    if q == 1:
        return _slot_decode(query, key, value, step, ones, scale).view(b, 1, h, d)
    out = query.new_zeros((b, q, h, d))
    if ones:
        out[ones, q - 1] = _slot_decode(query, key, value, step, ones, scale)
    for i, (start, n) in enumerate(zip(step.starts, step.news, strict=True)):
        if n > 1:
            out[i, q - n:] = _prompt_attention(query[i, :, q - n:], key[i, :, :start + n], value[i, :, :start + n],
                                               scale).transpose(0, 1)
    return out


def _slot_decode(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, step: Step, rows: list[int],
                 scale: float) -> torch.Tensor:
    """The decoding ``rows``' attention (one query each, the last position): per row, ``[H_kv, G, D] x [H_kv, D, n]``
    scores over its own ``n`` keys (views of its slot), a softmax over ``n`` and ``[H_kv, G, n] x [H_kv, n, D]``
    values: the calls and shapes of the row alone, written into one ``[len(rows), H, D]`` output. (The queries are
    scaled for all rows in one call: a product is rounded once, so it is the same bits in any call.)"""
    b, h, _, d = query.shape
    hkv = key.shape[1]
    scaled = (query[:, :, -1] * scale).view(b, hkv, h // hkv, d)
    keys_t = key.transpose(2, 3)
    out = query.new_empty((len(rows), hkv, h // hkv, d))
    for j, i in enumerate(rows):
        n = step.starts[i] + 1
        torch.bmm(torch.bmm(scaled[i], keys_t[i, :, :, :n]).softmax(-1), value[i, :, :n], out=out[j])
    return out.view(len(rows), h, d)


def _prompt_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """One row's causal attention for its ``n`` new queries ``[H, n, D]`` over its ``k`` keys ``[H_kv, k, D]`` (the
    new ones last, query ``i`` sees keys ``0 .. k - n + i``). Returns ``[H, n, D]``.

    Computed as scores, a masked softmax and values, in blocks of at most :data:`QUERY_BLOCK` queries, each over
    only the keys its last query sees (a causal prompt skips about half the products) and with ``[H, block, keys]``
    float scores within :data:`SCORE_BLOCK_ELEMENTS`. On CPU this was 3-4x faster than SDPA for a 340-token prompt
    (tiny model and SmolLM2 shapes, 1 thread), whose flash kernel blocks and rescales the key axis. The blocks
    depend only on the row's own ``n``, ``k`` and head count, so the row computes the same calls alone or in any
    batch.
    """
    h, n, d = query.shape
    hkv, k = key.shape[0], key.shape[1]
    group = h // hkv
    scaled = (query * scale).reshape(hkv, group, n, d)
    out = query.new_empty((hkv, group, n, d))
    block = max(1, min(QUERY_BLOCK, SCORE_BLOCK_ELEMENTS // (h * k)))
    for s in range(0, n, block):
        e = min(n, s + block)
        seen = k - n + e  # keys the block's last query sees
        scores = torch.bmm(scaled[:, :, s:e].reshape(hkv, group * (e - s), d), key[:, :seen].transpose(1, 2))
        hidden = torch.ones((e - s, seen), dtype=torch.bool, device=query.device).triu(k - n + s + 1)
        scores = scores.view(hkv, group, e - s, seen).masked_fill_(hidden, float("-inf"))
        out[:, :, s:e] = torch.bmm(scores.view(hkv, group * (e - s), seen).softmax(-1), value[:, :seen]).view(
            hkv, group, e - s, d)
    return out.view(h, n, d)


QUERY_BLOCK = 64
"""Queries per block of :func:`_prompt_attention` (the fastest of 32 / 64 / 128 measured on the tiny model's,
SmolLM2's and Qwen3-0.6B's attention shapes)."""
SCORE_BLOCK_ELEMENTS = 1 << 22
"""Most float scores one block of :func:`_prompt_attention` holds (16 MiB in float32): a block has at most
``SCORE_BLOCK_ELEMENTS // (heads * keys)`` queries (at least one), so a long prompt's scores never take ``n x k``
memory."""


Span = slice | torch.Tensor
"""Positions along one axis: a contiguous run as a slice (a view, no copy), else a long index tensor."""


@dataclass(frozen=True)
class _ForwardPlan:
    """How :func:`rowwise_attention` splits one forward's rows (the same for every layer of the forward).

    Attributes:
        decode: ``(row, query position, real key positions)`` of every row with one real query (decoding).
        spans: ``(row, (real query positions, real key positions))`` of every row with several real queries.
    """

    decode: tuple[tuple[int, int, Span], ...]
    spans: tuple[tuple[int, tuple[Span, Span]], ...]


_LAST_PLAN = threading.local()
"""Per-thread one-entry cache ``(weakref to mask or None, (b, q, k), plan)``: every layer of a forward gets the
same mask object. A weak reference keeps no large prefill mask alive, and a dead one never matches a later mask;
per thread, so two models running forwards in two threads never read each other's plans."""


def _forward_plan(attention_mask: torch.Tensor | None, b: int, q: int, k: int) -> _ForwardPlan:
    """The forward's :class:`_ForwardPlan` from its mask (cached for the forward's layers)."""
    last = getattr(_LAST_PLAN, "entry", None)
    if last is not None and last[1] == (b, q, k) and (last[0] is None if attention_mask is None
                                                      else last[0] is not None and last[0]() is attention_mask):
        return last[2]
    decode: list[tuple[int, int, Span]] = []
    spans: list[tuple[int, tuple[Span, Span]]] = []
    if attention_mask is None:
        for i in range(b):
            if q == 1:
                decode.append((i, 0, slice(None)))
            else:
                spans.append((i, (slice(None), slice(None))))
    else:
        if attention_mask.dtype != torch.bool:
            raise ValueError(f"rowwise_attention needs a boolean mask, got {attention_mask.dtype}")
        diagonal = attention_mask[:, 0, torch.arange(q), torch.arange(k - q, k)]  # a real query sees its own key
        for i in range(b):
            qi = diagonal[i].nonzero().squeeze(1)
            if not len(qi):
                continue
            ki = attention_mask[i, 0, int(qi[-1])].nonzero().squeeze(1)  # the last real query sees every real key
            if len(qi) == 1:
                decode.append((i, int(qi[0]), _span(ki)))
            else:
                spans.append((i, (_span(qi), _span(ki))))
    plan = _ForwardPlan(tuple(decode), tuple(spans))
    _LAST_PLAN.entry = (None if attention_mask is None else weakref.ref(attention_mask), (b, q, k), plan)
    return plan


def _span(index: torch.Tensor) -> Span:
    """``index`` (sorted positions) as a slice when it is one contiguous run (a view, no copy), else itself."""
    first, last = int(index[0]), int(index[-1])
    return slice(first, last + 1) if last - first + 1 == len(index) else index


def _unsupported(model: PreTrainedModel) -> str | None:
    """Why :func:`rowwise_attention` or the row padding cannot reproduce ``model``'s forward, or None.

    Row-wise attention is plain causal softmax attention: sliding-window layers, logit softcapping and attention
    sinks would be computed wrongly; GPT-2-style ``Conv1D`` projections are not ``nn.Linear`` and stay unpadded.
    """
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()) or (
            getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)):
        return "sliding-window attention"
    if getattr(config, "attn_logit_softcapping", None):
        return "attention logit softcapping"
    names = {type(m).__name__ for m in model.modules()}
    if "Conv1D" in names:
        return "Conv1D projections"
    if any(getattr(m, "sinks", None) is not None for m in model.modules()):
        return "attention sinks"
    if any("dynamic" in str(t) or "longrope" in str(t) for t in (getattr(m, "rope_type", "") for m in model.modules())):
        return "RoPE recomputed from the batch's sequence length (dynamic / longrope)"
    return None


def _row_wise(module: torch.nn.Module) -> bool:
    """Whether ``module`` maps each row of its input ``[..., width]`` to a row of its output on its own: linear
    layers, RMS/layer norms (by class name, as transformers names them: ``LlamaRMSNorm``, ``Qwen3RMSNorm``, …) and
    position-wise MLPs with ``down_proj`` (``LlamaMLP``, ``Qwen3MLP``, …)."""
    import torch

    name = type(module).__name__
    return (isinstance(module, torch.nn.Linear | torch.nn.LayerNorm) or name.endswith("RMSNorm")
            or (name.endswith("MLP") and hasattr(module, "down_proj")))


def make_batch_invariant(model: PreTrainedModel, *, required: bool = True) -> bool:
    """Make a causal LM's forward batch-invariant on CPU, in place (see the module docstring).

    Registers :func:`rowwise_attention` (with transformers' SDPA mask builder) and switches the model to it, runs
    every row-wise layer (``nn.Linear``, norms, MLPs: each layer's own forward, wrapped) in fixed-shape tiles, reads
    rotary cos/sin from a per-position table, and wraps the model's forward so the layers know the batch's layout
    (:func:`~brrm.backends.transformers.tiles.with_layout`). Idempotent.

    Args:
        model: a transformers ``PreTrainedModel``.
        required: raise when the architecture is not covered (sliding windows, softcapping, attention sinks,
            ``Conv1D`` projections, or no registered attention functions); False returns False and leaves the
            model as it was (the backend then records ``batch_invariant: false``).

    Returns:
        True when the model is now batch-invariant.

    Raises:
        ConfigError: when ``required`` and the architecture is not covered.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from brrm.errors import ConfigError

    if getattr(model, "_brrm_batch_invariant", False):
        return True
    reason = _unsupported(model)
    if reason is None:
        AttentionInterface.register(ATTENTION, rowwise_attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)
        try:
            model.set_attn_implementation(ATTENTION)
        except (ValueError, ImportError) as exc:
            reason = f"it cannot use a custom attention function ({exc})"
    if reason is not None:
        if not required:
            return False
        raise ConfigError(f"batch_invariant: brrm's batch-invariant forward does not cover {type(model).__name__} "
                          f"({reason}); pass batch_invariant=False")
    for layer in model.modules():
        if _row_wise(layer):
            layer.forward = functools.partial(_padded, layer.forward)  # type: ignore[method-assign]
        elif type(layer).__name__.endswith("RotaryEmbedding") and hasattr(layer, "inv_freq"):
            layer.forward = RotaryTable(layer.forward)  # type: ignore[method-assign]
    forward = functools.partial(with_layout, model.forward)
    forward.__signature__ = inspect.signature(model.forward)  # type: ignore[attr-defined]  # generate() reads it
    model.forward = forward
    setattr(model, "_brrm_batch_invariant", True)  # noqa: B010 (a flag on a Module, not a submodule)
    return True
