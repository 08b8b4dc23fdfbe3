"""``brrm score``: scalar rewards of single-response records (Bradley–Terry or principle models).

Output contract: one :class:`~brrm.types.ScalarReward` dict per input record (and principle), in input order, to
``--output`` (or stdout); a summary with counts by status to the terminal. A pair record (``response_a`` /
``response_b``) yields two records, ``<id>:A`` and ``<id>:B``. Without ``--model`` the embedded demo model runs
as a principle judge (``--principle`` required), to show the machinery.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from brrm.cli import common
from brrm.errors import ConfigError
from brrm.types.protocols import KIND_TRAITS, RewardJudge


def add_parser(sub: Any) -> None:
    p = sub.add_parser("score", help="scalar rewards of conversation/response records",
                       description="Score each record's response with a Bradley-Terry or principle reward model "
                                   "(default without --model: the embedded demo as a principle judge).")
    common.add_input_args(p, verb="score", fields="id, conversation, prompt, response, principle")
    common.add_model_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read records, score them (every record under every ``--principle``), write JSONL and a summary."""
    from brrm.records import FieldMap, RecordError, read_records
    from brrm.types import ScalarReward, Status, summarize_rewards

    if args.kind in KIND_TRAITS and KIND_TRAITS[args.kind]["pairwise"]:
        raise ConfigError("brrm score needs a scalar model (--kind bt or principle); BR-RM judges pairs: use brrm "
                          "judge, or brrm rank with a reference")
    if args.model is None and args.kind not in KIND_TRAITS:  # auto: the demo scores as a principle model
        args.kind = "principle"
    common.check_output(args.output)
    _, opts = common.load_options(args)
    principles = list(args.principle or [])
    if opts["kind"] == "principle" and args.model is None and not principles:
        raise ConfigError("the embedded demo runs as a principle judge here: pass --principle "
                          "'The response is factually correct.' (or --model a reward model)")
    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, "single", fields=fields, limit=args.limit, format=args.input_format)
    common.require_records(records, args.input)
    term = common.terminal(args.output)
    common.report_bad_records(records, term)
    args.principle = None  # principles are applied per record below, one output row each
    judge = common.load_judge(args)
    common.header(term, "score", judge, len(records), args.input)
    good = [r for r in records if not isinstance(r, RecordError)]
    scored = iter(_score(judge, good, principles, args))
    results: list[ScalarReward] = []
    lines: list[int] = []
    for rec in records:
        got = ([ScalarReward.failed(Status.INVALID_INPUT, rec.reason, id=rec.id)] if isinstance(rec, RecordError)
               else next(scored))
        results.extend(got)
        lines.extend([rec.line] * len(got))
    with common.open_output(args.output) as out:
        for line, r in zip(lines, results, strict=True):
            row = r.to_dict()
            out.write(json.dumps({"id": row.pop("id"), "line": line, **row}, ensure_ascii=False) + "\n")
    print(json.dumps(summarize_rewards(results)), file=term)
    judge.close()
    return 0


def _score(judge: RewardJudge, good: list[Any], principles: list[str], args: argparse.Namespace) -> list[list[Any]]:
    """Per record, its reward(s): one per principle for principle models (one batch), else one."""
    from brrm.records import seed_ids

    per: list[list[Any]]
    if not judge.info.takes_principle:
        per = [[None] for _ in good]
    else:
        per = [principles or [r.principle] for r in good]
        missing = [r.line for r, ps in zip(good, per, strict=True) if not all(ps)]
        if missing:
            raise ConfigError(f"principle models need --principle or a 'principle' field; missing on lines "
                              f"{missing[:10]}")
    flat = [(i, p) for i, ps in enumerate(per) for p in ps]
    with common.progress_bar(len(flat), desc="scoring", unit="item", disable=args.no_progress) as bar:
        seeds = seed_ids(good)
        rewards = judge.score([good[i].conversation for i, _ in flat], [good[i].response for i, _ in flat],
                              principles=None if per and per[0] == [None] else [p for _, p in flat],
                              ids=[seeds[i] for i, _ in flat], progress=bar.update)
        rewards = [common.with_id(r, good[i].id) for (i, _), r in zip(flat, rewards, strict=True)]
    out: list[list[Any]] = [[] for _ in good]
    for (i, _), r in zip(flat, rewards, strict=True):
        out[i].append(r)
    return out
