"""The batched decoding loop of the transformers backend (see :mod:`brrm.backends.transformers`).

Layout of one batch at prefill, for row ``i`` with ``c_i`` cached and ``n_i`` new prompt tokens::

    [pad … | cached KV (c_i) ] [pad … | new tokens (n_i)]      length C + N
    |<-------- C = max c ---->| |<-------- N = max n ----->|

The attention mask is 1 exactly on real positions (so it may have a hole in the middle) and position
ids are ``c_i, c_i+1, …`` for the new tokens, so each row computes what it would compute alone.
Finished rows are removed from the batch (and their KV stored for reuse) before the next step.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from brrm.backends.transformers.kvbuffer import full_layers, layer_tensors
from brrm.backends.transformers.rows import KV, DecodeContext, Row
from brrm.backends.transformers.sampling import choose

if TYPE_CHECKING:
    from transformers import DynamicCache

Prefill = tuple["DynamicCache", torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]
"""A prefill's (cache, input ids ``[B, N]``, mask ``[B, C + N]``, position ids ``[B, N]``, expand index or None)."""


class Decoder:
    """Decodes one chunk of rows to completion over a :class:`~brrm.backends.transformers.rows.DecodeContext` (the
    transformers backend's model, prefix cache, pad id, stop ids and stats, as a frozen value).

    Args:
        backend: the decode context.
        temperature, top_p, top_k: sampling settings of every row (temperature 0 = greedy; top_k 0 = no cut).
        keep_kv: store each finished row's KV in the backend's prefix cache.
        on_done: called with a row's index as soon as it finishes.
    """

    def __init__(self, backend: DecodeContext, *, temperature: float, top_p: float, keep_kv: bool,
                 on_done: Callable[[int], None] | None = None, top_k: int = 0) -> None:
        self.backend = backend
        self.dev = backend.model.device
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.keep_kv, self.on_done = keep_kv, on_done

    def run(self, rows: list[Row]) -> None:
        """Decode every row to completion in place (fills generated, finish, choice_logits).

        Each step feeds every active row its pending tokens: the token just chosen plus any tokens its
        constraint program forces next (fixed markers), so fixed text costs one forward pass, not one per
        token. Rows with fewer pending tokens are left-padded inside the step (masked holes).
        """
        backend = self.backend
        past, input_ids, mask, positions, expand = self._prefill_inputs(rows)
        active = list(rows)
        bitmask = None
        kwarg = _cache_kwarg(type(backend.model))  # type: ignore[arg-type]
        while active:
            out = backend.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **{kwarg: past})
            backend.stats["forward_calls"] += 1
            past = out.cache if hasattr(out, "cache") else out.past_key_values
            logits = out.logits[:, -1, :].float()
            if expand is not None:  # rows that shared a prefill get their own copy of its KV and last logits
                past.batch_select_indices(expand)
                mask, logits, expand = mask[expand], logits[expand], None
            if bitmask is None and any(r.state is not None for r in rows):
                from outlines_core.kernels.torch import allocate_token_bitmask

                bitmask = allocate_token_bitmask(logits.shape[-1])
            tokens = choose(backend.stop_ids, active, logits, self.temperature, self.top_p, bitmask, self.top_k)
            keep = self._advance(active, tokens, past, mask)
            if not keep:
                break
            if len(keep) < len(active):
                idx = torch.tensor(keep, device=self.dev)
                past.batch_select_indices(idx)
                mask = mask[idx]
                active = [active[j] for j in keep]
            input_ids, step_mask, positions = self._step_inputs(active)
            mask = torch.cat([mask, step_mask], dim=1)

    def _advance(self, active: list[Row], tokens: list[int], past: DynamicCache, mask: torch.Tensor) -> list[int]:
        """Feed each row its chosen token (and forced ones); returns the batch positions still running."""
        keep = []
        for j, (row, tok) in enumerate(zip(active, tokens, strict=True)):
            if row.finish:  # an error found while choosing
                continue
            row.feed = [tok] + _jump_forward(row, tok, self.backend.jump_forward)
            row.generated.extend(row.feed)
            self.backend.stats["generated_tokens"] += len(row.feed)
            if self._finished(row):
                if (self.keep_kv or row.keep_kv) and self.backend.cache is not None:
                    self._store_kv(row, past, mask[j])
                if self.on_done is not None:
                    self.on_done(row.index)
            else:
                keep.append(j)
        return keep

    def _step_inputs(self, active: list[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded [B, T] ids of each row's pending tokens, their mask columns and position ids."""
        t = max(len(r.feed) for r in active)
        ids = torch.full((len(active), t), self.backend.pad_id, dtype=torch.long)
        mask = torch.zeros((len(active), t), dtype=torch.long)
        pos = torch.zeros((len(active), t), dtype=torch.long)
        for i, r in enumerate(active):
            n = len(r.feed)
            start = len(r.request.prompt_ids) + len(r.generated) - n
            ids[i, t - n:] = torch.tensor(r.feed)
            mask[i, t - n:] = 1
            pos[i, t - n:] = torch.arange(start, start + n)
        return ids.to(self.dev), mask.to(self.dev), pos.to(self.dev)

    def _prefill_inputs(self, rows: list[Row]) -> Prefill:
        """Prefill inputs of the rows, identical uncached prompts once (with the prefix cache on: the k samples of
        self-consistency voting share their turn-1 prefill), and the index that expands the prefilled batch back
        to every row (None when no prompt was shared). A shared prefill computes exactly what each row would
        compute alone, so sharing never changes a result beyond what batching itself may."""
        backend, dev = self.backend, self.dev
        kvs = []
        for row in rows:
            n, kv = backend.cache.take(row.request.prompt_ids) if backend.cache is not None else (0, None)
            row.cached = n
            kvs.append(kv)
        unique, expand = _shared_prompts(rows, backend.cache is not None)
        if len(unique) < len(rows):
            shared = set(range(len(rows))) - set(unique)
            backend.stats["shared_prompt_tokens"] += sum(len(rows[i].request.prompt_ids) for i in shared)
            rows, kvs = [rows[i] for i in unique], [kvs[i] for i in unique]
        past, input_ids, mask, positions = self._stack_inputs(rows, kvs)
        index = torch.tensor(expand, device=dev) if len(unique) < len(expand) else None
        return past, input_ids, mask, positions, index

    def _stack_inputs(self, rows: list[Row],
                      kvs: list[KV | None]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        from brrm.backends.transformers.kvbuffer import growing_cache

        backend, dev = self.backend, self.dev
        b = len(rows)
        c = max(r.cached for r in rows)
        new = [r.request.prompt_ids[r.cached:] for r in rows]
        n = max(len(x) for x in new)
        input_ids = torch.full((b, n), backend.pad_id, dtype=torch.long)
        mask = torch.zeros((b, c + n), dtype=torch.long)
        positions = torch.zeros((b, n), dtype=torch.long)
        for i, row in enumerate(rows):
            k = len(new[i])
            input_ids[i, n - k:] = torch.tensor(new[i], dtype=torch.long)
            mask[i, c - row.cached:c] = 1
            mask[i, c + n - k:] = 1
            positions[i, n - k:] = torch.arange(row.cached, row.cached + k)
        backend.stats["prefill_tokens"] += sum(len(x) for x in new)
        backend.stats["cached_tokens"] += sum(r.cached for r in rows)
        past = growing_cache(backend.model.config, self._stack_kv(kvs, rows, c) if c else None)
        return past, input_ids.to(dev), mask.to(dev), positions.to(dev)

    def _stack_kv(self, kvs: list[KV | None], rows: list[Row], c: int) -> KV:
        dev = self.dev
        ref = next(kv for kv in kvs if kv is not None)
        layers = []
        for li, (k0, v0) in enumerate(ref):
            k = torch.zeros((len(rows), k0.shape[0], c, k0.shape[2]), dtype=k0.dtype, device=dev)
            v = torch.zeros((len(rows), v0.shape[0], c, v0.shape[2]), dtype=v0.dtype, device=dev)
            for i, kv in enumerate(kvs):
                if kv is not None and rows[i].cached:
                    k[i, :, c - rows[i].cached:] = kv[li][0]
                    v[i, :, c - rows[i].cached:] = kv[li][1]
            layers.append((k, v))
        return layers

    def _store_kv(self, row: Row, past: DynamicCache, mask_row: torch.Tensor) -> None:
        """Keep the row's real KV positions: the prompt and every generated id except the unfed last step."""
        ids = tuple(row.request.prompt_ids) + tuple(row.generated[:len(row.generated) - len(row.feed)])
        keep = mask_row.bool()
        kv = []
        j = row.batch_pos
        for keys, values in (layer_tensors(layer) for layer in full_layers(past)):
            kv.append((keys[j][:, keep].clone(), values[j][:, keep].clone()))
        if kv and kv[0][0].shape[1] == len(ids) and self.backend.cache is not None:
            self.backend.cache.put(ids, kv, len(row.request.prompt_ids))

    def _finished(self, row: Row) -> bool:
        if row.state is not None:
            if row.state.done:
                row.finish = "stop"
        elif row.generated[-1] in self.backend.stop_ids:
            row.finish = "stop"
        if not row.finish and len(row.generated) >= row.request.max_new_tokens:
            row.finish = "length"
        return bool(row.finish)


def _shared_prompts(rows: list[Row], enabled: bool) -> tuple[list[int], list[int]]:
    """(indices of the rows to prefill, for every row the position of its prefill among them): rows whose whole
    prompt is identical and uncached share one prefill when ``enabled``."""
    first: dict[tuple[int, ...], int] = {}
    unique: list[int] = []
    expand: list[int] = []
    for i, row in enumerate(rows):
        key = tuple(row.request.prompt_ids)
        if enabled and row.cached == 0 and key in first:
            expand.append(first[key])
            continue
        if row.cached == 0:
            first.setdefault(key, len(unique))
        expand.append(len(unique))
        unique.append(i)
    return unique, expand


@functools.cache
def _cache_kwarg(model_type: type[torch.nn.Module]) -> str:
    """``cache`` in transformers >= 5.2x, ``past_key_values`` before (the older name is deprecated)."""
    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def _jump_forward(row: Row, tok: int, enabled: bool = True) -> list[int]:
    """Advance the row's program past ``tok`` and collect the tokens it forces next (within budget); with
    ``enabled`` False none are collected (each forced token then takes a decoding step of its own)."""
    st = row.state
    if st is None:
        return []
    st.advance(tok)
    if not enabled:
        return []
    extra: list[int] = []
    room = row.request.max_new_tokens - len(row.generated) - 1
    while len(extra) < room and not st.done:
        forced = st.forced()
        if forced is None:
            break
        st.advance(forced)
        extra.append(forced)
    return extra
