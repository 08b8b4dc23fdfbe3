"""The batched decoding loop of the transformers backend (see :mod:`brrm.backends.transformers`).

Every row has a slot of its own in a :class:`~brrm.backends.transformers.slots.SlotCache`: its keys and values are
one contiguous run from position 0 of the slot, whatever the batch. A forward feeds each row its new tokens,
left-padded to the forward's width, with explicit position ids (the row's own next positions); only each row's
real positions are computed by the row-wise layers and written to its slot, so each row computes what it would
compute alone. A prefill writes a row's cached prefix (from the prefix cache) into its slot first and feeds the
rest of its prompt. Finished rows leave the batch (their KV stored for reuse when asked); the last running rows
move into the slots they left, so a forward's rows are always consecutive slots.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from brrm.backends.transformers.rows import DecodeContext, Row
from brrm.backends.transformers.sampling import choose
from brrm.backends.transformers.slots import KV, MaskFor, SlotCache, Step, sliding_windows, stepping

if TYPE_CHECKING:
    from transformers import PreTrainedModel


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
        self.kwarg = _cache_kwarg(type(backend.model))  # type: ignore[arg-type]
        self.bitmask: torch.Tensor | None = None

    def run(self, rows: list[Row]) -> None:
        """Decode every row to completion in place (fills generated, finish, choice_logits).

        Each step feeds every active row its pending tokens: the token just chosen plus any tokens its
        constraint program forces next (fixed markers), so fixed text costs one forward pass, not one per
        token.
        """
        cache = self.new_cache(rows, len(rows))
        active = self.settle(rows, self.prefill(rows, cache, 0), cache, 0)
        while active:
            active = self.settle(active, self.step(active, cache), cache, 0)

    def new_cache(self, rows: list[Row], slots: int) -> SlotCache:
        """A slot cache for up to ``slots`` rows, sized for ``rows``' prompts and a first stretch of decoding (it
        grows as rows need more: a budget that is never used is never allocated)."""
        from brrm.backends.transformers.slots import HEADROOM

        need = max(len(r.request.prompt_ids) + min(r.request.max_new_tokens, 4 * HEADROOM) for r in rows)
        return SlotCache(self.backend.model.config, slots, need, first=len(rows))

    def prefill(self, rows: list[Row], cache: SlotCache, lo: int) -> torch.Tensor:
        """Prefill ``rows`` into slots ``lo, lo + 1, …``: each row's cached prefix (from the prefix cache) is written
        into its slot and the rest of its prompt fed; identical uncached prompts are computed once (with the prefix
        cache on: the k samples of self-consistency voting share their turn-1 prefill) and copied to every row's
        slot. Returns each row's last logits, float ``[len(rows), vocab]``."""
        backend = self.backend
        kvs: list[KV | None] = []
        for row in rows:
            n, kv = backend.cache.take(row.request.prompt_ids) if backend.cache is not None else (0, None)
            row.cached = n
            kvs.append(kv)
        unique, expand = _shared_prompts(rows, backend.cache is not None)
        shared = set(range(len(rows))) - set(unique)
        backend.stats["shared_prompt_tokens"] += sum(len(rows[i].request.prompt_ids) for i in shared)
        fed = [rows[i] for i in unique]
        for u, i in enumerate(unique):
            kv = kvs[i]
            if kv is not None and rows[i].cached:
                cache.write(lo + u, kv)
        new = [r.request.prompt_ids[r.cached:] for r in fed]
        backend.stats["prefill_tokens"] += sum(len(x) for x in new)
        backend.stats["cached_tokens"] += sum(r.cached for r in rows)
        step = Step(lo, tuple(r.cached for r in fed), tuple(len(x) for x in new), max(len(x) for x in new))
        logits = self.forward(cache, step, new)
        if len(unique) < len(rows):
            cache.move([lo + e for e in expand], lo, max(len(r.request.prompt_ids) for r in fed))
            logits = logits[torch.tensor(expand)]
        return logits

    def step(self, rows: list[Row], cache: SlotCache, lo: int = 0) -> torch.Tensor:
        """One decoding step of ``rows`` (slots ``lo, …``): each feeds its pending tokens. Returns last logits."""
        feeds = [r.feed for r in rows]
        step = Step(lo, tuple(kv_length(r) for r in rows), tuple(len(f) for f in feeds), max(len(f) for f in feeds))
        return self.forward(cache, step, feeds)

    def forward(self, cache: SlotCache, step: Step, feeds: list[list[int]] | list[tuple[int, ...]]) -> torch.Tensor:
        """The model on ``feeds`` (per row, its new ids, left-padded to ``step.width``) at each row's own positions;
        returns the last position's logits, float ``[rows, vocab]``."""
        t, pad = step.width, self.backend.pad_id
        ids = torch.tensor([[pad] * (t - len(feed)) + list(feed) for feed in feeds], dtype=torch.long)
        pos = torch.tensor([[0] * (t - len(feed)) + list(range(start, start + len(feed)))
                            for feed, start in zip(feeds, step.starts, strict=True)], dtype=torch.long)
        with stepping(step):
            out = self.backend.model(input_ids=ids.to(self.dev), attention_mask=self.backend.mask(step),
                                     position_ids=pos.to(self.dev), use_cache=True, logits_to_keep=1,
                                     **{self.kwarg: cache})
        self.backend.stats["forward_calls"] += 1
        return out.logits[:, -1, :].float()

    def settle(self, rows: list[Row], logits: torch.Tensor, cache: SlotCache, lo: int) -> list[Row]:
        """Choose each row's next tokens from ``logits``; finished rows leave (their KV stored when asked) and the
        last running rows move into the slots they left (:func:`_refill`), so the running rows are slots ``lo, lo +
        1, …`` again. Returns the rows still running, in their new slot order."""
        if self.bitmask is None and any(r.state is not None for r in rows):
            from brrm.backends.transformers.bitmask import allocate

            self.bitmask = allocate(logits.shape[-1])
        tokens = choose(self.backend.stop_ids, rows, logits, self.temperature, self.top_p, self.bitmask, self.top_k)
        return self.retire(rows, self._advance(rows, tokens, cache, lo), cache, lo)

    def retire(self, rows: list[Row], keep: list[int], cache: SlotCache, lo: int) -> list[Row]:
        """Keep only the batch positions ``keep`` (ascending) of ``rows`` (slots ``lo, …``): the last kept rows move
        into the slots the others leave (:func:`_refill`). Returns the kept rows in their new slot order. Used for
        finished rows and for rows whose request left (no completion is made for those)."""
        if len(keep) == len(rows) or not keep:
            return [rows[j] for j in keep]
        order = _refill(keep)
        movers = [rows[j] for p, j in enumerate(order) if p != j]
        if movers:  # none when only the last rows left
            cache.move([lo + j for j in order], lo, max(kv_length(r) for r in movers))
        return [rows[j] for j in order]

    def _advance(self, active: list[Row], tokens: list[int], cache: SlotCache, lo: int) -> list[int]:
        """Feed each row its chosen token (and forced ones); returns the batch positions still running."""
        keep = []
        for j, (row, tok) in enumerate(zip(active, tokens, strict=True)):
            if row.finish:  # an error found while choosing (non-finite logits: its slot may hold NaN)
                cache.clear(lo + j)
                self._done(row)
                continue
            row.feed = [tok] + _jump_forward(row, tok, self.backend.jump_forward)
            row.generated.extend(row.feed)
            self.backend.stats["generated_tokens"] += len(row.feed)
            if self._finished(row):
                if (self.keep_kv or row.keep_kv) and self.backend.cache is not None:
                    self._store_kv(row, cache, lo + j)
                self._done(row)
            else:
                keep.append(j)
        return keep

    def _done(self, row: Row) -> None:
        if self.on_done is not None:
            self.on_done(row.index)

    def _store_kv(self, row: Row, cache: SlotCache, slot: int) -> None:
        """Keep the row's KV: the prompt and every generated id except the unfed last step."""
        ids = tuple(row.request.prompt_ids) + tuple(row.generated[:len(row.generated) - len(row.feed)])
        if self.backend.cache is not None:
            self.backend.cache.put(ids, cache.read(slot, len(ids)), len(row.request.prompt_ids))

    def _finished(self, row: Row) -> bool:
        if row.state is not None:
            if row.state.done:
                row.finish = "stop"
        elif row.generated[-1] in self.backend.stop_ids:
            row.finish = "stop"
        if not row.finish and len(row.generated) >= row.request.max_new_tokens:
            row.finish = "length"
        return bool(row.finish)


def _refill(keep: list[int]) -> list[int]:
    """The batch positions ``keep`` (ascending) in their new slot order: rows below ``len(keep)`` stay where they are
    and the rows above fill the holes below, in order. A leaving row then costs one copy per hole it leaves, not a
    shift of every row after it; where a row sits does not change its values (each row computes alone)."""
    n = len(keep)
    movers = iter(j for j in keep if j >= n)
    staying = set(keep)
    return [p if p in staying else next(movers) for p in range(n)]


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


def kv_length(row: Row) -> int:
    """Positions of ``row``'s slot written so far: its prompt and every generated id but the pending feed."""
    return len(row.request.prompt_ids) + len(row.generated) - len(row.feed)


_NO_MASK = torch.ones((1, 1, 1, 1), dtype=torch.bool)
"""What a forward on the row-wise attention passes as its (prepared, 4D) mask: the attention reads the step."""


STOCK_ATTENTION = ("sdpa", "eager", None)
"""The stock attention implementations a slot forward runs on (None: unset, transformers' eager path): they take
the step's 4D mask as it is. Flash, flex and paged kernels read a padding mask or none, and would attend to other
positions of a row's slot."""


def mask_for(model: PreTrainedModel) -> MaskFor:
    """How a forward of ``model`` tells attention what each row attends to.

    The batch-invariant row-wise attention reads the running :class:`~brrm.backends.transformers.slots.Step`
    itself, so it gets a placeholder; a stock attention gets the step's 4D mask (bool; additive float for
    ``eager``), within the sliding window on sliding-window layers (a ``{"full_attention", "sliding_attention"}``
    mapping when the model mixes both).

    Raises:
        ConfigError: for a model the slot cache cannot hold (:func:`~brrm.backends.transformers.slots.sliding_windows`)
            or an attention implementation other than :data:`STOCK_ATTENTION` and the row-wise one.
    """
    from brrm.backends.transformers.invariant import ATTENTION
    from brrm.errors import ConfigError

    config = model.config
    full, window = sliding_windows(config)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation == ATTENTION:
        return lambda step: _NO_MASK
    if implementation not in STOCK_ATTENTION:
        raise ConfigError(f"the transformers backend decodes with attention 'sdpa' or 'eager' (a 4D mask over each "
                          f"row's own slot), not {implementation!r}: load the model with attn_implementation='sdpa'")
    dtype = model.dtype

    def stock(step: Step, sliding: bool = False) -> torch.Tensor:
        allowed = step.mask(window if sliding else None).to(model.device)
        if implementation != "sdpa":  # eager (or unset: transformers' eager path) adds the mask to its scores
            return torch.zeros(allowed.shape, dtype=dtype, device=model.device).masked_fill(
                ~allowed, torch.finfo(dtype).min)
        return allowed

    if full and window is not None:
        return lambda step: {"full_attention": stock(step), "sliding_attention": stock(step, True)}
    return functools.partial(stock, sliding=window is not None)


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
