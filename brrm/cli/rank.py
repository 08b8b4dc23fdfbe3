"""``brrm rank``: rank groups of responses (best-of-N, GRPO groups) with any model kind.

Output contract: one JSON object per input record, in input order: the record's ``id`` and ``line`` and the
:class:`~brrm.types.GroupResult` (per-response rewards, ranking, win matrix, tie matrix, the strategy, the
judgments behind it). The terminal shows each group's ranking and rewards, and the cost: judgments per group
under the strategy (and swap), and in total.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import TYPE_CHECKING, TextIO

from brrm.cli import common
from brrm.cli.command import Command
from brrm.cli.resume import ResumePlan, resume_plan, resumed_output
from brrm.progress import Progress
from brrm.records import GroupRecord, RecordError
from brrm.types.retry import kept_note

if TYPE_CHECKING:
    from brrm.types import GroupResult, RewardJudge, ScalarReward


def _arguments(p: argparse.ArgumentParser) -> None:
    from brrm.types.strategies import STRATEGIES

    common.add_input_args(p, verb="rank", fields="id, conversation, prompt, responses, reference",
                          input_help="records file with a 'responses' list per record")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="auto (scalar models: scores; BR-RM: round_robin, N(N-1) judgments), circular (N), "
                        "knockout (N-1), reference (N, needs a 'reference' field), scores (scalar models)")
    common.add_model_args(p)
    common.add_resume_arg(p)
    common.add_retry_failed_arg(p)


def run(args: argparse.Namespace) -> int:
    """Read group records, rank them, write JSONL, print rankings and the cost."""
    from brrm.types.strategies import check_strategy

    common.check_output(args.output, args)
    common.load_options(args)
    skip = common.resumed_lines(args)
    records, good = _read_groups(args)
    term = common.terminal(args.output)
    common.report_bad_records(records, term)
    common.report_duplicate_ids(records, term)
    common.report_resume(skip, len(records), args.output, term)
    judge = common.load_judge(args, kind="brrm")
    pairwise = bool(judge.info.pairwise)
    strategy = check_strategy(args.strategy, pairwise=pairwise, has_reference=args.strategy == "reference")
    swap = bool(judge.info.composition.swap) and pairwise
    common.header(term, "rank", judge, len(records), args.input)
    # a group's judgments are keyed by its content alone: a retry is re-seeded never, so parse failures stay
    # unless --retry-failed (brrm.types.retry)
    plan = resume_plan(args.output, skip, sampled=False, retry_failed=args.retry_failed)
    if plan.retry:
        print(f"resuming: {len(plan.retry)} kept lines failed: ranked again in place", file=term)
    left = {id(r) for k, r in enumerate(records) if plan.judged(k)}
    units = _announce_cost(term, judge, [g for g in good if id(g) in left], strategy, swap=swap)
    started = time.perf_counter()
    groups = sum(id(g) in left for g in good)
    with resumed_output(args.output, plan) as sink, Progress(
            groups, desc="ranking (groups written)", unit="group", disable=args.no_progress, work_total=units,
            work_unit="pair" if pairwise else "response") as bar:
        _rank_all(judge, records, plan, strategy, sink, bar, term, swap)
    print(f"time {time.perf_counter() - started:.1f} s", file=term)
    if plan.kept:
        print(f"note: {kept_note(plan.kept, what='kept lines')}", file=term)
    judge.close()
    return 0


def _read_groups(args: argparse.Namespace) -> tuple[list[GroupRecord | RecordError], list[GroupRecord]]:
    """The input's rows and its valid group records. Under ``--strategy reference`` a record without a
    ``reference`` is one of the input's bad rows (an ``invalid_input`` line naming its line number); the others
    are ranked.

    Raises:
        ConfigError: when no row is a valid record (naming the first bad line).
    """
    from brrm.records import FieldMap, missing_reference, read_records

    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "groups", fields=fields, limit=args.limit, format=args.input_format)
    if args.strategy == "reference":
        records = [RecordError(r.line, r.id, missing_reference(r))
                   if not isinstance(r, RecordError) and missing_reference(r) else r for r in records]
    common.require_records(records, args.input)
    return records, [r for r in records if not isinstance(r, RecordError)]


def _announce_cost(term: TextIO, judge: RewardJudge, good: list[GroupRecord], strategy: str, *, swap: bool) -> int:
    """Print the run's cost, as the judge counts it; returns the total of the progress bar's turns (pairs — a swapped
    pair's two orders count one — for pairwise judges, responses for scalar models; the bar counts groups)."""
    if not good:
        print(f"strategy {strategy}: no group left to rank", file=term)
        return 0
    costs = [judge.judgment_cost("group", len(r.responses), strategy=strategy, swap=swap) for r in good]
    if judge.info.pairwise:
        pairs = sum(c.pairs for c in costs)
        print(f"strategy {strategy}{' with swap' if swap else ''}: {sum(c.total for c in costs)} two-turn "
              f"judgments in total (e.g. {costs[0].total} for a group of {costs[0].n}), of {pairs} "
              f"{'pair' if pairs == 1 else 'pairs'}{' in both orders' if swap else ''}", file=term)
        return pairs
    print(f"strategy {strategy}: 0 two-turn judgments in total; {sum(c.total for c in costs)} scalar rewards",
          file=term)
    return sum(len(r.responses) for r in good)


def _rank_all(judge: RewardJudge, records: list[GroupRecord | RecordError], plan: ResumePlan, strategy: str,
              sink: common.OrderedLines, bar: Progress, term: TextIO, swap: bool) -> None:
    """Rank every record past the kept lines (and the kept lines a resume ranks again); each line goes to ``sink``
    (and its ranking to ``term``) when done. Lines are filed by position, never by id."""
    from brrm.service.items import GroupItem, RankCall
    from brrm.service.run import run as run_jobs

    todo = plan.todo(records, sink, lambda rec: {"id": rec.id, "line": rec.line, "status": "invalid_input",
                                                 "reason": rec.reason})

    written = common.WrittenCount([k for k, _ in todo])

    def finished(i: int, group: GroupResult) -> None:
        k, rec = todo[i]
        sink.put(k, {"id": rec.id, "line": rec.line, **group.to_dict()})
        bar.done_to(written.upto(sink.next))
        bar.write(_group_line(judge, rec, group, swap), file=term)

    run_jobs(judge, [GroupItem(r.conversation, tuple(r.responses), r.reference) for _, r in todo],
             call=RankCall(strategy, reference=strategy == "reference"), chunk_size=judge.info.chunk_size,
             progress=bar.turns, on_result=finished)


def _group_line(judge: RewardJudge, rec: GroupRecord, group: GroupResult, swap: bool) -> str:
    """A group's ranking, rewards and judgments (and, where they differ, the two-turn runs behind them, the unit of
    the cost line: a swapped judgment is one run per order)."""
    def fmt(r: ScalarReward) -> str:
        return f"{r.reward:.3f}" if r.ok else r.status.value

    rewards = ", ".join(f"#{k} {fmt(r)}" for k, r in enumerate(group.rewards))
    order = " > ".join(f"#{k}" for k in group.ranking) or "none"
    rates = [x for x in group.win_rates() if not math.isnan(x)]
    runs = judge.judgment_cost("group", len(group.rewards), strategy=group.strategy, swap=swap).units
    more = f"; {runs} two-turn runs, as the cost line counts" if runs != group.n_judgments else ""
    extra = f"; judgments {group.n_judgments} ({group.failed} failed{more})" if group.n_judgments else ""
    return f"{common.printable(rec.id):<16} ranking {order}; rewards {rewards}{extra}" + (" ; win matrix " + json.dumps(
        [list(r) for r in group.wins]) if rates and len(group.rewards) <= 8 else "")


COMMAND = Command(
    "rank", arguments=_arguments, run=run, progress=True,
    help="rank groups of responses (records with a 'responses' list)",
    description="Rank each record's responses: per-response rewards, ranking and win matrix.")
