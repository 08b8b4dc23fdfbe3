"""Continuous batching for the transformers backend: finished rows leave, queued rows join, every step.

:class:`~brrm.backends._decode.Decoder` decodes one chunk of rows to completion (the ``static`` scheduling): a
short row's slot stays empty until the chunk's longest row ends, and a BR-RM turn 2 waits for every turn 1 of
its chunk. :class:`ContinuousDecoder` keeps one running batch of at most ``batch_size`` rows instead:

* after each decoding step, finished rows are dropped (their KV stored for a follow-up first, as in the static
  loop) and the free slots are refilled, follow-ups first (a chain's next request: BR-RM's turn 2 enters the
  batch the step its turn 1 ends, reusing turn 1's KV through the prefix cache), then the queue in input order;
* joining rows are prefilled together in one forward pass of their own (so a decoding row never computes a
  padded prompt's worth of positions), then their KV is left-padded to the running batch's length and
  concatenated to it. The attention mask is 1 exactly on each row's real positions and position ids are
  explicit, so a row attends to what it would attend to alone; leading columns no row uses are cut off.

With the batch-invariant forward (:mod:`brrm.backends._invariant`, the CPU default) a row's logits are the same
bits in any batch, so results are byte-identical to static scheduling and to ``batch_size=1``
(``tests/test_continuous.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from brrm.backends._decode import Decoder, _cache_kwarg
from brrm.backends._rows import BatchingContext, Row
from brrm.backends._sampling import choose
from brrm.backends.base import Completion, FollowUp, Next, OnStep

MakeRow = Callable[[int, Next], Row]


class _Batch:
    """The running rows with their KV cache and attention mask ``[B, L]`` (1 on real positions)."""

    def __init__(self, rows: list[Row], past: Any, mask: torch.Tensor) -> None:
        self.rows, self.past, self.mask = rows, past, mask


class ContinuousDecoder:
    """Runs chains of requests through one continuously refilled batch.

    Args:
        backend: the backend whose model, prefix cache, pad id, stop ids, stats and ``batch_size`` are used.
        temperature, top_p, top_k: sampling settings of every row (temperature 0 = greedy; top_k 0 = no cut).
        make_row: builds a row (seeded sampler, program state) for chain ``i``'s request.
        then: a chain's follow-up (see :func:`brrm.backends.base.generate_chains`); None ends every chain after
            its first request.
        on_step: called after every decoding step with (rows in the running batch, tokens added since the last
            call, joining rows' first tokens included), for progress displays.
    """

    def __init__(self, backend: BatchingContext, *, temperature: float, top_p: float, make_row: MakeRow,
                 then: FollowUp | None, on_step: OnStep | None = None, top_k: int = 0) -> None:
        self.backend, self.make_row, self.then, self.on_step = backend, make_row, then, on_step
        self.decoder = Decoder(backend, temperature=temperature, top_p=top_p, keep_kv=False,
                               on_done=self._row_done, top_k=top_k)
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.kwarg = _cache_kwarg(type(backend.model))  # type: ignore[arg-type]
        self.live: dict[int, Row] = {}
        self.last: dict[int, Completion] = {}
        self.follow: deque[Row] = deque()
        self.bitmask: Any = None

    def run(self, firsts: Sequence[Next]) -> list[Completion]:
        """Every chain to its end; returns each chain's last completion, in order."""
        queue = deque(self.make_row(i, step) for i, step in enumerate(firsts))
        batch: _Batch | None = None
        slots = self.backend.batch_size
        stats = self.backend.stats
        while queue or self.follow or batch is not None:
            before = stats["generated_tokens"]
            free = slots - (len(batch.rows) if batch is not None else 0)
            if free > 0 and (queue or self.follow):
                joiners = [(self.follow or queue).popleft() for _ in range(min(free, len(queue) + len(self.follow)))]
                batch = _merge(batch, self._prefill(joiners), self.backend.model.config)
            rows = len(batch.rows) if batch is not None else 0
            if batch is not None:
                batch = self._step(batch.rows, batch)
            if self.on_step is not None:
                self.on_step(rows, stats["generated_tokens"] - before)
        return [self.last[i] for i in range(len(firsts))]

    def _prefill(self, rows: list[Row]) -> _Batch | None:
        for row in rows:
            self.live[row.index] = row
        past, ids, mask, positions, expand = self.decoder._prefill_inputs(rows)
        return self._forward(_Batch(rows, past, mask), ids, positions, expand)

    def _step(self, rows: list[Row], batch: _Batch) -> _Batch | None:
        ids, step_mask, positions = self.decoder._step_inputs(rows)
        batch.mask = torch.cat([batch.mask, step_mask], dim=1)
        return self._forward(batch, ids, positions)

    def _forward(self, batch: _Batch, ids: Any, positions: Any, expand: Any = None) -> _Batch | None:
        """One forward pass, a token per row, finished rows dropped; None when no row is left. ``expand``: after a
        prefill whose identical prompts were computed once, each row's index into the computed ones."""
        backend = self.backend
        try:
            out = backend.model(input_ids=ids, attention_mask=batch.mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **{self.kwarg: batch.past})
        except RuntimeError as exc:  # a model/device failure (e.g. OOM) fails only these rows; bugs elsewhere raise
            for row in batch.rows:
                row.finish, row.error = "error", f"{type(exc).__name__}: {exc}"
                self._row_done(row.index)
            return None
        backend.stats["forward_calls"] += 1
        past = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1, :].float()
        if expand is not None:  # rows that shared a prefill get their own copy of its KV and last logits
            past.batch_select_indices(expand)
            batch.mask, logits = batch.mask[expand], logits[expand]
        if self.bitmask is None and any(r.state is not None for r in batch.rows):
            from outlines_core.kernels.torch import allocate_token_bitmask

            self.bitmask = allocate_token_bitmask(logits.shape[-1])
        tokens = choose(backend.stop_ids, batch.rows, logits, self.temperature, self.top_p, self.bitmask, self.top_k)
        keep = self.decoder._advance(batch.rows, tokens, past, batch.mask)
        for j, row in enumerate(batch.rows):
            if row.finish == "error" and j not in keep:  # non-finite logits: _advance skipped its callback
                self._row_done(row.index)
        if not keep:
            return None
        mask = batch.mask
        if len(keep) < len(batch.rows):
            idx = torch.tensor(keep, device=mask.device)
            past.batch_select_indices(idx)
            mask = mask[idx]
        return _compact(_Batch([batch.rows[j] for j in keep], past, mask))

    def _row_done(self, index: int) -> None:
        """A row finished: its chain's follow-up joins the queue's front, or the chain's result is kept."""
        row = self.live.pop(index)
        comp = self.backend._completion(row)
        step = self.then(index, comp) if self.then is not None else None
        if step is None:
            self.last[index] = comp
        else:
            self.follow.append(self.make_row(index, step))


def _layers(past: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in past.layers]


def _cache(layers: list[tuple[torch.Tensor, torch.Tensor]], config: Any) -> Any:
    from brrm.backends._kvbuffer import growing_cache

    return growing_cache(config, layers)


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    """``t`` with zeros prepended along ``dim`` up to ``length``."""
    extra = length - t.shape[dim]
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _merge(running: _Batch | None, joined: _Batch | None, config: Any) -> _Batch | None:
    """The running batch with the joined rows appended (both left-padded to the longer mask)."""
    if running is None or joined is None:
        return joined if running is None else running
    length = max(running.mask.shape[1], joined.mask.shape[1])
    layers = [(torch.cat([_left_pad(ka, length, 2), _left_pad(kb, length, 2)]),
               torch.cat([_left_pad(va, length, 2), _left_pad(vb, length, 2)]))
              for (ka, va), (kb, vb) in zip(_layers(running.past), _layers(joined.past), strict=True)]
    mask = torch.cat([_left_pad(running.mask, length, 1), _left_pad(joined.mask, length, 1)])
    return _Batch(running.rows + joined.rows, _cache(layers, config), mask)


def _compact(batch: _Batch) -> _Batch:
    """Cut the leading mask columns no row uses (left by rows that left), keys and values with them."""
    used = batch.mask.any(dim=0)
    first = int(used.to(torch.int8).argmax()) if bool(used.any()) else 0
    if first > 0:
        batch.mask = batch.mask[:, first:]
        for layer in batch.past.layers:  # views: the next step's concatenation copies them anyway
            layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
    return batch
