"""What ``brrm arena`` shares between judging battles and re-rating battles judged already
(:mod:`brrm.cli.arena`, :mod:`brrm.cli.arena_battles`): its number checks, its output folder, the input's bad lines
and the result on the terminal."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from brrm.errors import ConfigError
from brrm.types.usage import token_line, token_report

if TYPE_CHECKING:
    from brrm.arena import ArenaResult, RowError


def show_result(term: TextIO, result: ArenaResult, folder: Path | None, started: float) -> None:
    """The judge's position bias (when measured), the notes, the leaderboard, the files written and the time."""
    from brrm.arena.report import position_bias

    bias, measured, agreed = position_bias(result.battles)
    if measured:
        print(f"position bias: P(the answer shown first wins) - 1/2 = {bias:+.3f} over {measured} swapped battles; "
              f"both orders agreed in {agreed:.0%}", file=term)
    for note in result.notes:
        print(note, file=term)
    judged = [b for b in result.battles if b.tokens is not None]
    if judged:  # a re-rated battles file may hold none
        print(f"cost: {token_line(token_report(judged, time.perf_counter() - started))}", file=term)
    print(result.markdown(), file=term)
    if folder is not None:
        print("wrote " + ", ".join(str(p) for p in result.write(folder).values()), file=term)
    print(f"time {time.perf_counter() - started:.1f} s", file=term)


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse out-of-range numbers before a model loads, naming the flag."""
    if args.bootstrap < 10:
        raise ConfigError(f"--bootstrap must be an integer >= 10, got {args.bootstrap}")
    if not 0.0 < args.confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.budget is not None and args.budget < 1:
        raise ConfigError(f"--budget must be an integer >= 1, got {args.budget}")
    if args.target_ci is not None and not args.target_ci > 0:
        raise ConfigError(f"--target-ci must be > 0 rating points, got {args.target_ci}")
    if (args.budget is not None or args.target_ci is not None) and not args.adaptive:
        raise ConfigError("--budget and --target-ci apply to --adaptive")


def output_folder(path: str | None) -> Path | None:
    """The output folder, made if missing; refused when it is a file or cannot be made (naming ``--output``)."""
    if path is None:
        return None
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--output {path!r} is a file; arena writes a folder (leaderboard.csv, battles.jsonl)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--output {path!r} cannot be made ({exc.strerror})") from None
    return folder


def report_errors(term: TextIO, errors: Sequence[RowError]) -> None:
    """An input's bad lines, each once (the first 20, then how many more)."""
    for e in errors[:20]:
        print(f"skipped: {e.reason}", file=term)
    if len(errors) > 20:
        print(f"skipped: {len(errors) - 20} more bad lines", file=term)
