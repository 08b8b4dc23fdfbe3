"""Continuous batching for the transformers backend: finished rows leave, queued rows join, every step.

:class:`~brrm.backends.transformers.decode.Decoder` decodes one chunk of rows to completion (the ``static``
scheduling): a short row's slot stays empty until the chunk's longest row ends, and a BR-RM turn 2 waits for
every turn 1 of its chunk. :class:`ContinuousDecoder` keeps one running batch of at most ``batch_size`` rows instead:

* after each decoding step, finished rows are dropped (their KV stored for a follow-up first, as in the static
  loop) and the free slots are refilled, follow-ups first (a chain's next request: BR-RM's turn 2 enters the
  batch the step its turn 1 ends, reusing turn 1's KV through the prefix cache), then the queue, shortest prompt
  first (as static chunks are sorted; a call's first results come sooner);
* joining rows are prefilled together in one forward pass of their own (so a decoding row never computes a
  padded prompt's worth of positions), straight into free slots of the batch's
  :class:`~brrm.backends.transformers.slots.SlotCache`: no running row's keys are copied when rows join, and a
  row that leaves costs a copy of the slots after it only.

Calls arriving while a batch decodes join it (the backend declares ``capabilities.concurrent``): the batch runs
on a thread of its own (:meth:`ContinuousDecoder.run`, started by the first call), and every call with the same
sampling settings adds its chains (:class:`Job`) to the queue and waits. Everything a call's callbacks do
(``then``, ``on_complete``, ``on_step``) runs in that call's own thread: the batch's thread hands each call its
finished rows (:meth:`ContinuousDecoder.serve`), and the call answers with the chain's next request, so a judge's
turn 2 is built where it would be built alone.

Every row belongs to one call. A call leaves alone — its request's :class:`~brrm.cancellation.CancelToken` was
set (disconnect, deadline, a stalled call given up), or one of its callbacks raised: its queued rows are dropped
and its running rows are retired at the next step, their slots freed (:meth:`Decoder.retire
<brrm.backends.transformers.decode.Decoder.retire>`); the call raises (:class:`~brrm.cancellation.Cancelled` for
a token) and every other row decodes on to the same bits it gives alone.

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

from brrm.backends.base import Completion, FollowUp, Next, OnStep
from brrm.backends.transformers.decode import Decoder
from brrm.backends.transformers.rows import BatchingContext, Row
from brrm.cancellation import Cancelled, CancelToken

if TYPE_CHECKING:
    from brrm.backends.transformers.slots import SlotCache

MakeRow = Callable[[int, Next], Row]
Settings = tuple[float, float, int]
"""A running batch's sampling settings ``(temperature, top_p, top_k)``: only calls with the same ones join it."""


@dataclass
class Job:
    """One ``generate`` call's chains in the running batch.

    Attributes:
        firsts: each chain's first request.
        then: a chain's follow-up (see :func:`brrm.backends.base.generate_chains`); None ends every chain after
            its first request.
        on_step: progress callback ``(rows in the running batch, tokens added)``, or None.
        token: the request's cancellation token (None: the call cannot be cancelled from outside).
        abandoned: this call left (cancelled, or a callback raised in its thread); its rows are retired.
        keys: per chain, its row key in the running batch (set when the job is added).
        last: per chain, its last completion (filled as chains end).
        open: chains not ended yet.
        inbox: events for the call's thread: ``("done", chain, completion)``, ``("step", rows, tokens)``,
            ``("raise", 0, exception)``.
    """

    firsts: Sequence[Next]
    then: FollowUp | None
    on_step: OnStep | None = None
    token: CancelToken | None = None
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
        self.live: dict[int, Row] = {}
        self.rows: list[Row] = []  # the running batch: row b in slot b
        self.cache: SlotCache | None = None
        self.chains: dict[int, tuple[Job, int]] = {}
        self.jobs: list[Job] = []
        self.queue: deque[Row] = deque()
        self.follow: deque[Row] = deque()
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
        """Decode until every added job's chains have ended (run on the batch's own thread).

        Raises:
            whatever the forward raises; every call still waiting then raises it too.
        """
        try:
            self._loop()
        except BaseException as exc:
            with self.cond:
                self.closed = True
                for job in self.jobs:
                    if job.open and not job.abandoned:
                        job.inbox.put(("raise", 0, exc))
            raise

    def _loop(self) -> None:
        stats = self.backend.stats
        while True:
            with self.cond:
                self._cancel_requested()
                while not (self.queue or self.follow or self.rows):
                    if self.pending == 0:
                        self.closed = True
                        return
                    self.cond.wait(0.05)
                    self._cancel_requested()
                free = self.backend.batch_size - len(self.rows)
                joiners = [(self.follow or self.queue).popleft()
                           for _ in range(min(max(free, 0), len(self.queue) + len(self.follow)))]
            self._retire()
            before = stats["generated_tokens"]
            if joiners:
                self._join(joiners)
            running = len(self.rows)
            if self.rows:
                self.rows = self._settled(self.rows, 0)
            self._progress(running, stats["generated_tokens"] - before)
            self._flush()

    def _join(self, rows: list[Row]) -> None:
        """Prefill ``rows`` into the free slots after the running rows; those still running join the batch."""
        for row in rows:
            self.live[row.index] = row
        if self.cache is None:
            self.cache = self.decoder.new_cache(rows, self.backend.batch_size)
        self.rows += self._settled(rows, len(self.rows), prefill=True)

    def _settled(self, rows: list[Row], lo: int, prefill: bool = False) -> list[Row]:
        """One forward of ``rows`` (slots ``lo, …``: a prefill, or a decoding step), tokens chosen, finished rows
        dropped; returns the rows still running. A model/device failure (e.g. OOM) fails only these rows."""
        cache = self.cache
        assert cache is not None  # made by the first join
        try:
            logits = self.decoder.prefill(rows, cache, lo) if prefill else self.decoder.step(rows, cache, lo)
        except RuntimeError as exc:  # bugs elsewhere raise
            for row in rows:
                row.finish, row.error = "error", f"{type(exc).__name__}: {exc}"
                self._row_done(row.index)
            return []
        return self.decoder.settle(rows, logits, cache, lo)

    def _retire(self) -> None:
        """Drop the running rows of calls that left (their slots are free for the next joiners)."""
        keep = [j for j, row in enumerate(self.rows) if not self.chains[row.index][0].abandoned]
        if len(keep) == len(self.rows):
            return
        for j, row in enumerate(self.rows):
            if j not in keep:
                self.live.pop(row.index, None)
                self.backend.stats["retired_rows"] = self.backend.stats.get("retired_rows", 0) + 1
        assert self.cache is not None
        self.rows = self.decoder.retire(self.rows, keep, self.cache, 0)

    def _cancel_requested(self) -> None:
        """(Under ``cond``) every call whose token was set leaves: its thread is told, its rows retired."""
        for job in self.jobs:
            if job.token is not None and job.token.cancelled and not job.abandoned and job.open:
                self._leave(job)
                job.inbox.put(("raise", 0, Cancelled(job.token.reason)))
        self.jobs = [job for job in self.jobs if not job.abandoned]

    def serve(self, job: Job) -> None:
        """A call's thread: run its callbacks on its finished rows until its chains have ended.

        Raises:
            Cancelled: the job's token was set (its rows are retired at the batch's next step).
            what the batch's thread raised, or what this call's own callbacks raised.
        """
        try:
            self._serve(job)
        except BaseException:  # Ctrl-C / SIGTERM in the waiting thread too: the call leaves, its rows retired
            with self.cond:
                self._leave(job)
            raise

    def alone(self, job: Job) -> bool:
        """Whether no call but ``job`` still has chains in the batch (the batch's thread then stops soon)."""
        with self.cond:
            return not any(j.open and not j.abandoned for j in self.jobs if j is not job)

    def _serve(self, job: Job) -> None:
        while job.open:
            try:
                kind, chain, payload = job.inbox.get(timeout=0.05)
            except queue.Empty:
                if job.token is not None and job.token.cancelled:
                    with self.cond:
                        self._leave(job)
                    raise Cancelled(job.token.reason) from None
                continue
            if kind == "raise":
                assert isinstance(payload, BaseException)
                raise payload
            try:
                if kind == "step":
                    assert job.on_step is not None and isinstance(payload, int)
                    job.on_step(chain, payload)
                    continue
                assert isinstance(payload, Completion)
                step = job.then(chain, payload) if job.then is not None else None
                row = self.make_row(job.keys[chain], step) if step is not None else None
            except BaseException:
                with self.cond:
                    self._leave(job, serving=kind == "done")
                raise
            with self.cond:
                self._decided(job, chain, payload, row)
                self.pending -= 1
                self.cond.notify_all()

    def _flush(self) -> None:
        """Hand calls their rows finished this step (after the step's progress: a call sees its last step)."""
        with self.cond:
            for job, event in self.outbox:
                if not job.abandoned:
                    self.pending += 1
                    job.inbox.put(event)
            self.outbox.clear()

    def _leave(self, job: Job, serving: bool = False) -> None:
        """(Under ``cond``) ``job`` leaves: its queued rows are dropped, its unread events discarded, its running
        rows retired at the next step; ``serving``: the call was inside one of its "done" events."""
        if job.abandoned:
            return
        job.abandoned = True
        if serving:
            self.pending -= 1  # the event being served
        while not job.inbox.empty():
            if job.inbox.get()[0] == "done":
                self.pending -= 1
        self.queue = deque(r for r in self.queue if self.chains[r.index][0] is not job)
        self.follow = deque(r for r in self.follow if self.chains[r.index][0] is not job)
        self.cond.notify_all()

    def _progress(self, rows: int, tokens: int) -> None:
        with self.cond:
            for job in self.jobs:
                if job.on_step is not None and job.open and not job.abandoned:
                    job.inbox.put(("step", rows, tokens))  # a chain's end is counted after this step's event

    def _row_done(self, key: int) -> None:
        """A row finished: its call is asked for the chain's follow-up in the call's own thread."""
        row = self.live.pop(key)
        comp = self.backend.complete(row)
        job, chain = self.chains[key]
        if not job.abandoned:
            self.outbox.append((job, ("done", chain, comp)))

    def _decided(self, job: Job, chain: int, comp: Completion, row: Row | None) -> None:
        """Chain ``chain`` of ``job`` goes on with ``row`` (to the front of the queue), or ends with ``comp``."""
        if job.abandoned:
            return
        if row is not None:
            self.follow.append(row)
            return
        job.last[chain] = comp
        job.open -= 1
