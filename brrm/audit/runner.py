"""Running an audit: plan → store → judge what is pending → outputs, locally or on Ray.

:func:`run_audit` records a run and its plan in the store, works out what is pending under the judge
configuration (nothing, on a rerun of a finished audit: no model is loaded and no model call is made), judges
it batch by batch — in this process, or on a Ray actor pool (:mod:`brrm.audit.ray_runner`) — and writes each
batch to the store in one transaction as it arrives. This process is the store's only writer. A progress bar
shows rate and ETA, and a summary line is printed every ``summary_every_s`` seconds. Ctrl-C or SIGTERM stops
cleanly: the batch being written is finished first (the signal is held during the write), finished items are
kept, the run is marked ``interrupted``, and rerunning the same command resumes. Then the JSON summary, the
exports and the HTML report are written next to the store.

The judge configuration comes from the judge itself: a judge passed in, or one built by ``brrm.load`` from a
:class:`JudgeSpec` only when something is pending. Before building it, the store's memory of which
configuration the same request (model, options, the model's files) produced last time tells what is pending;
every result is stored under the configuration of the judge that produced it, and if that differs from the
remembered one the pending items are planned again (a changed configuration is never a stale reuse).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from brrm.audit.judging import judge_records
from brrm.audit.keys import config_hash, request_hash
from brrm.audit.options import AuditOptions
from brrm.audit.plan import AuditItem
from brrm.audit.store import AuditStore
from brrm.signals import sigterm_as_interrupt
from brrm.types import JudgeSpec
from brrm.types.protocols import RewardJudge

if TYPE_CHECKING:
    from brrm.audit.ray_runner import RayOptions
    from brrm.progress import Progress


@dataclass(frozen=True)
class AuditOutcome:
    """What a run did.

    Attributes:
        run_id: the run's id in the store.
        state: ``finished`` (other states end in an exception).
        total: planned rows (invalid ones included).
        judged: results this run wrote.
        pending_at_start: items without a finished result when the run started.
        seconds: wall time of the whole run (s).
        judging_seconds: wall time until every result was in the store (planning in the store and judging; the
            rest is the summary, exports and report) (s).
        config_hash: the configuration results are stored under (None when nothing was ever judged).
        files: the outputs by name (``summary``, ``jsonl``, ``parquet``, ``report``).
    """

    run_id: int
    state: str
    total: int
    judged: int
    pending_at_start: int
    seconds: float
    judging_seconds: float
    config_hash: str | None
    files: Mapping[str, Path] = field(default_factory=dict)


def run_audit(items: Sequence[AuditItem], directory: str | Path, options: AuditOptions, *,
              judge: RewardJudge | None = None, spec: JudgeSpec | None = None, ray: RayOptions | None = None,
              source: str = "",
              argv: Sequence[str] = (), provenance: Mapping[str, object] | None = None,
              term: TextIO | None = None) -> AuditOutcome:
    """Run (or resume) an audit of planned items into ``directory`` and write its outputs.

    Args:
        items: the plan (:func:`brrm.audit.plan.plan_items`).
        directory: the audit folder (store, summary, exports, report).
        options: see :class:`AuditOptions`.
        judge: a built :class:`~brrm.RewardJudge` (its configuration is known up front); or None with ``spec``.
        spec: how to build the judge when something is pending (required for ``ray``).
        ray: a :class:`brrm.audit.ray_runner.RayOptions` to judge on a Ray actor pool; None judges here.
        source: the input's name (provenance, ``--status``).
        argv: the command line (provenance).
        provenance: more provenance (input checksum, versions), JSON-ready.
        term: where progress and summary lines go (default stderr).

    Raises:
        KeyboardInterrupt: after Ctrl-C / SIGTERM, once the run is marked ``interrupted`` (finished items kept).
        ConfigError: on invalid options or a store of another version.
        BackendUnavailable: when matplotlib (the ``audit`` extra) is missing, before anything is judged.
    """
    if judge is None and spec is None:
        raise ValueError("run_audit needs a judge or a JudgeSpec")
    require_report_libraries()
    term = term or sys.stderr
    started = time.time()
    with AuditStore(directory) as store:
        request = None if judge is not None or spec is None else request_hash(
            spec, shape=options.shape, strategy=options.strategy)
        config = None
        if judge is not None:
            config = _remember(store, judge.info.to_dict(), options, None)
        elif request is not None:
            config = store.config_for_request(request)
        run_id = store.start_run(items, shape=options.shape, source=source, argv=argv,
                                 provenance=provenance or {}, config_hash=config)
        pending = _pending(store, items, config, options)
        _announce(term, items, pending, config is not None)
        _note_kept(term, store, items, config, options)
        store.update_run(run_id, pending=len(pending))
        ticker = _Ticker(store, run_id, options.summary_every_s, term)
        try:
            with sigterm_as_interrupt():
                config = _judge_all(store, run_id, items, pending, config, request, options, judge, spec, ray, ticker)
            store.update_run(run_id, state="finished", finished_at=time.time())
            judged_at = time.time()
        except KeyboardInterrupt:
            done = store.progress(run_id)
            store.update_run(run_id, state="interrupted", message="interrupted (Ctrl-C or SIGTERM)")
            print(f"audit interrupted: {done['done']} of {done['total']} rows are in the store; rerun the same "
                  "command to resume", file=term)
            raise
        except BaseException as exc:
            store.update_run(run_id, state="failed", message=f"{type(exc).__name__}: {exc}"[:2000])
            raise
        files = write_outputs(store, run_id, options)
        ticker.line(final=True)
        judged = store.progress(run_id)["judged_this_run"]
    return AuditOutcome(run_id, "finished", len(items), judged, len(pending), time.time() - started,
                        judged_at - started, config, files)


def require_report_libraries() -> None:
    """Refuse to start an audit whose report could not be drawn.

    Raises:
        BackendUnavailable: without matplotlib, with the install hint.
    """
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        from brrm.errors import BackendUnavailable, install_extra

        raise BackendUnavailable("the audit report draws its plots with matplotlib", hint=install_extra("audit"))


def _remember(store: AuditStore, info: Mapping[str, object], options: AuditOptions, request: str | None) -> str:
    digest = config_hash(info, shape=options.shape, strategy=options.strategy)
    store.remember_config(digest, info, request)
    return digest


def _judge_all(store: AuditStore, run_id: int, items: Sequence[AuditItem], pending: list[AuditItem],
               config: str | None, request: str | None, options: AuditOptions, judge: RewardJudge | None,
               spec: JudgeSpec | None, ray: RayOptions | None, ticker: _Ticker) -> str | None:
    """Judge until nothing is pending under the producing judge's configuration; returns that configuration."""
    from brrm.progress import Progress

    own = None
    try:
        for _ in range(3):  # a configuration learnt from the judge re-plans at most once
            if judge is None and ray is None and pending:
                judge = own = _need(spec).load()
                config = _learn(store, run_id, config, judge.info.to_dict(), options, request)
                pending = _pending(store, items, config, options)
            if not pending:
                return config
            with Progress(len(pending), desc="auditing (items stored)", unit="item",
                          disable=not options.progress) as bar:
                before = config
                sink = _Commits(store, run_id, config, request, options, bar, ticker)
                if ray is not None:
                    from brrm.audit.ray_runner import judge_on_ray

                    for part, results, info in judge_on_ray(_need(spec), pending, options, ray):
                        sink.put(part, results, info, count=True)
                elif judge is not None:
                    _judge_locally(judge, pending, options, _ticking(bar, ticker), sink)
                else:
                    raise RuntimeError("a local audit builds its judge before judging")  # unreachable
                config = sink.config
            pending = _pending(store, items, config, options) if config != before else []
        return config
    finally:
        if own is not None:
            own.close()


def retry_for(store: AuditStore, config: str | None, options: AuditOptions) -> frozenset[str]:
    """The stored statuses this run judges again under ``config`` (:func:`brrm.types.retry.retry_statuses`): a
    sampled judge's parse failures count only for pairs and single items, whose retry gets a new seed (a group's
    judgments are keyed by content alone, so a group is retried only with ``--retry-failed``)."""
    from brrm.types.retry import record_is_sampled, retry_statuses

    info = store.config_info(config) or {}
    judge_options = info.get("options")
    sampled = isinstance(judge_options, Mapping) and record_is_sampled(judge_options) and options.shape != "groups"
    return retry_statuses(sampled=sampled, retry_failed=options.retry_failed)


def _pending(store: AuditStore, items: Sequence[AuditItem], config: str | None,
             options: AuditOptions) -> list[AuditItem]:
    """The items to judge: without a result under ``config``, or with a failure this run retries. A sampled retry
    of a parse failure or truncation is judged under :func:`brrm.seeds.retry_id` (new sampler streams); the
    stored result gets the record's own id back (:meth:`_Commits.put`)."""
    import dataclasses

    from brrm.seeds import failed_seed, retry_id
    from brrm.types.retry import FINAL_UNLESS_DIFFERENT

    retry = retry_for(store, config, options)
    pending = store.pending(items, config, retry)
    if config is None or not retry & FINAL_UNLESS_DIFFERENT:
        return pending
    stored = store.results(config, [it.item_hash for it in pending])
    out = []
    for it in pending:
        old = stored.get(it.item_hash)
        if old is not None and old.status in FINAL_UNLESS_DIFFERENT and it.record is not None:  # pairs, single
            record = {**it.record, "id": retry_id(str(it.record["id"]), failed_seed(old.result))}
            it = dataclasses.replace(it, record=record)
        out.append(it)
    return out


def _note_kept(term: TextIO, store: AuditStore, items: Sequence[AuditItem], config: str | None,
               options: AuditOptions) -> None:
    """Say how many stored parse failures and truncations this run keeps as they are (greedy: they would repeat)."""
    from brrm.types.retry import FINAL_UNLESS_DIFFERENT, kept_note, result_statuses

    retry = retry_for(store, config, options)
    if config is None or FINAL_UNLESS_DIFFERENT <= retry:
        return
    hashes = {it.item_hash for it in items if it.valid}
    kept = sum(bool(result_statuses(r.result) & FINAL_UNLESS_DIFFERENT and not result_statuses(r.result) & retry)
               for r in store.results(config, hashes).values())
    if kept:
        print(f"audit: {kept_note(kept)}", file=term)


def _need(spec: JudgeSpec | None) -> JudgeSpec:
    if spec is None:
        raise ValueError("this audit needs a JudgeSpec (Ray actors build their own judges)")
    return spec


def _learn(store: AuditStore, run_id: int, config: str | None, info: Mapping[str, object], options: AuditOptions,
           request: str | None) -> str:
    """Store a producing judge's configuration; the run's configuration becomes it."""
    learnt = _remember(store, info, options, request)
    if learnt != config:
        store.update_run(run_id, config_hash=learnt)
    return learnt


def _ticking(bar: Progress, ticker: _Ticker) -> Callable[[float], None]:
    """The judge's progress callback: the turns it finished beside the bar (whose count is items stored), and a
    summary line when one is due (mid-batch too)."""

    def update(n: float) -> None:
        bar.turns(n)
        ticker.maybe(bar)

    return update


def _judge_locally(judge: RewardJudge, pending: Sequence[AuditItem], options: AuditOptions,
                   progress: Callable[[float], None], sink: _Commits) -> None:
    """Judge ``pending`` a chunk per call, committing each item the moment the judge reports it final."""
    chunk = options.chunk_size or judge.info.chunk_size
    info = judge.info.to_dict()
    for start in range(0, len(pending), chunk):
        part = [it for it in pending[start:start + chunk] if it.record is not None]
        got: set[int] = set()

        def finished(i: int, result: Mapping[str, object], part: list[AuditItem] = part, got: set[int] = got) -> None:
            got.add(i)
            sink.put([part[i]], [result], info)

        results = judge_records(judge, options.shape, [it.record for it in part if it.record is not None],
                                strategy=options.strategy, progress=progress, on_result=finished)
        rest = [k for k in range(len(part)) if k not in got]  # shapes without per-item results (groups)
        sink.put([part[k] for k in rest], [results[k] for k in rest], info)
        sink.settle()


class _Commits:
    """Writes results to the store as they arrive (one transaction per call: an item, or a Ray batch), learning
    the producing judge's configuration; ``config`` is the one results were stored under."""

    def __init__(self, store: AuditStore, run_id: int, config: str | None, request: str | None,
                 options: AuditOptions, bar: Progress, ticker: _Ticker) -> None:
        self.store, self.run_id, self.config, self.request = store, run_id, config, request
        self.options, self.bar, self.ticker, self.done = options, bar, ticker, 0

    def put(self, part: Sequence[AuditItem], results: Sequence[Mapping[str, object]], info: Mapping[str, object], *,
            count: bool = False) -> None:
        """Commit ``part``'s results and move the bar to the items committed; ``count``: also print a summary line
        when one is due (Ray batches, which report no turns)."""
        if not part:
            return
        options = self.options
        results = [_own_id(it, r) for it, r in zip(part, results, strict=True)]
        with _deferred_interrupts():
            if config_hash(info, shape=options.shape, strategy=options.strategy) != self.config:
                self.config = _learn(self.store, self.run_id, self.config, info, options, self.request)
            self.store.put_results(self.run_id, self.config, options.shape, list(zip(part, results, strict=True)),
                                   replace=retry_for(self.store, self.config, options))
        self.done += len(part)
        self.bar.done_to(self.done)
        if count:
            self.settle()

    def settle(self) -> None:
        """Print a summary line when one is due (after a judge call)."""
        self.ticker.maybe(self.bar)


def _own_id(item: AuditItem, result: Mapping[str, object]) -> Mapping[str, object]:
    """``result`` with the record's own id where it was judged under a retry id (:func:`brrm.seeds.retry_id`)."""
    if "id" in result and result["id"] != item.record_id and "#retry:" in str(result["id"]):
        return {**result, "id": item.record_id}
    return result


def _announce(term: TextIO, items: Sequence[AuditItem], pending: Sequence[AuditItem], known: bool) -> None:
    valid = sum(it.valid for it in items)
    unique = len({it.item_hash for it in items if it.valid})
    done = unique - len(pending) if known else 0
    print(f"audit: {len(items)} rows ({valid} valid, {len(items) - valid} invalid input); {done} already in the "
          f"store under this configuration; {len(pending)} to judge", file=term)


class _Ticker:
    """Periodic one-line summaries of the run (counts by status, rate, ETA), from the store."""

    def __init__(self, store: AuditStore, run_id: int, every_s: float, term: TextIO) -> None:
        self.store, self.run_id, self.every_s, self.term = store, run_id, every_s, term
        self.started = self.last = time.time()

    def maybe(self, bar: Progress) -> None:
        if time.time() - self.last >= self.every_s:
            self.line(bar=bar)

    def line(self, *, bar: Progress | None = None, final: bool = False) -> None:
        self.last = time.time()
        p = self.store.progress(self.run_id)
        text = progress_line(p, time.time() - self.started, final=final)
        (bar.write(text, file=self.term) if bar is not None else print(text, file=self.term))


def progress_line(p: Mapping[str, Any], seconds: float, *, final: bool = False) -> str:
    """``audit: 120/1000 rows done (12.0%); judged 100 this run in 4m00s (0.42/s), ETA 35m; ok 115, …``.

    Every figure counts items stored (a batch still decoding is not counted), and the ETA comes from them: none
    until this run has stored an item, none in the final line.
    """
    total, done, judged = p["total"], p["done"], p["judged_this_run"]
    rate = judged / seconds if seconds > 0 else math.nan
    left = max(0, total - done)
    eta = left / rate if judged and rate > 0 and not final else math.nan
    counts = ", ".join(f"{k} {v}" for k, v in sorted(p["by_status"].items()))
    when = time.strftime("%H:%M:%S")
    eta_text = (f", ETA {format_seconds(eta)}" if eta == eta
                else ", ETA when the first item is stored" if not judged and left and not final else "")
    return (f"audit {when}: {done}/{total} rows done ({100 * done / max(total, 1):.1f}%); judged "
            f"{judged} this run in {format_seconds(seconds)} ({rate:.2f}/s){eta_text}"
            + (f"; {counts}" if counts else ""))


def format_seconds(s: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


@contextlib.contextmanager
def _deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while a batch is written; raise KeyboardInterrupt right after, if one came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in (signal.SIGINT,
                                                                                        signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if received:
            raise KeyboardInterrupt


def write_outputs(store: AuditStore, run_id: int, options: AuditOptions) -> dict[str, Path]:
    """The JSON summary, the JSONL and Parquet exports and the HTML report of a run, next to the store."""
    from brrm.audit.exports import write_exports
    from brrm.audit.report import write_report
    from brrm.audit.summary import build_summary, load_rows, write_summary

    rows = load_rows(store, run_id, options.shape, low_margin=options.low_margin)
    summary = build_summary(store, run_id, rows, options)
    files = {"summary": write_summary(summary, store.directory)}
    files.update(write_exports(rows, store.directory, options))
    files["report"] = write_report(summary, rows, store.directory, options)
    return files
