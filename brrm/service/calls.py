"""One judge call of the scheduler, in its worker thread: run under its request scope, its outcome typed.

A call runs a :class:`~brrm.service.jobs.Batch` (one or several jobs' slices) inside
:func:`brrm.cancellation.scope` of the batch's ``abort`` token, so a backend that shares one running batch across
calls (transformers' continuous batching) can retire this call's rows alone when the token is set; the judge's
progress hook raises :class:`~brrm.service.isolation.Aborted` for the same token between its own steps. What the
call gave is a :class:`CallOutcome`; the scheduler (on its event loop) turns it into each slice's results or the
exception its request gets. A bisected call's item outcomes are kept raw, because whether a failure is the
item's own or the backend's is decided over the whole coalesced batch (:func:`~brrm.service.isolation.classify`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from brrm import cancellation
from brrm.service.isolation import Aborted, LengthMismatch, Runner, checked_call, describe, failure, run_isolated
from brrm.service.jobs import Batch

__all__ = ["CallOutcome", "call_batch"]


@dataclass(frozen=True)
class CallOutcome:
    """What one call gave.

    Attributes:
        kind: ``results`` (one result per item, in ``values``), ``bisected`` (the call raised ``error``;
            ``values`` holds per item its result or the exception its own call raised), ``cancelled`` (the
            call's token was set: its requests left; ``values`` empty) or ``mismatch`` (the judge returned
            another number of results; ``reason`` says how many).
        values: per-item values (see ``kind``), in the batch's item order.
        error: what the whole-batch call raised (``bisected``), else None.
        reason: a human-readable reason (``mismatch``, ``bisected``), else ``""``.
    """

    kind: str
    values: tuple[object, ...] = ()
    error: BaseException | None = None
    reason: str = ""


def call_batch(runner: Runner, batch: Batch, settled: Callable[[object], bool] | None = None) -> CallOutcome:
    """Run ``batch`` on ``runner`` (in the worker thread) under its ``abort`` token.

    Any raise of the runner is the call's failure, typed in the outcome (an :class:`asyncio.CancelledError` or a
    library's own :class:`BaseException` included); ``settled`` items are not bisected again
    (:func:`~brrm.service.isolation.run_isolated`).

    Raises:
        KeyboardInterrupt, SystemExit: the process is shutting down (:data:`~brrm.service.isolation.ESCAPES`).
    """

    def progress(_done: float) -> None:
        if batch.abort.cancelled:
            raise Aborted(batch.abort.reason)

    flat = [item for s in batch.slices for item in s.job.items[s.start:s.end]]
    key: Hashable = batch.key
    with cancellation.scope(batch.abort):
        try:
            return CallOutcome("results", tuple(checked_call(runner, key, flat, progress)))
        except cancellation.Cancelled:
            return CallOutcome("cancelled")
        except LengthMismatch as exc:
            return CallOutcome("mismatch", reason=str(exc))
        except BaseException as raised:  # noqa: BLE001 - any raise is bisected down to the item that raises it
            error = failure(raised)  # the process's shutdown goes on as it came
            try:
                outcomes = run_isolated(runner, key, flat, progress, error, settled)
            except cancellation.Cancelled:
                return CallOutcome("cancelled")
            return CallOutcome("bisected", tuple(outcomes), error, describe(error))
