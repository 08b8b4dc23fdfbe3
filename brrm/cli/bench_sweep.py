"""``brrm bench NAME --sweep-samples 1,3,5``: one benchmark run per self-consistency sample count, then the
headline figure against what each run cost (judgments, seconds), so a team can see what voting buys."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.errors import ConfigError

if TYPE_CHECKING:
    from brrm.bench.protocol import Scored


def parse_counts(text: str) -> list[int]:
    """``"1,3,5"`` -> [1, 3, 5]: distinct integers >= 1, in the order given.

    Raises:
        ConfigError: naming ``--sweep-samples`` and the bad value.
    """
    values = [part.strip() for part in text.split(",")]
    for value in values:
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"--sweep-samples {text!r}: {value!r} is not an integer >= 1 (e.g. 1,3,5)")
    return list(dict.fromkeys(int(value) for value in values))


def sweep(args: argparse.Namespace, execute: Callable[[argparse.Namespace], list[Scored]]) -> int:
    """Run ``execute`` once per sample count (outputs in ``--output``/``samples-K``) and print the sweep table.

    Raises:
        ConfigError: on a bad ``--sweep-samples``, with ``--samples`` or ``--predictions`` (a replay has no
            sample count), before any model loads.
    """
    counts = parse_counts(args.sweep_samples)
    if args.samples is not None:
        raise ConfigError("--sweep-samples runs each --samples value itself; give one of the two")
    if args.predictions:
        raise ConfigError("--sweep-samples applies to runs, not to --predictions replays")
    rows = []
    for k in counts:
        print(f"== self-consistency sweep: --samples {k} ==", file=sys.stdout)
        output = str(Path(args.output) / f"samples-{k}") if args.output else None
        if output:
            Path(output).mkdir(parents=True, exist_ok=True)
        runs = execute(argparse.Namespace(**{**vars(args), "samples": k, "sweep_samples": None, "output": output}))
        rows += [(k, run) for run in runs]
    for line in table(rows):
        print(line, file=sys.stdout)
    return 0


def table(rows: list[tuple[int, Scored]]) -> list[str]:
    """The sweep table: per (sample count, protocol) the headline over all and over parsed items, and the cost."""
    from brrm.bench.report import fmt

    out = ["self-consistency sweep (headline figure against its cost):",
           f"  {'samples':>7}  {'protocol':<10}  {'all items':>9}  {'parsed':>9}  {'judgments':>9}  {'seconds':>8}"]
    for k, run in rows:
        name, cost = run.all.headline, run.all.cost
        judged = cost.judgments if cost is not None else 0
        seconds = f"{cost.seconds:.1f}" if cost is not None else "—"
        out.append(f"  {k:>7}  {run.label:<10}  {fmt(run.all.overall):>9}  {fmt(run.parsed_score(name)):>9}  "
                   f"{judged:>9}  {seconds:>8}")
    return out
