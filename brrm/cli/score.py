"""``brrm score``: scalar rewards of single-response records (Bradley–Terry or principle models).

Output contract: one :class:`~brrm.types.ScalarReward` dict per input record (and principle), in input order, to
``--output`` (or stdout), each line written and flushed as soon as it and every earlier one are done
(``--resume`` continues a killed run's file); a summary with counts by status to the terminal. A pair record
(``response_a`` / ``response_b``) yields two records, ``<id>:A`` and ``<id>:B``. Without ``--model`` the embedded
demo model runs as a principle judge (``--principle`` required), to show the machinery.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from brrm.cli import common
from brrm.cli.command import Command
from brrm.cli.flags import principle_refusal
from brrm.cli.resume import ResumePlan, resume_plan, resumed_output
from brrm.errors import ConfigError
from brrm.progress import Progress
from brrm.types.protocols import RewardJudge, kind_trait
from brrm.types.retry import is_sampled, kept_note


def _arguments(p: argparse.ArgumentParser) -> None:
    common.add_input_args(p, verb="score", fields="id, conversation, prompt, response, principle")
    common.add_model_args(p)
    common.add_resume_arg(p)
    common.add_retry_failed_arg(p)


def run(args: argparse.Namespace) -> int:
    """Read records, score them (every record under every ``--principle``), write JSONL and a summary."""
    from brrm.records import FieldMap, RecordError, read_records
    from brrm.types import ScalarReward, Status, summarize_rewards

    _scalar_kind(args)
    common.check_output(args.output, args)
    _, opts = common.load_options(args)
    skip = common.resumed_lines(args)
    principles = _checked_principles(args, opts["kind"])
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "single", fields=fields, limit=args.limit, format=args.input_format)
    common.require_records(records, args.input)
    term = common.terminal(args.output)
    common.report_bad_records(records, term)
    common.report_duplicate_ids(records, term)
    args.principle = None  # principles are applied per record below, one output row each
    judge = common.load_judge(args)
    _refuse_principles(judge, principles, args.model)
    rows = len({r.line for r in records})  # a pair record gives two responses, each a record of the same line
    common.header(term, "score", judge, rows, args.input,
                  detail=f"{len(records)} responses: each pair record's two" if rows != len(records) else "")
    per = _principles(judge, records, principles)
    common.report_resume(skip, sum(len(ps) for ps in per), args.output, term)
    common.note_ignored_principles(records, (fields or FieldMap()).principle, judge.info.takes_principle,
                                   judge.info.describe(), term)
    results: list[ScalarReward] = []
    plan = resume_plan(args.output, skip, sampled=is_sampled(judge.info), retry_failed=args.retry_failed)
    if plan.retry:
        print(f"resuming: {len(plan.retry)} kept lines failed: scored again in place", file=term)
    with resumed_output(args.output, plan) as sink:
        lines = [(rec, p) for rec, ps in zip(records, per, strict=True) for p in ps]

        def invalid(rec: RecordError) -> dict[str, Any]:
            res = ScalarReward.failed(Status.INVALID_INPUT, rec.reason, id=rec.id)
            results.append(res)
            return _row(rec, res)

        todo = plan.todo([rec for rec, _ in lines], sink, invalid)
        _score(judge, [(pos, rec, lines[pos][1]) for pos, rec in todo], sink, results, args, plan)
    for line in summary_lines(summarize_rewards(results)):
        print(line, file=term)
    if plan.kept:
        print(f"note: {kept_note(plan.kept, what='kept lines')}", file=term)
    judge.close()
    return 0


def _scalar_kind(args: argparse.Namespace) -> None:
    """Refuse a pairwise ``--kind``; without ``--model`` or ``--kind``, the embedded demo scores as a principle model.

    Raises:
        ConfigError: naming the kinds that score.
    """
    if kind_trait(args.kind, "pairwise"):
        raise ConfigError("brrm score needs a scalar model (--kind bt or principle); BR-RM judges pairs: use brrm "
                          "judge, or brrm rank with a reference")
    if args.model is None and args.kind == "auto":
        args.kind = "principle"


def _checked_principles(args: argparse.Namespace, kind: str) -> list[str]:
    """The ``--principle`` values, each checked by the rule every verb's ``--principle`` meets (``load`` is called
    without them here).

    Raises:
        ConfigError: on an invalid principle, or none for the embedded demo as a principle judge.
    """
    from brrm.compose.options import PrincipleOptions

    principles = list(args.principle or [])
    for principle in principles:
        PrincipleOptions(principle=principle)
    if kind_trait(kind, "takes_principle") and args.model is None and not principles:
        raise ConfigError("the embedded demo runs as a principle judge here: pass --principle "
                          "'The response is factually correct.' (or --model a reward model)")
    return principles


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The human summary of a ``brrm score`` run (as ``brrm judge`` prints its own), from
    :func:`brrm.types.summarize_rewards`'s dict: counts, the ok rewards' mean / min / max, failures by status."""
    by = summary["by_status"]
    reward = summary["reward"]
    stats = (f"mean {reward['mean']:.4f}, min {reward['min']:.4f}, max {reward['max']:.4f}" if reward
             else "none (no ok reward)")
    failed = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in by.items() if v and k not in ("ok", "invalid_input"))
    out = ["summary:", f"  responses {summary['total']}; scored {summary['scored']}; invalid records "
                       f"{by.get('invalid_input', 0)}",
           f"  rewards (ok only; failures never enter them): {stats}",
           f"  failures: {failed or 'none'}; inputs cut to fit (truncated) {summary['truncated']}"]
    if summary["invalid_lines"]:
        out.append("  invalid: " + ", ".join(summary["invalid_lines"]))
    return out


def _refuse_principles(judge: RewardJudge, principles: list[str], model: str | None) -> None:
    """Refuse ``--principle`` for a loaded judge that takes none (``--kind auto`` whose config did not tell the
    kind before loading), before any record is scored.

    Raises:
        ConfigError: naming ``--principle`` and the kind that takes one.
    """
    if principles and not judge.info.takes_principle:
        judge.close()
        raise ConfigError(principle_refusal(model) if not judge.info.pairwise else "--principle: only principle "
                          f"models (--kind principle) take one; this judge is {judge.info.describe()}")


def _row(rec: Any, reward: Any) -> dict[str, Any]:
    row = reward.to_dict()
    return {"id": row.pop("id"), "line": rec.line, **row}


def _principles(judge: RewardJudge, records: list[Any], principles: list[str]) -> list[list[Any]]:
    """Per record, the principles it is scored under (one output line each; [None] for Bradley–Terry models).

    Raises:
        ConfigError: a principle model without ``--principle`` or a record's ``principle`` field.
    """
    from brrm.records import RecordError

    if not judge.info.takes_principle:
        return [[None] for _ in records]
    per = [[None] if isinstance(r, RecordError) else (principles or [r.principle]) for r in records]
    missing = sorted({r.line for r, ps in zip(records, per, strict=True) if not isinstance(r, RecordError)
                      and not all(p and p.strip() for p in ps)})  # a pair row gives two records of one line
    if missing:
        raise ConfigError(f"principle models need --principle or a 'principle' field; missing on lines "
                          f"{missing[:10]}")
    return per


def _score(judge: RewardJudge, flat: list[tuple[int, Any, Any]], sink: common.OrderedLines, results: list[Any],
           args: argparse.Namespace, plan: ResumePlan) -> None:
    """Score every (position, record, principle), a chunk per call; each line goes to ``sink`` when done (filed by
    position, never by id: records whose ids repeat each get their own line)."""
    from brrm.records import seed_ids
    from brrm.service.items import ScoreItem
    from brrm.service.run import run as run_jobs

    recs = [rec for _, rec, _ in flat]
    ids = [plan.seed_id(pos, i) for (pos, _, _), i in zip(flat, seed_ids(recs), strict=True)]
    jobs = [ScoreItem(r.conversation, r.response, principle, id=i)
            for r, (_, _, principle), i in zip(recs, flat, ids, strict=True)]
    written = common.WrittenCount([pos for pos, _, _ in flat])
    with Progress(len(flat), desc="scoring (lines written)", unit="item", disable=args.no_progress) as bar:
        def finished(i: int, reward: Any) -> None:
            pos, rec, _ = flat[i]
            reward = common.with_id(reward, rec.id)
            results.append(reward)
            sink.put(pos, _row(rec, reward))
            bar.done_to(written.upto(sink.next))

        run_jobs(judge, jobs, chunk_size=judge.info.chunk_size, progress=bar.turns, on_result=finished)


COMMAND = Command(
    "score", arguments=_arguments, run=run, progress=True,
    help="scalar rewards of conversation/response records",
    description="Score each record's response with a Bradley-Terry or principle reward model "
                "(default without --model: the embedded demo as a principle judge).")
