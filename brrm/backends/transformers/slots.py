"""A slot KV cache for the transformers backend's decoders: every row's keys and values in one contiguous run.

transformers' ``DynamicCache`` holds a batch as one ``[B, H_kv, L, D]`` tensor per layer, every row padded to the
batch's length: a row that joins a running batch, or a step where one row feeds forced markers while the others
feed one token, leaves holes in the other rows' key axis, which then have to be gathered (a copy per row, per layer,
per step) before attention, and merging rows means restacking the whole cache. :class:`SlotCache` gives every row a
slot of its own instead, ``buffer[slot, :, :length]`` per layer, and a forward writes only each row's *real* new
positions after its own last one (:meth:`SlotLayer.update`): a row's keys are always one contiguous run starting at
position 0 of its slot, so attention reads them as a view, in the same layout whether the row runs alone or in any
batch, and a row that leaves or joins costs a copy of only its own slot.

The decoder describes each forward in a :class:`Step` (which slots the batch rows are, how many positions each holds
before the forward, how many of the forward's ``width`` positions are real for each: the last ones, inputs being
left-padded) and runs the model inside :func:`stepping`; the batch-invariant attention
(:func:`brrm.backends.transformers.invariant.rowwise_attention`) and the tile layout
(:func:`brrm.backends.transformers.tiles.with_layout`) read it there. A model on its stock attention gets the
equivalent 4D boolean mask (:meth:`Step.mask`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""One sequence's KV: per layer ``(keys, values)``, each ``[H_kv, length, D]``."""

HEADROOM = 64
"""Fewest spare positions a slot buffer gets when it grows (beyond 50% of the length it needs)."""

_STEP = threading.local()
"""The :class:`Step` of the forward running in this thread (None outside one)."""


@dataclass(frozen=True)
class Step:
    """One forward over slot rows: batch row ``b`` is slot ``lo + b``.

    Attributes:
        lo: the slot of batch row 0 (a forward's rows are consecutive slots).
        starts: per row, positions its slot holds before the forward (its next position id).
        news: per row, real new positions, >= 1: the last ``news[b]`` of the forward's ``width``.
        width: the forward's input length ``t`` (``max(news)``).
    """

    lo: int
    starts: tuple[int, ...]
    news: tuple[int, ...]
    width: int

    @property
    def rows(self) -> int:
        """Batch rows of the forward."""
        return len(self.starts)

    @functools.cached_property
    def length(self) -> int:
        """Positions the longest row holds after the forward (the key axis attention sees)."""
        return max(s + n for s, n in zip(self.starts, self.news, strict=True))

    @functools.cached_property
    def real(self) -> torch.Tensor:
        """``[B, width]`` long: 1 on each row's real new positions (the last ``news[b]``)."""
        cols = torch.arange(self.width)
        return (cols[None, :] >= self.width - torch.tensor(self.news)[:, None]).long()

    @functools.cached_property
    def single(self) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
        """Rows that feed one position: (batch rows, their slots, their new positions) — written in one call."""
        rows = tuple(b for b, n in enumerate(self.news) if n == 1)
        return rows, torch.tensor([self.lo + b for b in rows]), torch.tensor([self.starts[b] for b in rows])

    def mask(self, window: int | None = None) -> torch.Tensor:
        """The equivalent mask for stock attention: bool ``[B, 1, width, length]``, True where a query may attend
        (causal within its row's own keys; within ``window`` positions when given). A padded query attends to
        its row's first key only (its output is never read)."""
        offset = torch.tensor(self.starts)[:, None] - (self.width - torch.tensor(self.news))[:, None]
        qpos = (torch.arange(self.width)[None, :] + offset).clamp(min=0)  # [B, width]
        keys = torch.arange(self.length)[None, None, :]
        allowed = keys <= qpos[:, :, None]
        if window is not None:
            allowed &= keys > qpos[:, :, None] - window
        return allowed[:, None]


MaskFor = Callable[[Step], "torch.Tensor | dict[str, torch.Tensor]"]
"""What a forward passes as ``attention_mask`` for a step (see :func:`brrm.backends.transformers.decode.mask_for`)."""


def current() -> Step | None:
    """The :class:`Step` of the forward running in this thread, or None."""
    return getattr(_STEP, "value", None)


@contextmanager
def stepping(step: Step) -> Iterator[Step]:
    """Run a forward over slot rows: :func:`current` returns ``step`` inside (per thread, nests)."""
    outer = current()
    _STEP.value = step
    try:
        yield step
    finally:
        _STEP.value = outer


class SlotLayer(DynamicLayer):
    """One layer's keys and values, ``[slots, H_kv, capacity, D]`` each, row ``b`` of a forward in slot ``lo + b``."""

    def __init__(self, slots: int, capacity: int, most: int) -> None:
        super().__init__()
        self.slots, self.capacity, self.most = slots, capacity, most

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the buffers for ``key_states``' heads, head size, dtype and device."""
        _, h, _, d = key_states.shape
        self.keys = key_states.new_zeros((self.slots, h, self.capacity, d))
        self.values = value_states.new_zeros((self.slots, value_states.shape[1], self.capacity, value_states.shape[3]))
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Write each row's real new ``[B, H_kv, width, D]`` keys and values after its own last position; returns
        the forward's rows ``[B, H_kv, step.length, D]`` (views; row ``b``'s real keys are ``[:, :starts[b] +
        news[b]]``).

        Raises:
            RuntimeError: outside :func:`stepping` (a programming error).
        """
        step = current()
        if step is None:
            raise RuntimeError("a SlotCache is written inside stepping(Step(...)) only")
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if step.length > self.capacity or step.lo + step.rows > self.slots:
            self.grow(step.length, step.lo + step.rows)
        keys, values = self.buffers()
        for buffer, new in ((keys, key_states), (values, value_states)):
            rows, slots, positions = step.single
            if rows:
                picked = new[:, :, -1] if len(rows) == step.rows else new[list(rows), :, -1]
                buffer[slots, :, positions] = picked
            for b, (start, n) in enumerate(zip(step.starts, step.news, strict=True)):
                if n > 1:
                    buffer[step.lo + b, :, start:start + n] = new[b, :, step.width - n:]
        hi = step.lo + step.rows
        return keys[step.lo:hi, :, :step.length], values[step.lo:hi, :, :step.length]

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keys, values)`` buffers, each ``[slots, H_kv, capacity, D]``.

        Raises:
            RuntimeError: before the first write (a programming error).
        """
        if self.keys is None or self.values is None:
            raise RuntimeError("the slot layer holds nothing yet")
        return self.keys, self.values

    def grow(self, length: int = 0, slots: int = 0) -> None:
        """Make room for ``length`` positions per slot and ``slots`` slots (one copy, with headroom: 50% more
        positions, at least :data:`HEADROOM`; twice the slots, at most what was asked for the cache)."""
        capacity = length + max(HEADROOM, length // 2) if length > self.capacity else self.capacity
        count = min(max(slots, 2 * self.slots), self.most) if slots > self.slots else self.slots
        if self.is_initialized:
            keys, values = self.buffers()
            for name, old in (("keys", keys), ("values", values)):
                new = old.new_zeros((count, old.shape[1], capacity, old.shape[3]))
                new[:old.shape[0], :, :self.capacity] = old
                setattr(self, name, new)
        self.capacity, self.slots = capacity, count

    def get_seq_length(self) -> int:
        """Positions allocated per slot (this cache is addressed per row, through :class:`Step`)."""
        return self.capacity


SLOT_LAYERS = ("full_attention", "sliding_attention")
"""The attention layer types a slot cache holds (transformers' ``config.layer_types`` names)."""


def sliding_windows(config: PretrainedConfig) -> tuple[bool, int | None]:
    """``(whether full-attention layers occur, the sliding window or None)`` of a model whose every layer the slot
    cache can hold: full attention, or sliding-window attention with one window for all its sliding layers.

    Raises:
        ConfigError: for any other layer (linear attention, state-space, chunked, sparse-indexed or KV-sharing
            layers, layers without attention, or sliding layers of several windows): the slot cache and its masks
            would compute them wrongly.
    """
    from transformers.cache_utils import get_layer_types_and_kwargs

    from brrm.errors import ConfigError

    text = config.get_text_config(decoder=True)
    types, kwargs = get_layer_types_and_kwargs(text)
    other = sorted(set(types) - set(SLOT_LAYERS))
    windows = {int(k["sliding_window"]) for t, k in zip(types, kwargs, strict=True) if t == "sliding_attention"}
    if other or len(windows) > 1:
        found = f"{', '.join(other)} layers" if other else f"sliding windows of {sorted(windows)}"
        raise ConfigError(f"the transformers backend decodes models whose layers are {' or '.join(SLOT_LAYERS)} "
                          f"(one window); {getattr(text, 'model_type', 'this model')} has {found}")
    return "full_attention" in types, next(iter(windows), None)


class SlotCache(DynamicCache):
    """A ``DynamicCache`` of :class:`SlotLayer` s for up to ``slots`` rows. Memory follows use: the buffers start
    with room for the rows and positions the first forward needs and grow (one copy each time, with headroom) when
    a row needs more positions or a forward more slots, so a batch that never fills its slots or budgets never
    holds their memory.

    Args:
        config: the model's config.
        slots: most rows the cache holds at once (the batch size).
        capacity: positions per slot to start with (grown as needed).
        first: slots to start with (default ``slots``).

    Raises:
        ConfigError: for a model with layers other than full or sliding-window attention (:func:`sliding_windows`).
    """

    def __init__(self, config: PretrainedConfig, slots: int, capacity: int, first: int | None = None) -> None:
        sliding_windows(config)  # a sliding-window layer is kept whole (the mask windows it)
        super().__init__(config=config)
        start = slots if first is None else min(max(first, 1), slots)
        self.layers = [SlotLayer(start, capacity, slots) for _ in self.layers]

    def slot_layers(self) -> list[SlotLayer]:
        """The layers, typed."""
        return [layer for layer in self.layers if isinstance(layer, SlotLayer)]

    def move(self, sources: Sequence[int], first: int, length: int) -> None:
        """Slots ``first, first + 1, …`` get the first ``length`` positions of slots ``sources`` (read before any is
        written: sources and targets may overlap; the layers grow to hold the targets). Positions of unchanged slots
        are not copied."""
        pairs = [(first + j, s) for j, s in enumerate(sources) if s != first + j]
        if not pairs or length == 0:
            return
        targets = torch.tensor([t for t, _ in pairs])
        origins = torch.tensor([s for _, s in pairs])
        for layer in self.slot_layers():
            if first + len(sources) > layer.slots:  # a shared prefill fed fewer rows than it fills
                layer.grow(0, first + len(sources))
            if layer.is_initialized:
                for buffer in layer.buffers():
                    buffer[targets, :, :length] = buffer[origins, :, :length]

    def clear(self, slot: int) -> None:
        """Zero every position of ``slot``: a row that leaves with non-finite keys or values must not leave them
        for the slot's next row (stock attention reads a row's slot up to the batch's length, masked, and a masked
        NaN still poisons the softmax's weighted sum)."""
        for layer in self.slot_layers():
            if layer.is_initialized and slot < layer.slots:
                for buffer in layer.buffers():
                    buffer[slot].zero_()

    def write(self, slot: int, kv: KV) -> None:
        """Put one sequence's KV (per layer ``[H_kv, n, D]``) at positions ``0 … n - 1`` of ``slot``."""
        for layer, (keys, values) in zip(self.slot_layers(), kv, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(keys[None], values[None])
            if keys.shape[1] > layer.capacity or slot >= layer.slots:
                layer.grow(keys.shape[1], slot + 1)
            buffer_k, buffer_v = layer.buffers()
            buffer_k[slot, :, :keys.shape[1]] = keys
            buffer_v[slot, :, :values.shape[1]] = values

    def read(self, slot: int, length: int) -> KV:
        """A copy of positions ``0 … length - 1`` of ``slot``: per layer ``([H_kv, length, D], [H_kv, length, D])``."""
        buffers = [layer.buffers() for layer in self.slot_layers()]
        return [(keys[slot, :, :length].clone(), values[slot, :, :length].clone()) for keys, values in buffers]
