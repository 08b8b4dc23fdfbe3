"""Progress bars for long batch runs (the CLI, audits, benchmarks, probes): one place, below every surface.

A bar counts units that are finished (and, where the surface stores them, stored): :class:`Progress`. A judge
reports its work in fractions of a unit as turns finish (half a pair per turn of a two-turn judge); that work is
shown beside the count, labelled as turns, and never moves the count itself, so the count, its rate and its ETA
come from finished work only.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


def progress_bar(total: float, *, desc: str, unit: str, disable: bool, fractional: bool = True) -> tqdm[None]:
    """A tqdm bar on stderr.

    Args:
        total: units of work (pairs, items, judgments), >= 0.
        desc, unit: the bar's label and unit name.
        disable: no bar at all (``--no-progress``, or not a terminal).
        fractional: the count may move in fractions (shown with one decimal); False shows whole units.
    """
    from tqdm import tqdm

    count = "{n:.1f}" if fractional else "{n:.0f}"
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=sys.stderr, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| " + count + "/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]")


def note(text: str, file: TextIO | None = None) -> None:
    """Print a line through tqdm's own writer, so that a running bar is cleared first and redrawn below it."""
    from tqdm import tqdm

    tqdm.write(text, file=file if file is not None else sys.stderr)


class Progress:
    """A bar whose count is finished units; the judge's partial work (turns finished) shown beside it as turns.

    Args:
        total: units the run finishes (pairs written, items stored, groups ranked), >= 0.
        desc, unit: the bar's label and unit name.
        disable: no bar at all (``--no-progress``).
        work_total: the partial work's total, in ``work_unit`` (default: ``total`` units).
        work_unit: what the judge's progress counts (default ``unit``): a rank bar counts groups, its turns pairs.
    """

    def __init__(self, total: int, *, desc: str, unit: str, disable: bool, work_total: float | None = None,
                 work_unit: str | None = None) -> None:
        self.bar = progress_bar(total, desc=desc, unit=unit, disable=disable, fractional=False)
        self.work_total = float(total if work_total is None else work_total)
        self.work_unit = work_unit or unit
        self.count, self.work = 0, 0.0
        self.step = ""
        self.shown = 0.0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.step = ""  # nothing decodes any more
        self._postfix(force=True)
        self.bar.close()

    @property
    def n(self) -> int:
        """Units finished so far."""
        return self.count

    def turns(self, n: float) -> None:
        """The judge's progress callback: ``n`` units' worth of turns finished (fractions of a unit)."""
        self.work += n
        self._postfix()

    def done(self, n: int = 1) -> None:
        """``n`` more units finished (and stored)."""
        self.count += n
        self.bar.update(n)

    def done_to(self, n: int) -> None:
        """Units finished so far is ``n`` (a count kept by the caller, e.g. items committed to a store)."""
        if n != self.count:
            self.done(n - self.count)

    def steps(self, text: str) -> None:
        """What the backend is doing now (rows decoding, tokens per second), shown after the turns."""
        self.step = text
        self._postfix(force=True)

    def write(self, text: str, file: TextIO | None = None) -> None:
        """Print a line above the bar (the bar is redrawn below it)."""
        self.bar.write(text, file=file if file is not None else sys.stderr)

    def _postfix(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.shown < 0.2:
            return
        self.shown = now
        unit = self.work_unit if self.work_total == 1 else f"{self.work_unit}s"
        parts = [f"turns done: {round(self.work, 1):g} of {self.work_total:g} {unit}"] if self.work else []
        self.bar.set_postfix_str("; ".join([*parts, *([self.step] if self.step else [])]))
