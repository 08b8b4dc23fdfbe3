"""Fixed-shape tiles for the row-wise layers of a batch-invariant forward (see
:mod:`brrm.backends.transformers.invariant`).

A row-wise layer (a linear layer, a norm, a position-wise MLP) maps each token's vector on its own, but the
kernels it calls (BLAS GEMM, ATen's vectorised loops) choose their code path and reduction split from the shape
of the whole call. So each layer is run only on tiles of three fixed shapes, a token's tile shape fixed by its
own row, never by its neighbours:

* rows that feed **one** token (decoding) share tiles of :data:`TILE_ROWS` tokens, in batch order (zero rows
  at the end);
* a row that feeds ``n > 1`` tokens (a prompt, or forced markers) puts its first ``n % LONG_TILE`` tokens in
  tiles of :data:`SEQUENCE_TILE` tokens shared with the other such rows, in batch order (zero rows at the end),
  and its last ones in whole :data:`LONG_TILE`-token tiles of its own;
* so every token goes through calls of one shape alone or in any batch; only its place in a shared tile moves
  with its neighbours (which does not change its bits: :mod:`brrm.backends.transformers.invariant` says why, and
  what checks it). Sharing matters where weights are streamed once per tile: forced markers of three rows fill
  one or two tiles, not three;
* padding positions of the batch (left padding of prompts and of a decode step's feeds) are not computed; their
  outputs are zeros (attention never reads them).

A forward's layout comes from the running :class:`~brrm.backends.transformers.slots.Step` (the backend's decoder), or
else from its 2D ``attention_mask`` (:func:`with_layout` wraps the model's forward and keeps the layout in a
thread-local while the forward runs); a layer input that is not ``[batch, length, ...]`` of that forward (the
head's input under ``logits_to_keep=1``, a call outside a model forward) is cut into shared tiles of
:data:`TILE_ROWS` rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from brrm.backends.transformers.slots import current as current_step

T = TypeVar("T")
RowWise = Callable[[torch.Tensor], torch.Tensor]
"""A row-wise layer's own forward ``[..., width] -> [..., out]``."""
TableKey = tuple[torch.dtype, torch.device, tuple[tuple[str, object], ...]]
"""A rotary table's key: the input's dtype and device and the forward's keyword arguments."""

TILE_ROWS = 8
"""Tokens per shared tile (rows that decode one token per forward). Decoding 8 rows fills one tile: chosen for
``batch_size=8`` (``benchmarks/bench_judge.py::test_batch_invariance_cost_smollm2``)."""
SEQUENCE_TILE = 32
"""Tokens per shared tile of the rows that feed several tokens (prompts, forced markers): large enough that the
GEMM runs near the speed of one call over the whole prompt (measured on SmolLM2's shapes with MKL: 32-row tiles
cost about 1.0-1.2x one 640-row call, 8-row tiles 1.7x), small enough that the zero rows at the end of the
forward's last such tile (at most 31) cost little."""
LONG_TILE = 256
"""Tokens per long tile: a row feeding ``n`` tokens puts its last ``n - n % LONG_TILE`` in long tiles of its own and
its first ``n % LONG_TILE`` in shared :data:`SEQUENCE_TILE` tiles, so a prompt of a few hundred tokens takes a
few calls per layer, not one per 32 tokens (a call's fixed cost dominates on a small model; on SmolLM2's shapes a
256-row call was 10-25% faster per row than a 32-row one, measured with MKL at 1 and 2 threads)."""
ALIGN = 64
"""Byte alignment of every tile's data pointer (torch's CPU allocator aligns to 64 bytes; a tile that is not
aligned is copied, so no kernel sees another alignment)."""
ROTARY_BLOCK = 64
"""Positions per block of a rotary embedding's cos/sin table (see :class:`RotaryTable`). A block of 64 positions
has 64 x head_dim elements, under ATen's parallel grain (``at::internal::GRAIN_SIZE``, 32,768 elements) for any
head_dim below 512, so its ``cos``/``sin`` run on one thread: the table does not depend on the thread count."""

_LAYOUT = threading.local()
"""The layout of the forward running in this thread (None outside one)."""


@dataclass(frozen=True)
class Layout:
    """Where each real token of a ``[batch, length]`` forward goes in the tile buffer.

    Attributes:
        batch, length: the forward's input shape.
        index: long ``[slots]``: per buffer slot, the flat token index ``b * length + t``, or ``batch * length``
            for a zero row; each real token appears once.
        tiles: ``(start, stop)`` slot ranges of the tiles, in order: shared tiles first, then each multi-token
            row's own.
        identity: ``index`` is ``arange(batch * length)`` (every row decodes one real token, whole tiles): the
            input is its own buffer.
    """

    batch: int
    length: int
    index: torch.Tensor
    tiles: tuple[tuple[int, int], ...]
    identity: bool


def layout(attention_mask: torch.Tensor | None, batch: int, length: int) -> Layout | None:
    """The :class:`Layout` of a forward over ``[batch, length]`` new tokens, or None for a mask of another form.

    Args:
        attention_mask: ``[batch, past + length]`` (1 = real) or None (every position real).
    """
    if attention_mask is None:
        real = torch.ones((batch, length), dtype=torch.bool)
    elif attention_mask.dim() == 2 and attention_mask.shape[0] == batch and attention_mask.shape[1] >= length:
        real = attention_mask[:, attention_mask.shape[1] - length:].to("cpu", torch.bool)
    else:
        return None
    zero = batch * length
    flat = torch.arange(zero).view(batch, length)
    counts = real.sum(1).tolist()
    tokens = [flat[b][real[b]] for b in range(batch)]
    single = [tokens[b] for b in range(batch) if counts[b] == 1]
    rests = [tokens[b][:counts[b] % LONG_TILE] for b in range(batch) if counts[b] > 1]  # a row's first tokens
    longs = [tokens[b][counts[b] % LONG_TILE:] for b in range(batch) if counts[b] >= LONG_TILE]  # its last ones
    parts: list[torch.Tensor] = []
    tiles: list[tuple[int, int]] = []
    slots = 0
    for pool, size in ((single, TILE_ROWS), (rests, SEQUENCE_TILE), (longs, LONG_TILE)):
        filled = sum(len(p) for p in pool)
        pad = -filled % size  # zero rows at the end of a pool (none for the long runs: whole tiles already)
        tiles += [(s, s + size) for s in range(slots, slots + filled + pad, size)]
        parts += [*pool, torch.full((pad,), zero)]
        slots += filled + pad
    index = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
    identity = len(single) == zero and zero % TILE_ROWS == 0
    return Layout(batch, length, index, tuple(tiles), identity)


def with_layout(forward: Callable[..., T], *args: object, **kwargs: object) -> T:
    """A causal LM's ``forward`` with its :class:`Layout` kept in a thread-local while it runs (nests)."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    step = current_step()
    mask = step.real if step is not None else kwargs.get("attention_mask")
    here = layout(mask if isinstance(mask, torch.Tensor) else None, ids.shape[0], ids.shape[1]) \
        if isinstance(ids, torch.Tensor) and ids.dim() >= 2 else None
    outer = getattr(_LAYOUT, "value", None)
    _LAYOUT.value = here
    try:
        return forward(*args, **kwargs)
    finally:
        _LAYOUT.value = outer


def _run_tiles(forward: RowWise, buffer: torch.Tensor, tiles: Sequence[tuple[int, int]], width: int) -> torch.Tensor:
    """``forward`` on each ``buffer[start:stop]`` tile (flattened to ``[-1, width]``, aligned), concatenated.

    While a tile runs, the row-wise layers inside ``forward`` (an MLP's linear layers) take the tile as it is.
    """
    outs = []
    _LAYOUT.inside = True
    try:
        for start, stop in tiles:
            tile = buffer[start:stop].reshape(-1, width)
            outs.append(forward(tile if tile.data_ptr() % ALIGN == 0 else tile.clone()))
    finally:
        _LAYOUT.inside = False
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _padded(forward: RowWise, x: torch.Tensor) -> torch.Tensor:
    """``forward(x)`` (a row-wise layer's own forward) computed in fixed-shape tiles (see the module docstring).

    Stateless apart from the running forward's thread-local layout, so one model may run in several threads.

    Args:
        forward: a row-wise callable ``[..., width] -> [..., out]`` (row ``i`` of the output depends on row ``i``
            of the input only): ``nn.Linear``, an RMSNorm/LayerNorm, a position-wise MLP.
        x: float tensor ``[..., width]``.

    Returns:
        ``forward(x)``'s value, ``[..., out]``; rows at padding positions of the running forward are zeros.
    """
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    plan = getattr(_LAYOUT, "value", None)
    if rows == 0 or getattr(_LAYOUT, "inside", False):
        return forward(x)
    if plan is not None and x.dim() >= 3 and tuple(x.shape[:2]) == (plan.batch, plan.length):
        tokens = plan.batch * plan.length
        group = rows // tokens  # rows per token: attention heads for a per-head norm
        if not plan.tiles:  # no real token in this forward
            return forward(x).zero_()
        flat = x.reshape(tokens, group, width)
        if plan.identity:  # every token real, whole tiles: the input is its own buffer
            out = _run_tiles(forward, flat.contiguous(), plan.tiles, width)
            return out.reshape(*x.shape[:-1], out.shape[-1])
        buffer = torch.cat([flat, flat.new_zeros((1, group, width))]).index_select(0, plan.index)
        out = _run_tiles(forward, buffer, plan.tiles, width).reshape(len(plan.index), group, -1)
        result = out.new_zeros((tokens + 1, group, out.shape[-1])).index_copy_(0, plan.index, out)
        return result[:tokens].reshape(*x.shape[:-1], out.shape[-1])
    if rows == TILE_ROWS and x.is_contiguous() and x.data_ptr() % ALIGN == 0:
        return forward(x)
    buffer = x.new_zeros((-(-rows // TILE_ROWS) * TILE_ROWS, width))
    buffer[:rows] = x.reshape(rows, width)
    out = _run_tiles(forward, buffer, [(s, s + TILE_ROWS) for s in range(0, len(buffer), TILE_ROWS)], width)
    return out[:rows].reshape(*x.shape[:-1], out.shape[-1])


class RotaryTable:
    """A rotary embedding's ``forward(x, position_ids) -> (cos, sin)`` read from a table of positions.

    The table is filled in blocks of :data:`ROTARY_BLOCK` positions, each computed once by the module's own
    forward on ``arange(start, start + ROTARY_BLOCK)`` (one fixed shape), and rows are gathered by position: a
    position's cos/sin never depend on which other positions share the call. (Computed on the batch, ``cos`` and
    ``sin`` go through vectorised or scalar code depending on an element's offset in the flattened tensor, which
    moves with the batch shape.) Thread-safe.
    """

    def __init__(self, forward: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.forward = forward
        self.lock = threading.Lock()
        self.tables: dict[TableKey, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor,
                 **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        need = int(position_ids.max()) + 1 if position_ids.numel() else 0
        key = (x.dtype, x.device, tuple(sorted(kwargs.items())))
        table = self.tables.get(key)
        if table is None or table[0].shape[0] < need:
            table = self._grow(x, key, need, kwargs)
        return table[0][position_ids], table[1][position_ids]

    def _grow(self, x: torch.Tensor, key: TableKey, need: int,
              kwargs: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
        with self.lock:
            cos, sin = self.tables.get(key, (x.new_zeros((0, 0)), x.new_zeros((0, 0))))
            have = cos.shape[0]
            blocks_cos, blocks_sin = ([cos] if have else []), ([sin] if have else [])
            for start in range(have, need, ROTARY_BLOCK):
                pos = torch.arange(start, start + ROTARY_BLOCK, device=x.device)[None]
                c, s = self.forward(x[:0], pos, **kwargs)
                blocks_cos.append(c[0])
                blocks_sin.append(s[0])
            if len(blocks_cos) > (1 if have else 0):
                self.tables[key] = (torch.cat(blocks_cos), torch.cat(blocks_sin))
            return self.tables[key]
