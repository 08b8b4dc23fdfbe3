"""What ``--resume`` judges again of a killed or finished run's ``--output`` file, and how the file is rewritten.

A resumed ``brrm judge`` / ``score`` / ``rank`` keeps the complete lines of its output
(:func:`brrm.cli.records.resumed_lines`) and judges the records after them. Of the kept lines it also judges
again, in place, those whose status a resume retries (:mod:`brrm.types.retry`): transient failures
(``backend_error``, deadlines, stalls) always; parse failures and truncations under sampled decoding — with a new
seed, :func:`brrm.seeds.retry_id` (pairs and scored items; not groups, whose judgments are keyed by content
alone) — or with ``--retry-failed``. Lines are matched to records by position (the file is written in input
order), never by id. When a line is judged again the file is rewritten through a temporary file next to it:
every kept line byte for byte, each retried line replaced; an interruption still leaves a file of complete lines
in input order (lines not reached stay as they were).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from brrm.cli.records import OrderedLines, open_output
from brrm.records import RecordError
from brrm.types.jsonvalue import JSONDict
from brrm.types.retry import FINAL_UNLESS_DIFFERENT, result_statuses, retry_statuses

_Row = TypeVar("_Row")


@dataclass(frozen=True)
class ResumePlan:
    """What a resume does with the lines its output file holds.

    Attributes:
        lines: the kept lines (text with their newline), in input order.
        retry: position -> the ``provenance.seed`` of the failed line (None where it recorded none), for each kept
            line judged again.
        kept: kept lines holding a parse failure or truncation that are not judged again (the summary says so).
        sampled: whether a retried parse failure is judged under a new seed (:func:`brrm.seeds.retry_id`).
    """

    lines: tuple[str, ...] = ()
    retry: Mapping[int, int | None] = field(default_factory=dict)
    kept: int = 0
    sampled: bool = False

    def seed_id(self, position: int, record_id: str) -> str:
        """The id a record's sampler streams are keyed by in this run: its own, or a sampled retry's new one."""
        from brrm.seeds import retry_id

        if position in self.retry and self.sampled:
            return retry_id(record_id, self.retry[position])
        return record_id

    def judged(self, position: int) -> bool:
        """Whether the line at ``position`` is judged in this run: past the kept lines, or a kept one judged again."""
        return position >= len(self.lines) or position in self.retry

    def todo(self, rows: Sequence[_Row | RecordError], sink: OrderedLines,
             invalid: Callable[[RecordError], JSONDict]) -> list[tuple[int, _Row]]:
        """Put to ``sink`` each kept line this run does not judge again and each bad row's ``invalid`` line; returns
        the (position, record) of the rest, the rows to judge."""
        todo = []
        for k, row in enumerate(rows):
            if not self.judged(k):
                sink.put(k, self.lines[k])
            elif isinstance(row, RecordError):
                sink.put(k, invalid(row))
            else:
                todo.append((k, row))
        return todo


def resume_plan(output: str, skip: int, *, sampled: bool, retry_failed: bool) -> ResumePlan:
    """The plan of a resume that keeps ``skip`` lines of ``output`` (nothing to do when ``skip`` is 0).

    Args:
        output: the ``--output`` file.
        skip: its complete lines (:func:`brrm.cli.records.resumed_lines`).
        sampled: the judge samples and a retry gets a new seed (pairs); False for greedy judges and groups.
        retry_failed: ``--retry-failed``.
    """
    if not skip:
        return ResumePlan()
    from brrm.seeds import failed_seed

    statuses = retry_statuses(sampled=sampled, retry_failed=retry_failed)
    with open(output, encoding="utf-8") as handle:
        lines = tuple(line for _, line in zip(range(skip), handle, strict=False))
    retry: dict[int, int | None] = {}
    kept = 0
    for k, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:  # not a line brrm wrote: kept as it is (report_resume already checked the count)
            continue
        found = result_statuses(row) if isinstance(row, dict) else set()
        if found & statuses:
            retry[k] = failed_seed(row)
        elif found & FINAL_UNLESS_DIFFERENT:
            kept += 1
    return ResumePlan(lines, retry, kept, sampled)


@contextlib.contextmanager
def resumed_output(output: str, plan: ResumePlan) -> Iterator[OrderedLines]:
    """The ordered sink of a resumed run: appending to ``output`` when no kept line is judged again, else writing
    ``output.resume-tmp`` (kept lines are put verbatim by the caller) that replaces ``output`` at the end — also
    after an interruption, with the lines it had not reached copied from the old file.

    Args:
        output: the ``--output`` file.
        plan: :func:`resume_plan`'s.
    """
    if not plan.retry:
        with open_output(output, append=bool(plan.lines)) as out:
            yield OrderedLines(out, len(plan.lines))
        return
    tmp = Path(output + ".resume-tmp")
    with tmp.open("w", encoding="utf-8") as out:
        sink = OrderedLines(out)
        try:
            yield sink
        finally:
            out.writelines(plan.lines[sink.next:])  # an interrupted rewrite keeps what it had not reached
            out.flush()
            os.fsync(out.fileno())
    os.replace(tmp, output)

