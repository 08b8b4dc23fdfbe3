"""``brrm arena``: rank models from pairwise judgments of their answers to the same prompts (``--battles``: rate
battles judged already, :mod:`brrm.cli.arena_battles`).

Output contract: with ``--output FOLDER``, ``leaderboard.csv`` (:data:`brrm.arena.outputs.COLUMNS`),
``battles.jsonl`` (LMArena's battle columns) and ``failures.jsonl``; the terminal shows the input's bad lines and
missing answers, the matchups judged against the full grid, and the leaderboard as a markdown table.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, TextIO

from brrm.cli import common
from brrm.cli.arena_output import check_numbers, output_folder, report_errors, show_result
from brrm.cli.command import Command
from brrm.cli.flags import judge_spec
from brrm.cli.ray_flags import add_ray_args, ray_options
from brrm.errors import ConfigError
from brrm.progress import Progress

if TYPE_CHECKING:
    from brrm.arena import ArenaTable
    from brrm.types import JudgeSpec, RewardJudge


def _arguments(p: argparse.ArgumentParser) -> None:
    """The arena's flags, then the Ray, model and backend ones; ``judging_flags`` lists those only judging uses."""
    g = p.add_argument_group("arena")
    _io_arguments(g)
    _matchup_arguments(g)
    _rating_arguments(g)
    judging_only = [a for a in p._actions if a.dest in JUDGING_ONLY]
    first = len(p._actions)
    add_ray_args(p, writer="the store and the outputs (--output is needed)")
    common.add_model_args(p)
    judging_only += p._actions[first:]
    flags = {a.dest: (a.option_strings[0], a.default) for a in reversed(judging_only) if a.option_strings}
    p.set_defaults(judging_flags=tuple((flag, dest, default) for dest, (flag, default) in flags.items()))


JUDGING_ONLY = ("round_robin", "adaptive", "budget", "target_ci", "single_order")
"""The arena flags only judging uses (refused with ``--battles``, as are every model, backend and Ray flag)."""


def _io_arguments(g: argparse._ArgumentGroup) -> None:
    """What the arena reads (the answers to judge, or battles to re-rate) and where it writes."""
    from brrm.arena import BATTLE_FORMATS

    g.add_argument("--input", "-i", default=None,
                   help="long table, JSON Lines or .parquet: one row per (prompt_id, model) with 'prompt_id', "
                        "'model', 'response', 'prompt' and an optional 'category'; or an Arena-Hard-Auto folder "
                        "(model_answer/*.jsonl, question.jsonl); or a Hugging Face dataset of those columns (a "
                        "save_to_disk folder, a dataset repository folder, or a hub id in the local cache). "
                        "Needed to judge; with --battles, optional: the answers style control reads")
    g.add_argument("--battles", default=None, metavar="FILE",
                   help="re-rate battles judged already, loading no model: brrm's own battles.jsonl, LMArena's "
                        "released battles (model_a, model_b, winner; conv_metadata for style control) or "
                        "Arena-Hard-Auto judgments (a model_judgment/<judge>/*.jsonl file or folder); JSON Lines, "
                        "JSON, Parquet or a Hugging Face dataset. Same ratings, intervals, style control and "
                        "report as judged battles; flags that only judging uses are refused")
    g.add_argument("--battles-format", choices=tuple(BATTLE_FORMATS), default=None,
                   help="the --battles file's format (default: told from its first record's fields): "
                        + "; ".join(f"{k}: {v}" for k, v in BATTLE_FORMATS.items()))
    g.add_argument("--split", default=None,
                   help="the split of a Hugging Face dataset --input with several (default: its only split)")
    g.add_argument("--output", "-o", default=None, metavar="FOLDER",
                   help="folder for leaderboard.csv, battles.jsonl, failures.jsonl, categories.csv, report.html "
                        "and the store of judged battles (audit.sqlite: a rerun judges only what is missing); "
                        "made if missing; default: print the leaderboard only")


def _matchup_arguments(g: argparse._ArgumentGroup) -> None:
    """Which matchups are judged: against a baseline, round robin or adaptive, within a budget; the anchor."""
    pairing = g.add_mutually_exclusive_group()
    pairing.add_argument("--baseline", default=None, metavar="MODEL",
                         help="every model against MODEL on every prompt (Arena-Hard-Auto's design); MODEL is "
                              "rated 1000 unless --anchor says otherwise")
    pairing.add_argument("--round-robin", action="store_true", help="every pair of models on every prompt")
    pairing.add_argument("--adaptive", action="store_true",
                         help="judge the adjacent pairs of the current fit until each is separated at --confidence "
                              "(the bootstrap interval of their difference excludes 0), --target-ci is reached or "
                              "--budget is spent; the report says how many judgments of the full grid it used")
    g.add_argument("--budget", type=int, default=None, metavar="N",
                   help="--adaptive: at most N judgments (matchups) (default: no limit)")
    g.add_argument("--target-ci", type=float, default=None, metavar="POINTS",
                   help="--adaptive: also settle an adjacent pair once both intervals are within POINTS rating "
                        "points either side (default: only separation settles)")
    g.add_argument("--anchor", default=None, metavar="MODEL",
                   help="the model rated 1000 (default: the baseline; with --round-robin and no anchor the "
                        "geometric mean strength is 1000)")


def _rating_arguments(g: argparse._ArgumentGroup) -> None:
    """How the battles are rated: outcomes, presentation orders, style control and the bootstrap intervals."""
    from brrm.arena import OUTCOMES

    g.add_argument("--outcomes", choices=OUTCOMES, default="soft",
                   help="soft: the judge's P(A>B) (swap-debiased; calibrated with --calibration) enters the fit "
                        "as a fractional win; hard: the verdict as a vote, tie half (reproduces vote "
                        "leaderboards) (default: soft)")
    g.add_argument("--single-order", action="store_true",
                   help="judge each pair in one order only (default for generative judges: both orders, "
                        "debiased; presentation order then alternates from pair to pair)")
    g.add_argument("--no-style-control", action="store_true",
                   help="skip the style-controlled ratings (length, headers, lists and bold as covariates, "
                        "Arena-Hard-Auto v2), printed beside the raw ones by default")
    g.add_argument("--bootstrap", type=int, default=200, metavar="N",
                   help="bootstrap resamples of the battles for the intervals, >= 10 (default: 200)")
    g.add_argument("--confidence", type=float, default=0.95,
                   help="interval level in (0, 1) (default: 0.95)")
    g.add_argument("--bootstrap-seed", type=int, default=0,
                   help="seed of the bootstrap: the same battles and seed give the same table (default: 0)")


def run(args: argparse.Namespace) -> int:
    """Read the table, judge its matchups, fit, print the leaderboard and write the files; with ``--battles``,
    re-rate those battles instead (:mod:`brrm.cli.arena_battles`)."""
    from brrm.arena import default_swap, grid_size, plan, read_table, run_arena
    from brrm.types import JudgeSpec

    if args.battles is not None:
        from brrm.cli.arena_battles import rerate

        return rerate(args)
    _check_judging_flags(args)
    folder = output_folder(args.output)
    common.load_options(args)
    check_numbers(args)
    ray = ray_options(args)
    if ray is not None and folder is None:
        raise ConfigError("--ray needs --output FOLDER: this process commits each judged batch to its store")
    table = read_table(args.input, split=args.split)
    strategy = "adaptive" if args.adaptive else "round_robin" if args.round_robin else "baseline"
    grid = grid_size(table, "baseline" if strategy == "baseline" else "round_robin")
    planned = grid if strategy == "adaptive" else len(plan(table, strategy, args.baseline))  # before a model loads
    if args.anchor is not None and args.anchor not in table.models:
        raise ConfigError(f"--anchor {args.anchor!r} is not a model of {args.input}; models: "
                          f"{', '.join(table.models)}")
    term = common.terminal("")
    _report_input(term, table)
    judge = _judge(args, term, len(table.answers)) if ray is None else _spec(args, term)
    swap = default_swap(judge, args.single_order)
    size = f"at most {min(args.budget or grid, grid)}" if strategy == "adaptive" else str(planned)
    print(f"{strategy.replace('_', ' ')}: {size} matchups of a full grid of {grid}"
          f"{', both orders each' if swap else ''}; {args.outcomes} outcomes", file=term)
    started = time.perf_counter()
    judged = [0.0]
    # the count is matchups finished (known when the run returns); the judge's turns, fractions of a matchup, are
    # shown beside it as turns and never move the count (issue 49: a bar never counts half-judged work as done)
    with Progress(min(args.budget or planned, planned), desc="arena (matchups finished)", unit="matchup",
                  disable=args.no_progress) as bar:
        def progress(n: float) -> None:
            judged[0] += n
            bar.turns(n)

        result = run_arena(judge, table, baseline=args.baseline, round_robin=args.round_robin,
                           adaptive=args.adaptive, budget=args.budget, target_ci=args.target_ci, anchor=args.anchor,
                           outcomes=args.outcomes, swap=swap, style_control=not args.no_style_control,
                           bootstrap=args.bootstrap, confidence=args.confidence, seed=args.bootstrap_seed,
                           store=folder, progress=progress, ray=ray)
        bar.done_to(len(result.matchups))
    if not isinstance(judge, JudgeSpec):
        judge.close()
    if folder is not None:
        now = round(judged[0])
        print(f"judged {now} matchups now; {len(result.matchups) - now} came from the store in {folder}", file=term)
    show_result(term, result, folder, started)
    return 0


def _check_judging_flags(args: argparse.Namespace) -> None:
    """Refuse a judging run (no ``--battles``) without ``--input``, or with ``--battles-format``.

    Raises:
        ConfigError: naming the flag.
    """
    if args.input is None:
        raise ConfigError("--input is needed: the models' answers to judge (or --battles FILE to re-rate battles "
                          "judged already)")
    if args.battles_format is not None:
        raise ConfigError("--battles-format names the format of --battles FILE; pass --battles")


def _judge(args: argparse.Namespace, term: TextIO, answers: int) -> RewardJudge:
    """The judge, loaded here (the embedded demo without --model), and the header saying what runs."""
    judge = common.load_judge(args, kind="brrm")
    common.header(term, "arena", judge, answers, args.input)
    return judge


def _spec(args: argparse.Namespace, term: TextIO) -> JudgeSpec:
    """What each Ray actor loads (:func:`~brrm.cli.flags.judge_spec`), said on the terminal."""
    spec = judge_spec(args, kind="brrm")
    print(f"brrm arena: on Ray ({args.ray}); each actor loads model {spec.model or 'the embedded demo'}, kind "
          f"{spec.kind}, backend {spec.backend}", file=term)
    return spec


def _report_input(term: TextIO, table: ArenaTable) -> None:
    """The input's bad lines (each once) and the models missing answers."""
    report_errors(term, table.errors)
    for model, ids in table.missing.items():
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        print(f"missing: {model} has no answer to {len(ids)} of {len(table.prompts)} prompts ({shown}); its "
              f"ratings use the others", file=term)


COMMAND = Command(
    "arena", arguments=_arguments, run=run, progress=True,
    help="rank models from pairwise judgments of their answers (leaderboard with intervals)",
    description="Judge several models' answers to the same prompts in pairs (against a baseline, or round robin) "
                "and rate the models: a Bradley-Terry fit (evalica) with seeded bootstrap intervals on the "
                "Elo-like scale, anchored at 1000. With --battles FILE, rate battles judged already (brrm's "
                "battles.jsonl, LMArena's battles, Arena-Hard-Auto judgments) the same way, loading no model.")
