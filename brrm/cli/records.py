"""Records in and JSONL out for the record-reading subcommands: the input flags, the bad-record report, output
files (checked before any model loads), ordered streaming with ``--resume``, and terminal-safe text.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, overload

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict
from brrm.wording import counted

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from brrm.records import RecordError
    from brrm.records.duplicates import DuplicateIds
    from brrm.records.shapes import Record
    from brrm.types import PairwiseJudgment, ScalarReward


def add_input_args(p: argparse.ArgumentParser, *, verb: str, fields: str,
                   input_help: str = "records file (.jsonl, .json, .parquet, .csv, .tsv)") -> None:
    """``--input``, ``--output``, ``--input-format``, ``--limit`` and ``--field`` of a record-reading command."""
    p.add_argument("--input", "-i", required=True, help=input_help)
    p.add_argument("--output", "-o", default="-", help="JSONL output path ('-' = stdout, the default)")
    p.add_argument("--input-format", choices=("jsonl", "json", "parquet", "csv", "tsv"), default=None,
                   help="default: from the file suffix")
    p.add_argument("--limit", type=int, default=None, help=f"{verb} only the first N records")
    p.add_argument("--field", action="append", default=None, metavar="FIELD=COLUMN",
                   help=f"remap an input column, e.g. --field prompt=instruction (fields: {fields})")


def check_output(path: str, args: argparse.Namespace | None = None, *, flag: str = "--output") -> None:
    """Refuse an output path that cannot be written, before any model loads: its folder does not exist, it is a
    folder, or the file cannot be created or appended to (a read-only place, ``/proc``, no permission). The probe
    opens the file for appending, so an existing file keeps its bytes, and removes a file it created. With the
    command's ``args``, a file that holds something is also refused unless ``--resume`` or ``--overwrite`` says
    what to do with it (:func:`refuse_overwrite`).

    Raises:
        ConfigError: naming ``flag``, the path and why.
    """
    if path == "-":
        return
    if args is not None:
        refuse_overwrite(path, args, flag=flag)
    target = Path(path).expanduser()
    parent = target.resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path!r}: folder {str(parent)!r} does not exist (create it first)")
    if target.is_dir():
        raise ConfigError(f"{flag} {path!r} is a folder; give a file path")
    existed = target.exists()
    try:
        with target.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {path!r} cannot be written ({exc.strerror or exc})") from None
    if not existed:
        target.unlink(missing_ok=True)


def refuse_overwrite(path: str, args: argparse.Namespace, *, flag: str = "--output") -> None:
    """Refuse to replace an output file that holds something unless the user said so: ``--resume`` keeps its lines
    (commands that have it), ``--overwrite`` replaces it. An empty file, or one that does not exist, is written.

    Raises:
        ConfigError: naming ``flag``, the file, what it holds and both flags (or, with both given, their clash).
    """
    options = vars(args)
    resume, overwrite = bool(options.get("resume")), bool(options.get("overwrite"))
    if resume and overwrite:
        raise ConfigError("--resume keeps the lines of --output and --overwrite replaces them: give one of them")
    target = Path(path).expanduser()
    if resume or overwrite or not target.is_file() or target.stat().st_size == 0:
        return
    lines = complete_lines(target)[0]
    held = f"{lines} {'line' if lines == 1 else 'lines'}" if lines else f"{target.stat().st_size} bytes"
    keep = ("pass --resume to continue it, or --overwrite to replace it" if "resume" in options
            else "pass --overwrite to replace it (this command has no --resume: it writes the file whole), "
                 f"or another {flag}")
    raise ConfigError(f"{flag} {path!r} already exists ({held}); {keep}")


def add_overwrite_arg(p: argparse.ArgumentParser, *, resume: bool = True) -> None:
    """``--overwrite``: replace an existing output file (without it, or ``--resume``, the command refuses it)."""
    keep = "; --resume keeps its lines instead" if resume else ""
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace an existing --output file (without this flag it is refused{keep})")


def report_bad_records(records: Sequence[Record | RecordError], term: TextIO, *, show: int = 5) -> int:
    """Print the first bad records' reasons (line, field, valid options); returns how many are bad."""
    from brrm.records import RecordError

    bad = [r for r in records if isinstance(r, RecordError)]
    for r in bad[:show]:
        print(f"skipped: {printable(r.reason)}", file=term)
    if len(bad) > show:
        print(f"skipped: … and {len(bad) - show} more bad records (see the output file)", file=term)
    return len(bad)


def report_duplicate_ids(records: Sequence[Record | RecordError], term: TextIO) -> DuplicateIds:
    """Say which record ids repeat, by name and count (results stay filed by position: each record keeps its own
    output line, so the output holds those ids on several lines); returns them (empty when none)."""
    from brrm.records.duplicates import duplicate_ids

    found = duplicate_ids(r.id for r in records)
    if found:
        print(f"note: {printable(found.describe())}; each record keeps its own result and output line (filed by "
              "position or content, never by id): join the output to other data by line, not by id", file=term)
    return found


def require_records(records: Sequence[Record | RecordError], source: str) -> None:
    """Refuse input with no valid record (before any model loads).

    Raises:
        ConfigError: for an empty file, or one whose every record is bad.
    """
    from brrm.records import RecordError

    if not records:
        raise ConfigError(f"--input {source!r} holds no records")
    bad = [r for r in records if isinstance(r, RecordError)]
    if len(bad) == len(records):
        raise ConfigError(f"--input {source!r}: none of its {len(records)} records is valid (first: "
                          f"{bad[0].reason})")


def note_ignored_principles(records: Sequence[Record | RecordError], column: str, takes: bool | None, judge: str,
                            term: TextIO) -> None:
    """Say, once, which records carry a principle that the judge takes none of (``takes`` False: a Bradley–Terry
    model): their rewards are the model's reward of the response alone, which the output rows would not show.
    ``column`` is the input column the principle was read from, ``judge`` the judge as the header names it."""
    lines = [r.line for r in records if getattr(r, "principle", "")]
    if lines and takes is False:
        more = f" and {len(lines) - 10} more" if len(lines) > 10 else ""
        print(f"note: {len(lines)} records carry a {column!r} field (lines {lines[:10]}{more}); {judge} takes no "
              f"principle, so their rewards ignore it (a principle model, --kind principle, judges against it)",
              file=term)


def terminal(output: str) -> TextIO:
    """Where human-readable lines go: stderr when JSONL goes to stdout, else stdout."""
    return sys.stderr if output == "-" else sys.stdout


def open_output(path: str, *, append: bool = False) -> AbstractContextManager[TextIO]:
    """The output stream (stdout for ``-``); ``append`` keeps what the file holds (``--resume``)."""
    from contextlib import nullcontext

    return nullcontext(sys.stdout) if path == "-" else open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115


class WrittenCount:
    """How many of a run's judged positions an :class:`OrderedLines` sink has written, counted as its ``next``
    moves on (each position passed once, however many lines the run has).

    Args:
        positions: the judged positions, ascending.
    """

    def __init__(self, positions: Sequence[int]) -> None:
        self.positions, self.count = positions, 0

    def upto(self, next_position: int) -> int:
        """Judged positions before ``next_position`` (the sink's ``next``)."""
        while self.count < len(self.positions) and self.positions[self.count] < next_position:
            self.count += 1
        return self.count


class OrderedLines:
    """JSONL lines in input order, each written and flushed as soon as it and every earlier line are known, so a
    killed run keeps every line before the first unfinished record (resume with ``--resume``).

    Args:
        out: the output stream.
        skip: positions already in the file (a resumed run): not written again.
    """

    def __init__(self, out: TextIO, skip: int = 0) -> None:
        self.out, self.next, self.skip = out, 0, skip
        self.pending: dict[int, JSONDict | str] = {}

    def put(self, position: int, row: JSONDict | str) -> None:
        """Line ``position`` (0-based, in input order) is ``row`` (a JSON object, or a line kept verbatim from an
        earlier run: text ending in a newline)."""
        import json

        self.pending[position] = row
        while self.next in self.pending:
            line = self.pending.pop(self.next)
            if self.next >= self.skip:
                self.out.write(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) + "\n")
                self.out.flush()
            self.next += 1


def resumed_lines(args: argparse.Namespace) -> int:
    """With ``--resume``: how many complete lines the existing ``--output`` file holds (a torn last line is cut
    off); 0 without ``--resume`` or when the file does not exist.

    Raises:
        ConfigError: ``--resume`` with output to stdout.
    """
    if not vars(args).get("resume", False):
        return 0
    if args.output == "-":
        raise ConfigError("--resume needs --output FILE (the file a killed run left)")
    path = Path(args.output)
    if not path.exists():
        return 0
    lines, end = complete_lines(path)
    if end < path.stat().st_size:
        os.truncate(path, end)
    return lines


def complete_lines(path: Path, chunk: int = 1 << 20) -> tuple[int, int]:
    """``(complete lines, bytes up to the end of the last one)`` of the file at ``path``, read in ``chunk``-byte
    pieces (an output of millions of lines is never held in memory); a torn last line is not counted."""
    lines = end = offset = 0
    with path.open("rb") as f:
        while piece := f.read(chunk):
            if (last := piece.rfind(b"\n")) >= 0:
                lines += piece.count(b"\n")
                end = offset + last + 1
            offset += len(piece)
    return lines, end


def report_resume(skip: int, total: int, output: str, term: TextIO) -> None:
    """Say what a resumed run keeps (``resuming: N of M lines already in FILE``), or refuse a file that cannot be
    this run's (more lines than the run writes).

    Raises:
        ConfigError: naming ``--resume``, when ``skip`` > ``total``.
    """
    if skip > total:
        raise ConfigError(f"--resume: {output} holds {skip} lines but this run writes {total}: another --input, "
                          "--limit or --principle made it (rerun that command with --resume, or write a new --output)")
    if skip:
        print(f"resuming: {skip} of {total} lines already in {output}; {total - skip} to run", file=term)


def interrupted(args: argparse.Namespace) -> str:
    """What ``brrm`` says when a record-writing run is interrupted (Ctrl-C, SIGTERM): how many lines its output holds
    (written in input order, so a record finished after an unfinished one is not among them) and how to continue."""
    output = vars(args).get("output")
    if "resume" not in vars(args) or not output:
        return "brrm: interrupted"
    if output == "-":
        return "brrm: interrupted (the lines went to stdout; with --output FILE a rerun could --resume)"
    path = Path(output)
    lines = complete_lines(path)[0] if path.is_file() else 0
    if not lines:
        torn = path.is_file() and path.stat().st_size > 0  # a line cut short: --resume cuts it off and starts over
        return (f"brrm: interrupted before the first line was written to {output}; rerun the same command"
                + (" with --resume" if torn else "") + " to start over")
    verb = "is" if lines == 1 else "are"
    return (f"brrm: interrupted: {counted(lines, 'line')}, in input order, {verb} in {output}; rerun the same command "
            "with --resume to continue (an unbroken run's bytes)")


def add_resume_arg(p: argparse.ArgumentParser) -> None:
    """``--resume``: keep the complete lines of an existing ``--output`` file and run only the records after them;
    ``--overwrite``: replace that file (:func:`refuse_overwrite` refuses it without one of them)."""
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run: keep the complete lines already in --output and append the rest "
                        "(results depend only on record, options and seed, so the file equals an unbroken run's)")
    add_overwrite_arg(p)


def add_retry_failed_arg(p: argparse.ArgumentParser) -> None:
    """``--retry-failed``: a resumed run also judges again the parse failures and truncations an earlier run left
    (transient failures are always judged again; :mod:`brrm.types.retry`)."""
    p.add_argument("--retry-failed", action="store_true",
                   help="on resume, also judge again results that failed to parse or were truncated (backend "
                        "errors and timeouts are always retried; parse failures are retried by default only under "
                        "sampled decoding, with a new seed, since greedy decoding would repeat them)")


@overload
def with_id(result: PairwiseJudgment, rid: str) -> PairwiseJudgment: ...
@overload
def with_id(result: ScalarReward, rid: str) -> ScalarReward: ...
def with_id(result: PairwiseJudgment | ScalarReward, rid: str) -> PairwiseJudgment | ScalarReward:
    """A judgment (and its swap sub-judgments) or reward carrying the record's id for output."""
    import dataclasses

    from brrm.types import PairwiseJudgment

    if isinstance(result, PairwiseJudgment) and result.sub_judgments:
        subs = tuple(dataclasses.replace(s, id=rid) for s in result.sub_judgments)
        return dataclasses.replace(result, id=rid, sub_judgments=subs)
    return dataclasses.replace(result, id=rid)


def printable(text: str) -> str:
    """Record text made safe for a terminal line: control characters (newlines, ANSI escapes) shown escaped, so a
    record cannot forge output lines or recolour the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
