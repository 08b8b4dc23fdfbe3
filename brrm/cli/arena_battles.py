"""``brrm arena --battles FILE``: re-rate battles judged already (:func:`brrm.arena.rerate`), loading no model.

Output contract: the same as a judged arena (:mod:`brrm.cli.arena`): with ``--output FOLDER``,
``leaderboard.csv``, ``battles.jsonl`` (the battles read, in brrm's columns), ``failures.jsonl``,
``categories.csv`` (with categories) and ``report.html``; the terminal shows the file's bad lines by number, its
format, how style control was fed, and the leaderboard. No audit store is made: nothing is judged.
"""

from __future__ import annotations

import argparse
import time

from brrm.cli import common
from brrm.cli.arena_output import check_numbers, output_folder, report_errors, show_result
from brrm.errors import ConfigError


def rerate(args: argparse.Namespace) -> int:
    """Refuse the flags only judging uses, read the battles (and ``--input``'s answers), rate, print and write."""
    from brrm.arena import read_battles, read_table
    from brrm.arena import rerate as rate_file

    refuse_judging_flags(args)
    check_numbers(args)
    if args.split is not None and args.input is None:
        raise ConfigError("--split applies to --input (a Hugging Face dataset of the answers); with --battles "
                          "the battles file is read whole")
    folder = output_folder(args.output)
    started = time.perf_counter()
    battles = read_battles(args.battles, format=args.battles_format, baseline=args.baseline)
    table = read_table(args.input, split=args.split) if args.input is not None else None
    term = common.terminal("")
    ok = sum(1 for b in battles.battles if b.ok)
    print(f"brrm arena: re-rating {len(battles.battles)} battles ({ok} with a verdict) of {len(battles.models)} "
          f"models from {args.battles} ({battles.format} format); no model is loaded", file=term)
    report_errors(term, battles.errors)
    if table is not None:
        report_errors(term, table.errors)
    result = rate_file(battles, table=table, baseline=args.baseline, anchor=args.anchor, outcomes=args.outcomes,
                       style_control=not args.no_style_control, bootstrap=args.bootstrap,
                       confidence=args.confidence, seed=args.bootstrap_seed)
    show_result(term, result, folder, started)
    return 0


def refuse_judging_flags(args: argparse.Namespace) -> None:
    """Refuse, naming them, the flags that only judging uses (pairing, budgets, every model, backend and Ray flag:
    :data:`brrm.cli.arena.JUDGING_ONLY` and what ``brrm.cli.arena`` records as ``judging_flags``) when set.

    Raises:
        ConfigError: naming the flags set.
    """
    given = [flag for flag, dest, default in args.judging_flags if getattr(args, dest, default) != default]
    if given:
        raise ConfigError(f"{given[0]} applies to judging; --battles re-rates battles judged already and loads no "
                          f"model: drop {', '.join(given)}")
