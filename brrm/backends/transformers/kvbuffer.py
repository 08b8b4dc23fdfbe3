"""A KV cache whose layers append into spare capacity instead of reallocating every decoding step.

transformers' ``DynamicLayer`` concatenates each step's keys and values to the whole cache (``torch.cat``), so a
step of a batch holding ``L`` positions copies ``2 x layers x B x H_kv x L x D`` floats: decoding ``n`` tokens
costs O(n²) copying, the largest single cost of a decode step on small models. :class:`GrowingLayer` keeps its
keys and values as views ``buffer[:, :, :length]`` of a buffer with room for more positions and writes a step's
new positions in place; it reallocates (with 50% headroom) only when the buffer is full or when someone replaced
its tensors (the continuous decoder's merges; cutting leading positions and ``batch_select_indices``
keep a buffer), so every other use of the cache
sees ordinary tensors of the usual shape ``[B, H_kv, length, D]`` (strided views, not contiguous).

Values are unchanged: the layer holds the same numbers at the same positions as ``DynamicLayer`` would.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

HEADROOM = 64
"""Fewest spare positions a (re)allocated buffer gets (beyond 50% of its length)."""


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` appending into a buffer with spare positions (see the module docstring)."""

    key_buffer: torch.Tensor | None = None
    value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, H_kv, t, D]`` keys and values; returns the whole ``[B, H_kv, length + t, D]`` of each."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = layer_tensors(self)
        self.keys, self.key_buffer = _append(keys, self.key_buffer, key_states)
        self.values, self.value_buffer = _append(values, self.value_buffer, value_states)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the ``indices`` rows, each with its buffer's spare positions (one copy, no reallocation later)."""
        for name in ("key", "value"):
            view, buffer = getattr(self, f"{name}s"), getattr(self, f"{name}_buffer")
            start = _start_in(view, buffer) if buffer is not None and view.dim() == 4 else None
            if buffer is None or start is None:
                setattr(self, f"{name}s", view[indices, ...])
                continue
            buffer = buffer.index_select(0, indices)
            setattr(self, f"{name}_buffer", buffer)
            setattr(self, f"{name}s", buffer[:, :, start:start + view.shape[2]])


def full_layers(cache: DynamicCache) -> list[DynamicLayer]:
    """``cache``'s layers, each a full-attention ``DynamicLayer`` (or a :class:`GrowingLayer`).

    Raises:
        TypeError: for another kind of layer (the batch-invariant forward refuses sliding-window models).
    """
    layers = []
    for layer in cache.layers:
        if not isinstance(layer, DynamicLayer):
            raise TypeError(f"a full-attention DynamicLayer was expected, got {type(layer).__name__}")
        layers.append(layer)
    return layers


def layer_tensors(layer: DynamicLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """An initialised layer's ``(keys, values)``.

    Raises:
        ValueError: for a layer that holds none yet (a programming error).
    """
    if layer.keys is None or layer.values is None:
        raise ValueError("the cache layer holds no keys yet")
    return layer.keys, layer.values


def _append(current: torch.Tensor, buffer: torch.Tensor | None,
            new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``current`` with ``new`` appended along dim 2, the buffer that view lives in).

    ``current`` is extended in place when it is ``buffer[:, :, start:start + length]`` (the last append's view,
    or that view with leading positions cut) and the buffer has room after it; otherwise a new buffer is made.
    """
    length = current.shape[2] if current.dim() == 4 else 0
    start = _start_in(current, buffer) if buffer is not None and length else None
    if buffer is not None and start is not None and start + length + new.shape[2] <= buffer.shape[2]:
        stop = start + length + new.shape[2]
        buffer[:, :, start + length:stop] = new
        return buffer[:, :, start:stop], buffer
    total = length + new.shape[2]
    b, h, _, d = new.shape
    buffer = new.new_empty((b, h, total + max(HEADROOM, total // 2), d))
    if length:
        buffer[:, :, :length] = current
    buffer[:, :, length:total] = new
    return buffer[:, :, :total], buffer


def _start_in(view: torch.Tensor, buffer: torch.Tensor) -> int | None:
    """``start`` when ``view`` is ``buffer[:, :, start:start + n]``, else None."""
    if view.stride() != buffer.stride() or view.shape[:2] != buffer.shape[:2] or view.shape[3] != buffer.shape[3]:
        return None
    offset, rest = divmod(view.data_ptr() - buffer.data_ptr(), view.element_size() * buffer.stride(2))
    return offset if rest == 0 and 0 <= offset and offset + view.shape[2] <= buffer.shape[2] else None


def growing_cache(config: PretrainedConfig,
                  layers: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are :class:`GrowingLayer` s, filled with
    ``layers`` (per layer ``(keys, values)``, each ``[B, H_kv, L, D]``) when given."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    for layer, (keys, values) in zip(full_layers(cache), layers or (), strict=False):
        layer.update(keys, values)
    return cache


def stacked_cache(config: PretrainedConfig, caches: Sequence[DynamicCache], length: int) -> DynamicCache:
    """The rows of ``caches`` stacked in order, each right-aligned to ``length`` positions (zeros in front), every
    layer's keys and values written once into a :class:`GrowingLayer` buffer with spare positions."""
    cache = growing_cache(config)
    sources = [full_layers(c) for c in caches]
    for index, layer in enumerate(full_layers(cache)):
        parts = [layer_tensors(layers[index]) for layers in sources]
        layer.lazy_initialization(*parts[0])
        for which, name in enumerate(("key", "value")):
            tensors = [p[which] for p in parts]
            b, h, d = sum(t.shape[0] for t in tensors), tensors[0].shape[1], tensors[0].shape[3]
            buffer = tensors[0].new_zeros((b, h, length + max(HEADROOM, length // 2), d))
            row = 0
            for t in tensors:
                buffer[row:row + t.shape[0], :, length - t.shape[2]:length] = t
                row += t.shape[0]
            setattr(layer, f"{name}_buffer", buffer)
            setattr(layer, f"{name}s", buffer[:, :, :length])
    return cache
