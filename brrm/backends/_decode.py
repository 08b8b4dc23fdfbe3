"""The batched decoding loop of the transformers backend (see :mod:`brrm.backends.transformers`).

Layout of one batch at prefill, for row ``i`` with ``c_i`` cached and ``n_i`` new prompt tokens::

    [pad … | cached KV (c_i) ] [pad … | new tokens (n_i)]      length C + N
    |<-------- C = max c ---->| |<-------- N = max n ----->|

The attention mask is 1 exactly on real positions (so it may have a hole in the middle) and position
ids are ``c_i, c_i+1, …`` for the new tokens, so each row computes what it would compute alone.
Finished rows are removed from the batch (and their KV stored for reuse) before the next step.
"""

from __future__ import annotations

from typing import Any

import torch


def run(backend: Any, rows: list[Any], dev: Any, temperature: float, top_p: float, keep_kv: bool) -> None:
    """Decode every row to completion in place (fills generated, finish, choice_logits)."""
    past, input_ids, mask, next_pos = _prefill_inputs(backend, rows, dev)
    active = list(rows)
    bitmask = None
    while active:
        out = backend.model(input_ids=input_ids, attention_mask=mask, position_ids=next_pos_ids(input_ids,
                            next_pos), use_cache=True, logits_to_keep=1, **{_cache_kwarg(backend.model): past})
        backend.stats["forward_calls"] += 1
        past = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1, :].float()
        if bitmask is None and any(r.state is not None for r in rows):
            from outlines_core.kernels.torch import allocate_token_bitmask

            bitmask = allocate_token_bitmask(logits.shape[-1])
        tokens = _choose(backend, active, logits, temperature, top_p, bitmask)
        keep = []
        for j, (row, tok) in enumerate(zip(active, tokens, strict=True)):
            if row.finish:  # an error found while choosing
                continue
            row.generated.append(tok)
            backend.stats["generated_tokens"] += 1
            if _finished(backend, row, tok):
                if keep_kv and backend.cache is not None:
                    _store_kv(backend, row, past, mask[j])
            else:
                keep.append(j)
        if not keep:
            break
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=dev)], dim=1)
        if len(keep) < len(active):
            idx = torch.tensor(keep, device=dev)
            past.batch_select_indices(idx)
            mask, next_pos = mask[idx], next_pos[idx]
            active = [active[j] for j in keep]
        input_ids = torch.tensor([[r.generated[-1]] for r in active], device=dev)
        next_pos = next_pos + 1


def _cache_kwarg(model: Any) -> str:
    """``cache`` in transformers >= 5.2x, ``past_key_values`` before (the older name is deprecated)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def next_pos_ids(input_ids: torch.Tensor, next_pos: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T] for ``input_ids`` whose last column is at position ``next_pos - 1``.

    Left-padding columns get clamped positions; they are masked out as keys and never read as queries.
    """
    t = input_ids.shape[1]
    offsets = torch.arange(t, device=input_ids.device) - (t - 1)
    return (next_pos[:, None] - 1 + offsets[None, :]).clamp(min=0)


def _prefill_inputs(backend: Any, rows: list[Any], dev: Any) -> tuple[Any, Any, Any, Any]:
    from transformers import DynamicCache

    kvs = []
    for row in rows:
        n, kv = backend.cache.take(row.request.prompt_ids) if backend.cache is not None else (0, None)
        row.cached = n
        kvs.append(kv)
    b = len(rows)
    c = max(r.cached for r in rows)
    new = [r.request.prompt_ids[r.cached:] for r in rows]
    n = max(len(x) for x in new)
    input_ids = torch.full((b, n), backend.pad_id, dtype=torch.long, device=dev)
    mask = torch.zeros((b, c + n), dtype=torch.long, device=dev)
    for i, row in enumerate(rows):
        k = len(new[i])
        input_ids[i, n - k:] = torch.tensor(new[i], dtype=torch.long, device=dev)
        mask[i, c - row.cached:c] = 1
        mask[i, c + n - k:] = 1
    backend.stats["prefill_tokens"] += sum(len(x) for x in new)
    backend.stats["cached_tokens"] += sum(r.cached for r in rows)
    # next_pos = position of the last prompt token + 1, i.e. the prompt length
    next_pos = torch.tensor([len(r.request.prompt_ids) for r in rows], dtype=torch.long, device=dev)
    past = DynamicCache(config=backend.model.config)
    if c:
        past = DynamicCache(ddp_cache_data=_stack_kv(kvs, rows, c, dev), config=backend.model.config)
    return past, input_ids, mask, next_pos


def _stack_kv(kvs: list[Any], rows: list[Any], c: int, dev: Any) -> list[tuple[Any, Any]]:
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


def _store_kv(backend: Any, row: Any, past: Any, mask_row: torch.Tensor) -> None:
    """Keep the row's real KV positions: they cover the prompt and all generated ids but the last."""
    ids = tuple(row.request.prompt_ids) + tuple(row.generated[:-1])
    keep = mask_row.bool()
    kv = []
    j = row.batch_pos
    for layer in past.layers:
        kv.append((layer.keys[j][:, keep].clone(), layer.values[j][:, keep].clone()))
    if kv and kv[0][0].shape[1] == len(ids):
        backend.cache.put(ids, kv)


def _finished(backend: Any, row: Any, tok: int) -> bool:
    if row.state is not None:
        if row.state.done:
            row.finish = "stop"
    elif tok in backend.stop_ids:
        row.finish = "stop"
    if not row.finish and len(row.generated) >= row.request.max_new_tokens:
        row.finish = "length"
    return bool(row.finish)


def _choose(backend: Any, active: list[Any], logits: torch.Tensor, temperature: float, top_p: float,
            bitmask: Any) -> list[int]:
    """Apply constraints row by row, then pick tokens (greedy: one argmax over the batch)."""
    finite = (~(torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1)).tolist()
    forced: dict[int, int] = {}
    for j, row in enumerate(active):
        row.batch_pos = j
        if not finite[j]:
            row.finish, row.error = "error", "non-finite logits from the model"
            continue
        if row.state is not None:
            f = _constrain(backend, row, logits[j:j + 1], bitmask)
            if f is not None:
                forced[j] = f
    if temperature == 0:
        picked = logits.argmax(dim=-1).tolist()
    else:
        picked = [_sample(logits[j], temperature, top_p, row.generator) if j not in forced and finite[j] else 0
                  for j, row in enumerate(active)]
    tokens = [forced.get(j, picked[j]) for j in range(len(active))]
    for j, row in enumerate(active):
        if row.state is not None and not row.finish:
            row.state.advance(tokens[j])
    return tokens


def _constrain(backend: Any, row: Any, logits_row: torch.Tensor, bitmask: Any) -> int | None:
    """Mask one row's logits for its program; returns a forced token or None."""
    st = row.state
    forced = st.forced()
    if forced is not None:
        return forced
    if st.kind == "choice":
        ids = list(st.choice_ids())
        raw = logits_row[0, ids].clone()
        row.choice_logits.append(tuple(float(x) for x in raw))
        logits_row.fill_(float("-inf"))
        logits_row[0, ids] = raw
    elif st.write_mask(bitmask):
        from outlines_core.kernels.torch import apply_token_bitmask_inplace

        apply_token_bitmask_inplace(logits_row, bitmask)
    elif st.banned_stop():
        for s in backend.stop_ids:
            logits_row[0, s] = float("-inf")
    return None


def _sample(logits_row: torch.Tensor, temperature: float, top_p: float, generator: Any) -> int:
    probs = torch.softmax(logits_row / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        cum = sorted_p.cumsum(-1)
        drop = cum - sorted_p > top_p
        sorted_p[drop] = 0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return int(torch.multinomial(probs, 1, generator=generator).item())
