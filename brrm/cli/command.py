"""One command object per verb: its name, its help, the flags it adds to its own parser and what runs it.

:data:`brrm.cli.SUBCOMMANDS` lists them; :func:`brrm.cli.build_parser` calls each one's :meth:`Command.add_parser`
on argparse's subparsers, which sets ``func`` to the command's ``run``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol


class Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake reported as one ``brrm: error:`` line (exit 2) instead of the usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `brrm probe --input F` must not become `--input-format F` (a confusing choice error)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        verb = self.prog.removeprefix("brrm").strip()  # "" for the top level: no "brrm: error: brrm: …"
        self.exit(2, f"brrm: error: {verb + ': ' if verb else ''}{message} (see {self.prog} --help)\n")


Subparsers = argparse._SubParsersAction  # argparse's own type of ``add_subparsers()``'s result


class Verb(Protocol):
    """What :func:`brrm.cli.build_parser` needs of a subcommand: its parser added to the subparsers (with
    ``func`` set to what runs it)."""

    def add_parser(self, sub: Subparsers[Parser]) -> None: ...


@dataclass(frozen=True)
class Command:
    """A subcommand of ``brrm``.

    Attributes:
        name: the verb (``judge``).
        help: its line in ``brrm --help``.
        arguments: adds its flags to its parser.
        run: runs it on the parsed flags; returns the exit code.
        description: its ``brrm VERB --help`` text, or a function making it (one that imports what it names).
        progress: whether it shows a progress bar: it then takes ``--no-progress`` and its counterpart
            ``--progress`` (the default, so a script or an alias can say it either way); both set ``no_progress``.
    """

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | Callable[[], str] = ""
    progress: bool = False

    def add_parser(self, sub: Subparsers[Parser]) -> None:
        """Add this verb's parser to ``sub``, with ``func`` set to :attr:`run`."""
        text = self.description if isinstance(self.description, str) else self.description()
        p = sub.add_parser(self.name, help=self.help, description=text or None)
        self.arguments(p)
        if self.progress:
            p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
            p.add_argument("--progress", dest="no_progress", action="store_false",
                           help="show the progress bar on stderr (the default; --no-progress hides it)")
        p.set_defaults(func=self.run)

