"""The ``brrm`` command line (argparse): one module per subcommand, every model built by :func:`brrm.load`.

Subcommands register themselves in :data:`SUBCOMMANDS` (a module path with ``add_parser(subparsers)``). A
mistake of the user's (a bad flag value, a missing file, a model that cannot be found) is one ``brrm: error:``
line naming the flag and exit code 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from brrm.errors import BrrmError

SUBCOMMANDS = ("brrm.cli.judge", "brrm.cli.score", "brrm.cli.rank", "brrm.cli.serve", "brrm.cli.audit",
               "brrm.cli.bench", "brrm.cli.calibrate")
"""Modules of the subcommands, in help order; each has ``add_parser(subparsers)``."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brrm`` console script; returns the exit code."""
    # outlines' mask kernel is torch.compile'd; on CPU its first call would spend 10-23 s compiling
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage mistake (already reported on one line)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except BrrmError as exc:
        from brrm.cli.common import translate

        print(f"brrm: error: {translate(str(exc), parser)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("brrm: interrupted", file=sys.stderr)
        return 130


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake reported as one ``brrm: error:`` line (exit 2) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"brrm: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from brrm import __version__

    parser = _Parser(prog="brrm", description="Judge LLM responses with reward models: BR-RM "
                                     "pairwise judges, Bradley-Terry and principle reward models.")
    parser.add_argument("--version", action="version", version=f"brrm {__version__}")
    sub = parser.add_subparsers(dest="command")
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser
