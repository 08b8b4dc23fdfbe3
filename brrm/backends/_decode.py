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
from typing import Any

import torch


def run(backend: Any, rows: list[Any], dev: Any, temperature: float, top_p: float, keep_kv: bool,
        on_done: Any = None) -> None:
    """Decode every row to completion in place (fills generated, finish, choice_logits).

    Each step feeds every active row its pending tokens: the token just chosen plus any tokens its
    constraint program forces next (fixed markers), so fixed text costs one forward pass, not one per
    token. Rows with fewer pending tokens are left-padded inside the step (masked holes).
    """
    past, input_ids, mask, positions = _prefill_inputs(backend, rows, dev)
    active = list(rows)
    bitmask = None
    kwarg = _cache_kwarg(type(backend.model))  # type: ignore[arg-type]
    while active:
        out = backend.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                            logits_to_keep=1, **{kwarg: past})
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
            row.feed = [tok] + _jump_forward(row, tok)
            row.generated.extend(row.feed)
            backend.stats["generated_tokens"] += len(row.feed)
            if _finished(backend, row):
                if keep_kv and backend.cache is not None:
                    _store_kv(backend, row, past, mask[j])
                if on_done is not None:
                    on_done(row.index)
            else:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(active):
            idx = torch.tensor(keep, device=dev)
            past.batch_select_indices(idx)
            mask = mask[idx]
            active = [active[j] for j in keep]
        input_ids, step_mask, positions = _step_inputs(backend, active, dev)
        mask = torch.cat([mask, step_mask], dim=1)


@functools.cache
def _cache_kwarg(model_type: Any) -> str:
    """``cache`` in transformers >= 5.2x, ``past_key_values`` before (the older name is deprecated)."""
    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def _jump_forward(row: Any, tok: int) -> list[int]:
    """Advance the row's program past ``tok`` and collect the tokens it forces next (within budget)."""
    st = row.state
    if st is None:
        return []
    st.advance(tok)
    extra: list[int] = []
    room = row.request.max_new_tokens - len(row.generated) - 1
    while len(extra) < room and not st.done:
        forced = st.forced()
        if forced is None:
            break
        st.advance(forced)
        extra.append(forced)
    return extra


def _step_inputs(backend: Any, active: list[Any], dev: Any) -> tuple[Any, Any, Any]:
    """Left-padded [B, T] ids of each row's pending tokens, their mask columns and position ids."""
    t = max(len(r.feed) for r in active)
    ids = torch.full((len(active), t), backend.pad_id, dtype=torch.long)
    mask = torch.zeros((len(active), t), dtype=torch.long)
    pos = torch.zeros((len(active), t), dtype=torch.long)
    for i, r in enumerate(active):
        n = len(r.feed)
        start = len(r.request.prompt_ids) + len(r.generated) - n
        ids[i, t - n:] = torch.tensor(r.feed)
        mask[i, t - n:] = 1
        pos[i, t - n:] = torch.arange(start, start + n)
    return ids.to(dev), mask.to(dev), pos.to(dev)


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
    past = DynamicCache(config=backend.model.config)
    if c:
        past = DynamicCache(ddp_cache_data=_stack_kv(kvs, rows, c, dev), config=backend.model.config)
    return past, input_ids.to(dev), mask.to(dev), positions.to(dev)


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
    """Keep the row's real KV positions: the prompt and every generated id except the unfed last step."""
    ids = tuple(row.request.prompt_ids) + tuple(row.generated[:len(row.generated) - len(row.feed)])
    keep = mask_row.bool()
    kv = []
    j = row.batch_pos
    for layer in past.layers:
        kv.append((layer.keys[j][:, keep].clone(), layer.values[j][:, keep].clone()))
    if kv and kv[0][0].shape[1] == len(ids):
        backend.cache.put(ids, kv)


def _finished(backend: Any, row: Any) -> bool:
    if row.state is not None:
        if row.state.done:
            row.finish = "stop"
    elif row.generated[-1] in backend.stop_ids:
        row.finish = "stop"
    if not row.finish and len(row.generated) >= row.request.max_new_tokens:
        row.finish = "length"
    return bool(row.finish)


def _choose(backend: Any, active: list[Any], logits: torch.Tensor, temperature: float, top_p: float,
            bitmask: Any) -> list[int]:
    """Apply constraints row by row, then pick tokens (greedy: one argmax over the batch).

    Pattern rows are checked lazily when that is exact: the token is picked from the unmasked
    distribution and, only if the grammar rejects it, picked again from the masked one. For greedy
    decoding this is the masked argmax; for sampling with top_p = 1 it is rejection sampling, whose
    result is distributed exactly as sampling from the masked distribution, p(t) / p(allowed). Most
    free-text steps then cost no mask at all. With top_p < 1 the mask is applied first.
    """
    finite = (~(torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1)).tolist()
    forced: dict[int, int] = {}
    lazy: list[int] = []
    for j, row in enumerate(active):
        row.batch_pos = j
        if not finite[j]:
            row.finish, row.error = "error", "non-finite logits from the model"
            continue
        if row.state is not None:
            f = _constrain(backend, row, logits[j:j + 1], bitmask if top_p < 1.0 else None)
            if f is not None:
                forced[j] = f
            elif row.state.kind == "pattern" and top_p >= 1.0:
                lazy.append(j)
    picked = _pick(active, logits, temperature, top_p, forced, finite)
    for j in lazy:
        if not active[j].state.guide.accepts_tokens([picked[j]]):
            active[j].state.write_mask(bitmask)
            _apply_mask(logits[j:j + 1], bitmask)
            picked[j] = _pick_row(logits[j], temperature, top_p, active[j])
    return [forced.get(j, picked[j]) for j in range(len(active))]


def _pick(active: list[Any], logits: torch.Tensor, temperature: float, top_p: float, forced: dict[int, int],
          finite: list[bool]) -> list[int]:
    if temperature == 0:
        return logits.argmax(dim=-1).tolist()
    out = []
    for j, row in enumerate(active):
        row.noise = None
        out.append(_pick_row(logits[j], temperature, top_p, row) if j not in forced and finite[j] else 0)
    return out


def _pick_row(logits_row: torch.Tensor, temperature: float, top_p: float, row: Any) -> int:
    """Greedy argmax, or a sample by the Gumbel-max trick with the row's own noise for this step.

    argmax(logits / T + g), g ~ Gumbel(0, 1) from the row's seeded generator, is an exact sample of softmax(logits /
    T) (restricted to the top-p nucleus when top_p < 1). Unlike inverse-CDF sampling, which a float32 cumulative sum
    over the whole vocabulary makes sensitive to rounding in every probability, it changes only when the two best
    perturbed logits are within rounding of each other, so batch shapes that move logits by 1e-8 keep the same
    tokens. A re-pick under a grammar mask reuses the step's noise: the argmax over the allowed tokens is an exact
    sample of the masked distribution.
    """
    if temperature == 0:
        return int(logits_row.argmax())
    if row.noise is None:
        u = torch.rand(logits_row.shape, generator=row.generator, dtype=torch.float64)
        row.noise = -torch.log(-torch.log(u.clamp(min=1e-300, max=1.0 - 1e-16)))
    scaled = logits_row.double() / temperature
    if top_p < 1.0:
        probs = torch.softmax(scaled, dim=-1)
        sorted_p, order = probs.sort(descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p
        scaled = scaled.clone()
        scaled[order[drop]] = float("-inf")
    return int(torch.argmax(scaled + row.noise))


def _apply_mask(logits_row: torch.Tensor, bitmask: Any) -> None:
    from outlines_core.kernels.torch import apply_token_bitmask_inplace

    apply_token_bitmask_inplace(logits_row, bitmask)


def _constrain(backend: Any, row: Any, logits_row: torch.Tensor, bitmask: Any) -> int | None:
    """Mask one row's logits for its program (patterns only when ``bitmask`` is given); returns a forced
    token or None."""
    st = row.state
    forced = st.forced()
    if forced is not None:
        return forced
    if st.kind == "choice":
        ids = list(st.choice_ids())
        raw = logits_row[0, ids].clone()
        extra = (float(logits_row[0].max()),) if st.choice_with_max() else ()
        row.choice_logits.append(tuple(float(x) for x in raw) + extra)
        logits_row.fill_(float("-inf"))
        logits_row[0, ids] = raw
    elif bitmask is not None and st.write_mask(bitmask):
        _apply_mask(logits_row, bitmask)
    elif st.banned_stop():
        for s in backend.stop_ids:
            logits_row[0, s] = float("-inf")
    return None
