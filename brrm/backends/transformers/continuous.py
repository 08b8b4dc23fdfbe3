"""Continuous batching for the transformers backend: finished rows leave, queued rows join, every step.

:class:`~brrm.backends.transformers.decode.Decoder` decodes one chunk of rows to completion (the ``static``
scheduling): a short row's slot stays empty until the chunk's longest row ends, and a BR-RM turn 2 waits for
every turn 1 of its chunk. :class:`ContinuousDecoder` keeps one running batch of at most ``batch_size`` rows instead:

* after each decoding step, finished rows are dropped (their KV stored for a follow-up first, as in the static
  loop) and the free slots are refilled, follow-ups first (a chain's next request: BR-RM's turn 2 enters the
  batch the step its turn 1 ends, reusing turn 1's KV through the prefix cache), then the queue, shortest prompt
  first (as static chunks are sorted; a call's first results come sooner);
* joining rows are prefilled together in one forward pass of their own (so a decoding row never computes a
  padded prompt's worth of positions), then their KV is left-padded to the running batch's length and
  concatenated to it. The attention mask is 1 exactly on each row's real positions and position ids are
  explicit, so a row attends to what it would attend to alone; leading columns no row uses are cut off.

Calls arriving while a batch decodes join it (the backend declares ``capabilities.concurrent``): the first call's
thread runs the batch; a later call with the same sampling settings adds its chains (:class:`Job`) to the queue
and waits. Everything a call's callbacks do (``then``, ``on_complete``, ``on_step``) runs in that call's own
thread: the running thread hands a joined call's finished rows to it (:meth:`ContinuousDecoder.serve`), and the
joined call answers with the chain's next request, so a judge's turn 2 is built where it would be built alone.

With the batch-invariant forward (:mod:`brrm.backends.transformers.invariant`, the CPU default) a row's logits are the
same bits in any batch, so results are byte-identical to static scheduling, to ``batch_size=1`` and to a call running
alone (``tests/test_continuous.py``).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from brrm.backends.base import Completion, FollowUp, Next, OnStep
from brrm.backends.transformers.decode import Decoder, _cache_kwarg
from brrm.backends.transformers.kvbuffer import full_layers, layer_tensors
from brrm.backends.transformers.rows import BatchingContext, Row
from brrm.backends.transformers.sampling import choose

if TYPE_CHECKING:
    from transformers import DynamicCache, PretrainedConfig

MakeRow = Callable[[int, Next], Row]
Settings = tuple[float, float, int]
"""A running batch's sampling settings ``(temperature, top_p, top_k)``: only calls with the same ones join it."""


class _Batch:
    """The running rows with their KV cache and attention mask ``[B, L]`` (1 on real positions)."""

    def __init__(self, rows: list[Row], past: DynamicCache, mask: torch.Tensor) -> None:
        self.rows, self.past, self.mask = rows, past, mask


@dataclass
class Job:
    """One ``generate`` call's chains in the running batch.

    Attributes:
        firsts: each chain's first request.
        then: a chain's follow-up (see :func:`brrm.backends.base.generate_chains`); None ends every chain after
            its first request.
        on_step: progress callback ``(rows in the running batch, tokens added)``, or None.
        owner: this call's thread runs the batch (its callbacks are called inline).
        abandoned: this joined call raised in its own thread; its rows' results are dropped.
        keys: per chain, its row key in the running batch (set when the job is added).
        last: per chain, its last completion (filled as chains end).
        open: chains not ended yet.
        inbox: events for a joined call's thread: ``("done", chain, completion)``, ``("step", rows, tokens)``,
            ``("raise", 0, exception)``.
    """

    firsts: Sequence[Next]
    then: FollowUp | None
    on_step: OnStep | None = None
    owner: bool = False
    abandoned: bool = False
    keys: list[int] = field(default_factory=list)
    last: dict[int, Completion] = field(default_factory=dict)
    open: int = 0
    inbox: queue.SimpleQueue[tuple[str, int, object]] = field(default_factory=queue.SimpleQueue)

    def results(self) -> list[Completion]:
        """Each chain's last completion, in order."""
        return [self.last[i] for i in range(len(self.firsts))]


class ContinuousDecoder:
    """Runs chains of requests (of one or several calls) through one continuously refilled batch.

    Args:
        backend: the backend's model, prefix cache, pad id, stop ids, stats, ``batch_size`` and completions.
        temperature, top_p, top_k: sampling settings of every row (temperature 0 = greedy; top_k 0 = no cut).
        make_row: builds a row (seeded sampler, program state) for row key ``k``'s request.
    """

    def __init__(self, backend: BatchingContext, *, temperature: float, top_p: float, make_row: MakeRow,
                 top_k: int = 0) -> None:
        self.backend, self.make_row = backend, make_row
        self.settings: Settings = (temperature, top_p, top_k)
        self.decoder = Decoder(backend, temperature=temperature, top_p=top_p, keep_kv=False,
                               on_done=self._row_done, top_k=top_k)
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.kwarg = _cache_kwarg(type(backend.model))  # type: ignore[arg-type]
        self.live: dict[int, Row] = {}
        self.chains: dict[int, tuple[Job, int]] = {}
        self.jobs: list[Job] = []
        self.queue: deque[Row] = deque()
        self.follow: deque[Row] = deque()
        self.bitmask: torch.Tensor | None = None
        self.cond = threading.Condition()
        self.next_key = 0
        self.pending = 0  # finished rows of joined calls whose next request is awaited from their thread
        self.closed = False
        self.outbox: list[tuple[Job, tuple[str, int, object]]] = []  # joined calls' finished rows of this step

    def add(self, job: Job) -> bool:
        """Queue ``job``'s chains; False (nothing queued) when the batch has ended."""
        with self.cond:
            if self.closed:
                return False
            job.keys = list(range(self.next_key, self.next_key + len(job.firsts)))
            job.open = len(job.firsts)
            self.next_key += len(job.firsts)
            self.pending += 1  # the batch does not end while this job's rows are being built
        rows = [self.make_row(key, step) for key, step in zip(job.keys, job.firsts, strict=True)]
        with self.cond:
            for i, key in enumerate(job.keys):
                self.chains[key] = (job, i)
            self.jobs.append(job)
            self.queue.extend(sorted(rows, key=lambda r: len(r.request.prompt_ids)))  # shortest first, as static
            self.pending -= 1
            self.cond.notify_all()
        return True

    def run(self) -> None:
        """Decode until every added job's chains have ended (run by the owner call's thread).

        Raises:
            whatever the forward or a callback raises; joined calls then raise it too.
        """
        try:
            self._loop()
        except BaseException as exc:
            with self.cond:
                self.closed = True
                for job in self.jobs:
                    if not job.owner and job.open:
                        job.inbox.put(("raise", 0, exc))
            raise

    def _loop(self) -> None:
        batch: _Batch | None = None
        stats = self.backend.stats
        while True:
            with self.cond:
                while not (self.queue or self.follow or batch is not None):
                    if self.pending == 0:
                        self.closed = True
                        return
                    self.cond.wait()
                free = self.backend.batch_size - (len(batch.rows) if batch is not None else 0)
                joiners = [(self.follow or self.queue).popleft()
                           for _ in range(min(max(free, 0), len(self.queue) + len(self.follow)))]
            before = stats["generated_tokens"]
            if joiners:
                batch = _merge(batch, self._prefill(joiners), self.backend.model.config)
            rows = len(batch.rows) if batch is not None else 0
            if batch is not None:
                batch = self._step(batch.rows, batch)
            self._progress(rows, stats["generated_tokens"] - before)
            self._flush()

    def serve(self, job: Job) -> None:
        """A joined call's thread: run its callbacks on its finished rows until its chains have ended.

        Raises:
            what the running thread raised.
        """
        while job.open:
            kind, chain, payload = job.inbox.get()
            if kind == "raise":
                assert isinstance(payload, BaseException)
                raise payload
            if kind == "step":
                assert job.on_step is not None and isinstance(payload, int)
                job.on_step(chain, payload)
                continue
            assert isinstance(payload, Completion)
            try:
                step = job.then(chain, payload) if job.then is not None else None
                row = self.make_row(job.keys[chain], step) if step is not None else None
            except BaseException:
                self._abandon(job)
                raise
            with self.cond:
                self._decided(job, chain, payload, row)
                self.pending -= 1
                self.cond.notify_all()

    def _flush(self) -> None:
        """Hand joined calls their rows finished this step (after the step's progress: a call sees its last step)."""
        with self.cond:
            for job, event in self.outbox:
                if not job.abandoned:
                    self.pending += 1
                    job.inbox.put(event)
            self.outbox.clear()

    def _abandon(self, job: Job) -> None:
        """A joined call failed in its own thread: its queued rows are dropped, its running rows end unheard."""
        with self.cond:
            job.abandoned = True
            self.pending -= 1  # the event being served
            while not job.inbox.empty():
                if job.inbox.get()[0] == "done":
                    self.pending -= 1
            self.queue = deque(r for r in self.queue if self.chains[r.index][0] is not job)
            self.follow = deque(r for r in self.follow if self.chains[r.index][0] is not job)
            self.cond.notify_all()

    def _progress(self, rows: int, tokens: int) -> None:
        for job in self.jobs:
            if job.on_step is not None:
                if job.owner:
                    job.on_step(rows, tokens)
                elif job.open:  # a chain's end is counted in its own thread, after this step's event
                    job.inbox.put(("step", rows, tokens))

    def _prefill(self, rows: list[Row]) -> _Batch | None:
        for row in rows:
            self.live[row.index] = row
        past, ids, mask, positions, expand = self.decoder._prefill_inputs(rows)
        return self._forward(_Batch(rows, past, mask), ids, positions, expand)

    def _step(self, rows: list[Row], batch: _Batch) -> _Batch | None:
        ids, step_mask, positions = self.decoder._step_inputs(rows)
        batch.mask = torch.cat([batch.mask, step_mask], dim=1)
        return self._forward(batch, ids, positions)

    def _forward(self, batch: _Batch, ids: torch.Tensor, positions: torch.Tensor,
                 expand: torch.Tensor | None = None) -> _Batch | None:
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

    def _row_done(self, key: int) -> None:
        """A row finished: the owner's chain gets its follow-up now; a joined call's is asked for in its thread."""
        row = self.live.pop(key)
        comp = self.backend.complete(row)
        job, chain = self.chains[key]
        if job.abandoned:
            return
        if not job.owner:
            self.outbox.append((job, ("done", chain, comp)))
            return
        step = job.then(chain, comp) if job.then is not None else None
        new = self.make_row(key, step) if step is not None else None
        with self.cond:
            self._decided(job, chain, comp, new)

    def _decided(self, job: Job, chain: int, comp: Completion, row: Row | None) -> None:
        """Chain ``chain`` of ``job`` goes on with ``row`` (to the front of the queue), or ends with ``comp``."""
        if row is not None:
            self.follow.append(row)
            return
        job.last[chain] = comp
        job.open -= 1


def _merge(running: _Batch | None, joined: _Batch | None, config: PretrainedConfig) -> _Batch | None:
    """The running batch with the joined rows appended (both left-padded to the longer mask), each layer's keys
    and values copied once, into a buffer with room for the next steps."""
    from brrm.backends.transformers.kvbuffer import stacked_cache

    if running is None or joined is None:
        return joined if running is None else running
    length = max(running.mask.shape[1], joined.mask.shape[1])
    past = stacked_cache(config, [running.past, joined.past], length)
    mask = torch.cat([_left_pad(running.mask, length, 1), _left_pad(joined.mask, length, 1)])
    return _Batch(running.rows + joined.rows, past, mask)


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    """``t`` with zeros prepended along ``dim`` up to ``length``."""
    extra = length - t.shape[dim]
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _compact(batch: _Batch) -> _Batch:
    """Cut the leading mask columns no row uses (left by rows that left), keys and values with them."""
    used = batch.mask.any(dim=0)
    first = int(used.to(torch.int8).argmax()) if bool(used.any()) else 0
    if first > 0:
        batch.mask = batch.mask[:, first:]
        for layer in full_layers(batch.past):  # views: a GrowingLayer appends after them in place
            keys, values = layer_tensors(layer)
            layer.keys, layer.values = keys[:, :, first:], values[:, :, first:]
    return batch
