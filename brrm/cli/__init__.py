"""The ``brrm`` command line (argparse): one module per subcommand, every model built by :func:`brrm.load`.

Each verb is one :class:`~brrm.cli.command.Command` object (its flags and its ``run``), listed in :data:`SUBCOMMANDS`. A
mistake of the user's (a bad flag value, a missing file, a model that cannot be found) is one ``brrm: error:``
line naming the flag and exit code 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from brrm.cli.command import Parser, Verb
from brrm.errors import BrrmError
from brrm.signals import Terminated, sigterm_as_interrupt

SUBCOMMANDS = ("brrm.cli.judge:COMMAND", "brrm.cli.score:COMMAND", "brrm.cli.rank:COMMAND", "brrm.cli.arena:COMMAND",
               "brrm.cli.serve:COMMAND", "brrm.cli.audit:COMMAND", "brrm.cli.bench:COMMAND",
               "brrm.cli.calibrate:COMMAND", "brrm.cli.probe:COMMAND")
"""The subcommands in help order, imported when the parser is built: ``module:COMMAND`` names each one's
:class:`~brrm.cli.command.Command`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brrm`` console script; returns the exit code."""
    # outlines' mask kernel is torch.compile'd; on CPU its first call would spend 10-23 s compiling
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage mistake (already reported on one line)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if vars(args).get("func") is None:
        parser.print_help()
        return 2
    _line_buffered(sys.stdout)
    try:
        # SIGTERM ends every verb as Ctrl-C does (one line, exit 143); the server drains on its own handler
        with sigterm_as_interrupt(vars(args).get("command") != "serve"):
            return int(args.func(args))
    except BrrmError as exc:
        from brrm.cli.errors import error_line

        print(f"brrm: error: {error_line(exc, parser, vars(args).get('command'))}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # an input read as text that is not (the record readers name their file)
        print(f"brrm: error: an input file is not UTF-8 text ({exc}); is it binary, or in another encoding?",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        from brrm.cli.common import interrupted

        print(interrupted(args), file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except BrokenPipeError:  # the reader left (``| head -1``): stop quietly, as a command killed by SIGPIPE does
        _stdout_to_devnull()
        return PIPE_CLOSED
    finally:
        from brrm.cli.common import end_compile_note

        end_compile_note()


INTERRUPTED = (130, 143)
"""Exit statuses of a run ended by Ctrl-C (128 + SIGINT) or SIGTERM (128 + SIGTERM)."""


def console() -> NoReturn:
    """The ``brrm`` console script and ``python -m brrm``: :func:`main`, then the process's exit.

    After an interrupt (exit 130 or 143) the run has unwound: output lines are flushed, files closed, an audit's
    finished rows committed. A judging thread may still be inside native code (a backend call does not stop
    mid-kernel), and an ordinary interpreter exit would then wait for it, or tear down native libraries around it
    (``terminate called without an active exception``, exit 134, was seen after Ctrl-C on an audit). So an
    interrupted run ends with ``os._exit`` after flushing stdout and stderr; every other exit is ``sys.exit``.
    """
    code = main()
    if code in INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


PIPE_CLOSED = 141
"""Exit status when stdout's reader has gone: 128 + SIGPIPE (13), what a shell reports for ``cat`` or ``seq`` ended
by a closed pipe. Lines already written to ``--output`` stay there (each flushed once it and every earlier record
are done)."""


def _stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so that the interpreter's own flush at exit finds no closed pipe
    (which would print a second error and exit 120; Python's documentation, "Note on SIGPIPE")."""
    # no descriptor (an in-process stream): nothing to point
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _line_buffered(stream: object) -> None:
    """Write each line the user sees when it is printed: a verdict line as its pair finishes, also when stdout is a
    pipe or a file (``| tee``, a job's log), where Python would otherwise hold the lines in an 8 KiB block until the
    run ends. (stderr, where the progress bar goes, is line-buffered already.)"""
    reconfigure = getattr(stream, "reconfigure", None)
    if callable(reconfigure):
        with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):  # a stream that cannot change
            reconfigure(line_buffering=True)


def build_parser() -> argparse.ArgumentParser:
    from brrm import __version__

    parser = Parser(prog="brrm", description="Judge LLM responses with reward models: BR-RM "
                                     "pairwise judges, Bradley-Terry and principle reward models.")
    parser.add_argument("--version", action="version", version=f"brrm {__version__}")
    sub = parser.add_subparsers(dest="command")
    for entry in SUBCOMMANDS:
        _verb(entry).add_parser(sub)
    return parser


def _verb(entry: str) -> Verb:
    """The command an entry of :data:`SUBCOMMANDS` names."""
    from brrm.registry import resolve

    verb: Verb = resolve(entry)
    return verb
