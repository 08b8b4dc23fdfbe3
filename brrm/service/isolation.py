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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from brrm.cancellation import Cancelled
from brrm.errors import ConfigError

Runner = Callable[[Hashable, list[object], Callable[[float], None]], Sequence[object]]
"""``runner(key, items, progress) -> results``: one judge call, one result per item in order."""


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


def run_isolated(runner: Runner, key: Hashable, items: list[object], progress: Callable[[float], None],
                 first_error: BaseException) -> list[object]:
    """Per item, its result or the exception its own call raised, after a whole-batch call raised ``first_error``.

    Args:
        runner: the judge call.
        key: the call's key (the same for every sub-call).
        items: the batch's items, in order (``len(items) >= 1``).
        progress: the abort hook (raises :class:`Aborted` when nobody waits any more).
        first_error: what the whole-batch call raised (reused for a one-item batch, which is not re-run).

    Returns:
        ``len(items)`` outcomes in order: a result, or an :class:`Exception` for an item whose one-item call raised.

    Raises:
        Aborted: when the hook asks to stop between sub-calls.
    """
    if len(items) == 1:
        return [first_error]
    mid = len(items) // 2
    out: list[object] = []
    for part in (items[:mid], items[mid:]):
        progress(0.0)
        try:
            out.extend(checked_call(runner, key, part, progress))
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - narrowed down to the item that raises it
            out.extend(run_isolated(runner, key, part, progress, exc))
    return out


def classify(outcomes: Sequence[object]) -> str:
    """How to serve a bisected batch: ``"items"`` (failures are the failing items' own) or ``"backend"`` (every
    item failed alone and not for its input: the backend is failing, no item is to blame)."""
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    blamed = [o for o in failed if isinstance(o, ConfigError | UnicodeError)]
    return "backend" if len(failed) == len(outcomes) and not blamed else "items"


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, for a reason or an error message."""
    return f"{type(exc).__name__}: {exc}"
