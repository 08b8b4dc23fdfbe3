"""Fault isolation for one coalesced judge call: a failed call is retried by bisection so the failure lands on
the item that causes it.

:func:`run_isolated` runs ``runner(key, items, progress)`` once over the whole batch. When it raises (any
exception, not only :class:`~brrm.errors.ConfigError`), the batch is split in halves and each half is run again,
recursively, until every failing call holds one item. Each item then has an *outcome*: its result, or the
exception its own one-item call raised. The cost is ``O(f · log n)`` extra calls for ``f`` failing items in a
batch of ``n``; a healthy batch costs one call.

How a one-item failure is reported is the caller's choice (:func:`classify`): an input the backend cannot
encode (:class:`UnicodeError`) is that item's ``invalid_input``; a :class:`ConfigError` is the request's own
422; any other exception is the item's ``backend_error`` — unless *every* item of the batch failed alone, in
which case the backend itself is failing and no item is to blame (the caller answers 503).

*Any* raise is a call's failure, not only an :class:`Exception`: a backend or a library under it may raise an
:class:`asyncio.CancelledError` of its own (an HTTP client's or an engine's abort), a :class:`GeneratorExit` or a
:class:`BaseException` subclass of its own; that call fails like any other and is bisected. Only the process's
own shutdown (:data:`ESCAPES`) and the request's own cancellation (:class:`~brrm.cancellation.Cancelled`, raised
when its token is set) leave a call as they came.

Two kinds of items are not bisected again: those of a call the circuit breaker did not let run
(:class:`NotCalled`: every item fails with it at once), and *settled* ones (a ``settled(item)`` predicate: items
that already failed alone on a failing backend, :mod:`brrm.service.breaker`), which get the call's error at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from brrm.cancellation import Cancelled
from brrm.errors import ConfigError

Runner = Callable[[Hashable, list[object], Callable[[float], None]], Sequence[object]]
"""``runner(key, items, progress) -> results``: one judge call, one result per item in order."""


ESCAPES: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)
"""What a call never turns into its failure: the process's own shutdown (re-raised as it came)."""


class NotCalled(Exception):
    """The circuit breaker is open: this judge call was not made (its items fail with the breaker's reason)."""


class Aborted(Cancelled):
    """Raised inside the worker thread (from the progress hook) to stop a call nobody waits for any more; a
    backend that retires a cancelled request's rows raises its base, :class:`~brrm.cancellation.Cancelled`."""


class LengthMismatch(Exception):
    """The runner returned a different number of results than it was given items (never served)."""


def checked_call(runner: Runner, key: Hashable, items: list[object],
                 progress: Callable[[float], None]) -> list[object]:
    """``runner(key, items, progress)`` as a list of exactly ``len(items)`` results.

    Raises:
        LengthMismatch: when the runner returned another number of results. Anything the runner raises.
    """
    results = list(runner(key, items, progress))
    if len(results) != len(items):
        raise LengthMismatch(f"the judge returned {len(results)} results for {len(items)} items (length mismatch); "
                             "no result of this batch is served")
    return results


def failure(exc: BaseException) -> BaseException:
    """``exc`` when it is a call's failure; re-raised when it is the process's shutdown (:data:`ESCAPES`) or the
    request's cancellation (:class:`~brrm.cancellation.Cancelled`).

    Raises:
        KeyboardInterrupt, SystemExit, Cancelled: ``exc`` itself, for those.
    """
    if isinstance(exc, (*ESCAPES, Cancelled)):
        raise exc
    return exc


def attempt(runner: Runner, key: Hashable, items: list[object], progress: Callable[[float], None],
            settled: Callable[[object], bool] | None = None) -> list[object]:
    """Per item of ``items``, its result or the exception its own call raised: one call, bisected when it raises
    (:func:`run_isolated`).

    Raises:
        Aborted / Cancelled: the request left. KeyboardInterrupt, SystemExit: the process is shutting down.
    """
    try:
        return checked_call(runner, key, items, progress)
    except BaseException as exc:  # noqa: BLE001 - any raise is this call's failure (failure() re-raises the rest)
        return run_isolated(runner, key, items, progress, failure(exc), settled)


def run_isolated(runner: Runner, key: Hashable, items: list[object], progress: Callable[[float], None],
                 first_error: BaseException, settled: Callable[[object], bool] | None = None) -> list[object]:
    """Per item, its result or the exception its own call raised, after a whole-batch call raised ``first_error``.

    Args:
        runner: the judge call.
        key: the call's key (the same for every sub-call).
        items: the batch's items, in order (``len(items) >= 1``).
        progress: the abort hook (raises :class:`Aborted` when nobody waits any more).
        first_error: what the whole-batch call raised (reused for a one-item batch, which is not re-run, for a
            call not made, :class:`NotCalled`, and for settled items).
        settled: whether an item already failed alone on a failing backend (it is not bisected again); None: none.

    Returns:
        ``len(items)`` outcomes in order: a result, or the exception (any :class:`BaseException` but those
        :func:`failure` re-raises) of an item whose one-item call raised.

    Raises:
        Aborted: when the hook asks to stop between sub-calls.
    """
    if len(items) == 1 or isinstance(first_error, NotCalled):
        return [first_error] * len(items)
    known = [settled(item) for item in items] if settled is not None else [False] * len(items)
    if any(known):
        rest = [item for item, k in zip(items, known, strict=True) if not k]
        if rest:
            progress(0.0)
        outcomes = iter(attempt(runner, key, rest, progress, settled) if rest else [])
        return [first_error if k else next(outcomes) for k in known]
    mid = len(items) // 2
    out: list[object] = []
    for part in (items[:mid], items[mid:]):
        progress(0.0)
        out.extend(attempt(runner, key, part, progress, settled))
    return out


def classify(outcomes: Sequence[object]) -> str:
    """How to serve a bisected batch: ``"items"`` (failures are the failing items' own) or ``"backend"`` (every
    item failed alone and not for its input: the backend is failing, no item is to blame)."""
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    blamed = [o for o in failed if isinstance(o, ConfigError | UnicodeError)]
    return "backend" if len(failed) == len(outcomes) and not blamed else "items"


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception (``Type`` alone when it has no message), for a reason or an error
    message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
