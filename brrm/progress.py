"""Progress bars for long batch runs (the CLI, audits, benchmarks): one place, below every surface."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm


def progress_bar(total: float, *, desc: str, unit: str, disable: bool) -> tqdm[None]:
    """A tqdm bar on stderr that accepts fractional updates (half a pair per finished turn).

    Args:
        total: units of work (pairs, items, judgments), >= 0.
        desc, unit: the bar's label and unit name.
        disable: no bar at all (``--no-progress``, or not a terminal).
    """
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=sys.stderr, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
