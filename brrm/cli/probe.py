"""``brrm probe``: robustness probes of a judge on pair records (see :mod:`brrm.probes`).

Output contract: the cost (pairwise judgments) before anything runs, then one line per probe with the verdict flip
rate and its bootstrap interval (and the mean P(target) shift; for scalar models the mean reward shift), then the
items each probe moved most. ``--output`` writes the whole report (every item) as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, TextIO

from brrm.cli import common
from brrm.cli.command import Command
from brrm.progress import Progress
from brrm.wording import counted

if TYPE_CHECKING:
    from brrm.probes.run import Interval, ProbeReport


def _arguments(p: argparse.ArgumentParser) -> None:
    from brrm.probes import PROBES

    p.add_argument("input", help="pair records (.jsonl, .json, .parquet, .csv, .tsv)")
    p.add_argument("--probes", default=",".join(PROBES),
                   help=f"comma-separated probes (default: all: {','.join(PROBES)})")
    p.add_argument("--output", "-o", default=None, help="write the full report (every item) as JSON here")
    p.add_argument("--input-format", choices=("jsonl", "json", "parquet", "csv", "tsv"), default=None,
                   help="default: from the file suffix")
    p.add_argument("--limit", type=int, default=None, help="probe only the first N records")
    p.add_argument("--field", action="append", default=None, metavar="FIELD=COLUMN",
                   help="remap an input column, e.g. --field prompt=instruction")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of each interval (1000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level in (0, 1) (0.95)")
    p.add_argument("--top", type=int, default=5, help="most-moved items listed per probe (5)")
    common.add_model_args(p)
    common.add_overwrite_arg(p, resume=False)


def run(args: argparse.Namespace) -> int:
    """Check flags, read records, state the cost, run the probes and print the report; returns the exit code."""
    from brrm.probes import parse_probes, probe_cost, run_probes
    from brrm.records import FieldMap, RecordError, read_records, seed_ids
    from brrm.types import check_float, check_int

    names = parse_probes(args.probes)
    check_int("--bootstrap", args.bootstrap, low=1)
    check_float("--confidence", args.confidence, low=0, high=1, low_open=True)
    check_int("--top", args.top, low=0)
    if args.output:
        common.check_output(args.output, args)
    common.load_options(args)
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "pairs", fields=fields, limit=args.limit, format=args.input_format)
    common.require_records(records, args.input)
    term = common.terminal("-")
    common.report_bad_records(records, term)
    good = [r for r in records if not isinstance(r, RecordError)]
    judge = common.load_judge(args, kind="brrm")
    common.header(term, "probe", judge, len(records), args.input)
    per = judge.judgment_cost("pairs", len(good)).describe()
    print(f"cost: (1 original + {counted(len(names), 'probe')}) x [{per}] = "
          f"{counted(probe_cost(judge, len(good), names), 'judgment')}", file=term)
    with Progress((1 + len(names)) * len(good), desc="probing (pairs judged: originals, then each probe's)",
                  unit="pair", disable=args.no_progress) as bar:
        report = run_probes(judge, [r.conversation for r in good], [r.response_a for r in good],
                            [r.response_b for r in good], probes=names, ids=seed_ids(good),
                            display_ids=[r.id for r in good], resamples=args.bootstrap,
                            confidence=args.confidence, seed=int(vars(args).get("seed") or 0), top=args.top,
                            progress=bar.turns, finished=bar.done)
    judge.close()
    print_report(term, report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump(report.to_dict(), out, ensure_ascii=False, indent=1)
    return 0


def _ci(iv: Interval, signed: bool = False) -> str:
    if math.isnan(iv.value):
        return "n/a"
    f = "+.3f" if signed else ".3f"
    value, low, high = (0.0 if abs(x) < 5e-4 else x for x in (iv.value, iv.low, iv.high))  # no "-0.000"
    return f"{value:{f}} [{low:{f}}, {high:{f}}]"


def print_report(term: TextIO, report: ProbeReport) -> None:
    """Per probe: flip rate with its interval, P(target) shift, reward shift, failures; then the most moved."""
    level = f"{report.confidence:.0%}"
    print(f"probes over {counted(report.pairs, 'pair')} ({report.streams} sampler streams; {level} bootstrap "
          f"intervals, {report.bootstrap} resamples, seed {report.seed}):", file=term)
    for fig in report.probes:
        parts = [f"  {fig.probe:<12}", f"flip rate {_ci(fig.flip_rate)}", f"({counted(fig.flip_rate.n, 'pair')}, "
                 f"{fig.failed} failed)", f"P(target) shift {_ci(fig.p_shift, True)}"]
        if fig.reward_shift is not None:
            parts.append(f"reward shift {_ci(fig.reward_shift, True)}")
        if not math.isnan(fig.toward_target):
            parts.append(f"toward target {fig.toward_target:.2f}")
        print("  ".join(parts), file=term)
    for fig in report.probes:
        moved = [it for it in fig.most_moved if it.flipped or (not math.isnan(it.p_shift) and it.p_shift)]
        if moved:
            print(f"most moved by {fig.probe}: " + "; ".join(
                f"{common.printable(it.id)} {it.original}->{it.variant}"
                + ("" if math.isnan(it.p_shift) else f" ({it.p_shift:+.3f})") for it in moved), file=term)


def _description() -> str:
    from brrm.probes import PROBES

    return ("Judge each pair and controlled variants of it (" + "; ".join(
        f"{k}: {v.description}" for k, v in PROBES.items()) + ") with the same sampler streams; "
        "report per probe the verdict flip rate with a bootstrap confidence interval.")


COMMAND = Command(
    "probe", arguments=_arguments, run=run, progress=True,
    help="robustness probes: how far cheap manipulations of responses move the judge",
    description=_description)
