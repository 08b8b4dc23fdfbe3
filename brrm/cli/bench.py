"""``brrm bench``: run a judge on a reward-model benchmark with its own protocol, or replay stored outputs.

``brrm bench NAME [--model …] [--subset …] [--limit N] [--output DIR]`` loads the benchmark, judges it with its
presentation-order protocol and prints its official scores per subset and overall (next to the model card's
figure for a known checkpoint) with the cost. ``--output DIR`` keeps ``judgments.jsonl`` (per item), ``run.json``,
``result.json`` and ``result.md``; rerunning the same command into the same folder resumes an interrupted run.
``brrm bench NAME --predictions FILE`` scores stored outputs instead (official output files, or a brrm
``judgments.jsonl``) without loading a model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from brrm.cli import common
from brrm.cli.command import Command
from brrm.progress import Progress
from brrm.types.protocols import RewardJudge

if TYPE_CHECKING:
    from brrm.bench.base import Benchmark
    from brrm.bench.core import BenchItem, ItemResult
    from brrm.bench.protocol import Protocol, Scored
    from brrm.bench.rewardbench2 import RewardBench2


def _arguments(p: argparse.ArgumentParser) -> None:
    from brrm.bench.registry import names

    p.add_argument("name", metavar="NAME", help=f"benchmark: {', '.join(names())}")
    p.add_argument("--subset", action="append", default=None,
                   help="subset to run (repeatable; default: all), e.g. Natural, adversarial, chat, safety")
    p.add_argument("--limit", type=int, default=None, help="first N items of each subset")
    p.add_argument("--output", "-o", default=None,
                   help="folder for judgments.jsonl, run.json, result.json and result.md (created; an interrupted "
                        "run in it resumes)")
    p.add_argument("--predictions", action="append", default=None, metavar="FILE",
                   help="score stored outputs instead of running a model: official output files or a brrm "
                        "judgments.jsonl (Auto-J: the original-order file, then the exchanged-order file)")
    p.add_argument("--data-dir", default=None,
                   help="offline: a folder holding the benchmark folders in the layout of docs/benchmarks.md (e.g. "
                        "DIR/LLMBar/LLMBar/Natural/dataset.json); nothing is downloaded. Default: $BRRM_DATA_DIR, "
                        "else brrm's download cache, filled from each benchmark's pinned official repository on first "
                        "use (unless HF_HUB_OFFLINE=1)")
    p.add_argument("--data", default=None, help="hub id or local copy of hub-only data (rewardbench: default "
                                                 "allenai/reward-bench; mt-bench --subset human: "
                                                 "lmsys/mt_bench_human_judgments; rm-bench: a copy of THU-KEG/"
                                                 "RM-Bench's train split, read in its order; judgebench: "
                                                 "ScalerLab/JudgeBench or a copy of it); a hub id is read from "
                                                 "the Hugging Face cache, downloaded there when online")
    p.add_argument("--protocol", choices=("released", "brrm", "both"), default=None,
                   help="released: the model card's protocol (faithful decoding, the card's sampling and budgets, "
                        "the benchmark's orders, headline over parsed items as the official BR-RM scorer; default "
                        "for a known checkpoint); brrm: constrained decoding, both orders combined (swap); both: the "
                        "two side by side. Default for other models: your judge options and the benchmark's orders")
    p.add_argument("--orders", choices=("official", "both"), default=None,
                   help="presentation orders: the benchmark's own (default; brrm protocol: both where allowed), or "
                        "both orders combined per pair (disagreement is a tie) where its metric scores one verdict "
                        "per pair")
    p.add_argument("--order-seed", type=int, default=0, help="seed of the benchmark's random presentation orders")
    p.add_argument("--weighting", choices=("official", "unweighted"), default=None,
                   help="rewardbench: official section weights (default) or the BR-RM paper's unweighted sections")
    p.add_argument("--strategy", choices=("knockout", "round_robin"), default=None,
                   help="rewardbench2, pairwise judges: best-of-N strategy (default knockout: N-1 judgments per "
                        "item; round_robin: N(N-1))")
    p.add_argument("--revision", default=None, help="rewardbench2: hub dataset revision (commit, branch or tag)")
    p.add_argument("--sweep-samples", default=None, metavar="K,K,...",
                   help="self-consistency voting sweep (BR-RM judges): run the benchmark at each --samples K "
                        "(e.g. 1,3,5) and print the headline figure against the judgments each cost")
    common.add_retry_failed_arg(p)
    common.add_model_args(p)


def run(args: argparse.Namespace) -> int:
    """Check every flag, then replay or run (under one protocol or two, or a sweep over ``--samples``); print the
    table and write the outputs."""
    if args.sweep_samples:
        from brrm.cli.bench_sweep import sweep

        return sweep(args, execute)
    execute(args)
    return 0


def execute(args: argparse.Namespace) -> list[Scored]:
    """One benchmark run (or replay) as the flags say; the :class:`~brrm.bench.protocol.Scored` runs it printed."""
    from brrm.bench.data import run_revision
    from brrm.bench.protocol import resolve
    from brrm.bench.registry import get_benchmark
    from brrm.cli.flags import detected_kind
    from brrm.errors import ConfigError

    bench = get_benchmark(args.name, weighting=args.weighting, strategy=args.strategy, revision=args.revision)
    subsets = bench.resolve_subsets(args.subset)
    bench.orders(args.orders)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    folder = _output_folder(args.output)
    if args.predictions:
        if args.protocol:
            raise ConfigError("--protocol applies to runs: a replay scores the stored outputs as they were made "
                              "(both denominators shown where brrm has per-item results)")
        return [_replay(args, bench, folder)]
    if vars(args).get("swap"):
        raise ConfigError("--swap does not apply to brrm bench: the benchmark's protocol decides the presentation "
                          "orders (use --orders both where the benchmark allows it)")
    _, user = common.load_options(args)  # flag combinations are checked before any data or model loads
    protocols = resolve(args.protocol, bench, model=args.model, user=user, orders=args.orders,
                        bench_user={"weighting": args.weighting} if args.weighting else {})
    items = bench.load(subsets, root=args.data_dir, limit=args.limit, source=args.data)
    if not items:
        raise ConfigError(f"no {bench.title} items for --subset {', '.join(subsets)}")
    subsets = tuple(s for s in subsets if any(it.subset == s for it in items))
    revision = run_revision(bench, items, root=args.data_dir, source=args.data)
    # the kind the judge loads as (the embedded demo judges as BR-RM here; unknown: loading names the problem)
    kind = args.kind if args.kind != "auto" else "brrm" if args.model is None else detected_kind(args.model)
    pairwise = kind == "brrm"
    judge = common.load_judge(_with(args, protocols[0].options if pairwise else {}), kind="brrm")
    scored = []
    try:  # every judge is built (and its options checked) before the first judgment
        judges = [judge] + [_sibling(args, judge, p.options) if pairwise else judge for p in protocols[1:]]
        for protocol, mine in zip(protocols, judges, strict=True):
            where = folder / protocol.name if folder is not None and len(protocols) > 1 else folder
            if where is not None:
                where.mkdir(exist_ok=True)
            scorer = bench if not protocol.bench_options else get_benchmark(  # the loaded one keeps its data notes
                args.name, **{"weighting": args.weighting, "strategy": args.strategy, "revision": args.revision,
                              **protocol.bench_options})
            scored.append(_run(args, scorer, mine, items, subsets, protocol, where, revision))
    finally:
        judge.close()
    _finish(bench, scored, folder, judge.info.model, revision, vars(args).get("calibration"))
    return scored


def _with(args: argparse.Namespace, options: Mapping[str, object]) -> argparse.Namespace:
    """``args`` with a protocol's judge options (their flag names) filled in."""
    return argparse.Namespace(**{**vars(args), **dict(options)})


def _sibling(args: argparse.Namespace, judge: RewardJudge, options: Mapping[str, object]) -> RewardJudge:
    """A second BR-RM judge under other options on the first one's backend (the model is loaded once)."""
    from brrm.load_options import judge_option_names

    _, opts = common.load_options(_with(args, options))
    names = judge_option_names("brrm")
    return judge.with_options(**{k: v for k, v in opts.items() if k in names})


def _output_folder(path: str | None) -> Path | None:
    from brrm.errors import ConfigError

    if path is None:
        return None
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--output {path!r} is a file; give a folder")
    if not folder.parent.is_dir():
        raise ConfigError(f"--output {path!r}: folder {str(folder.parent)!r} does not exist (create it first)")
    folder.mkdir(exist_ok=True)
    return folder


def _replay(args: argparse.Namespace, bench: Benchmark, folder: Path | None) -> Scored:
    from brrm.bench.data import files_sha256, run_revision, with_data
    from brrm.bench.protocol import Scored, score_both
    from brrm.bench.report import is_brrm_output, read_items
    from brrm.errors import ConfigError

    paths = [Path(p).expanduser() for p in args.predictions]
    for p in paths:
        if not p.is_file():
            raise ConfigError(f"--predictions {str(p)!r} does not exist")
    ours = [is_brrm_output(p) for p in paths]
    if any(ours) and not all(ours):
        raise ConfigError("--predictions: give either brrm judgments.jsonl files or official output files, not both")
    if all(ours):
        results = [r for p in paths for r in read_items(p)]
        result = bench.score(results)
        scored = replace(score_both(bench, results, None, result), results=tuple(results))
    else:
        result = bench.replay(paths, root=args.data_dir)
        scored = Scored(None, result, None, 0, per_item=False)  # official files: no per-item parse states here
    print(f"brrm bench {bench.name}: replay of {', '.join(map(str, paths))}")
    items = [r.item for r in scored.results] if scored.per_item else None
    revision = {**run_revision(bench, items, root=args.data_dir, source=args.data),
                "predictions_sha256": {str(p): files_sha256(p) for p in paths}}
    scored = replace(scored, all=with_data(scored.all, items, revision),
                     parsed=with_data(scored.parsed, items, revision) if scored.parsed is not None else None)
    _finish(bench, [scored], folder, None, revision)
    return scored


def _run(args: argparse.Namespace, bench: Benchmark, judge: RewardJudge, items: list[BenchItem],
         subsets: tuple[str, ...], protocol: Protocol, folder: Path | None, revision: dict[str, Any]) -> Scored:
    from brrm.bench.core import item_keys
    from brrm.bench.data import with_data
    from brrm.bench.protocol import score_both
    from brrm.bench.report import run_settings, write_items
    from brrm.types.retry import kept_note

    term = sys.stdout
    orders = protocol.orders
    common.header(term, f"bench {bench.name}", judge, len(items), f"{bench.title} ({', '.join(subsets)})")
    pairwise = judge.info.pairwise
    print(protocol.describe(judge.info.decoding if pairwise else None, pairwise=bool(pairwise)), file=term)
    settings = {**run_settings(bench, judge.info.to_dict(), subsets=subsets, orders=orders, seed=args.order_seed,
                               source=args.data, limit=args.limit), "protocol": protocol.name,
                "data_revision": revision}
    from brrm.bench.rewardbench2 import RewardBench2

    best_of_n = bench if isinstance(bench, RewardBench2) else None  # RewardBench 2's best-of-n subsets
    if best_of_n is not None:
        settings["strategy"] = best_of_n.strategy  # a resumed run keeps the strategy
    # a pairwise best-of-N group's judgments are keyed by content alone: its sampled retries cannot be re-seeded
    done, seed_ids, kept = _resumable(args, judge, folder, settings, reseeds=not (best_of_n and pairwise))
    keys = item_keys(items)
    todo = [it for it, key in zip(items, keys, strict=True) if key not in done]
    unit = "judgment" if pairwise else "reward"
    planned, how, run_bench = _plan(args, bench, judge, todo, orders, best_of_n)
    print(f"protocol: {how}; {planned} {unit}s to run"
          + (f"; resuming: {len(done)} items already judged" if done else "")
          + (f" ({len(seed_ids)} failed items judged again)" if seed_ids else ""), file=term)
    if kept:
        print(f"note: {kept_note(kept)}", file=term)
    handle = _start_folder(folder, settings, resume=bool(done)) if folder is not None else None
    try:
        with Progress(len(todo), desc=f"{bench.name} (items {'written' if handle else 'done'})", unit="item",
                      disable=args.no_progress, work_total=planned, work_unit=unit) as bar:
            def sink(part: list[Any]) -> None:
                if handle is not None:
                    write_items(handle, part)
                bar.done(len(part))

            results, cost = run_bench(judge, items, seed=args.order_seed, progress=bar.turns, sink=sink, done=done,
                                      seed_ids=seed_ids)
    finally:
        if handle is not None:
            handle.close()
    if folder is not None:
        _write_run_file(folder, {**settings, "cost": cost.to_dict()})
    scored = score_both(bench, results, protocol, with_data(replace(bench.score(results), cost=cost,
                                                                    judge=judge.info.to_dict()), items, revision))
    return replace(scored, results=tuple(results))


def _plan(args: argparse.Namespace, bench: Benchmark, judge: RewardJudge, todo: list[BenchItem], orders: str,
          best_of_n: RewardBench2 | None) -> tuple[int, str, Any]:
    """How the items still to judge run: (judgments or rewards planned, the protocol line's description, the runner
    to call) — RewardBench 2's best-of-n strategy for ``best_of_n``, else every item in the presentation
    ``orders``."""
    from brrm.bench.runner import planned_judgments
    from brrm.bench.runner import run as run_items

    if best_of_n is not None:
        from brrm.bench import bestofn

        how = (f"strategy {best_of_n.strategy} (completion order drawn from order seed {args.order_seed})"
               if judge.info.pairwise else "every completion scored")
        return (bestofn.planned(judge, todo, best_of_n.strategy), how,
                partial(bestofn.run, strategy=best_of_n.strategy))
    how = f"orders {orders}" + (f" (order seed {args.order_seed})" if orders == "random" else
                                f" (the official evaluation's draws: {bench.official_sequence})"
                                if orders == "sequence" else "")
    return planned_judgments(judge, todo, orders=orders, seed=args.order_seed), how, partial(run_items, orders=orders)


def _start_folder(folder: Path, settings: Mapping[str, object], *, resume: bool) -> TextIO:
    """Write ``run.json`` and open ``judgments.jsonl`` for the run's items: appended to when resuming (after a line
    cut by the interruption is dropped; the others stay as written), else written anew."""
    from brrm.bench.report import ITEMS_FILE, keep_complete_lines

    _write_run_file(folder, settings)
    keep_complete_lines(folder / ITEMS_FILE)
    return (folder / ITEMS_FILE).open("a" if resume else "w", encoding="utf-8")


def _write_run_file(folder: Path, settings: Mapping[str, object]) -> None:
    """``run.json``: the run's settings before it runs, with what it cost once it has (resumes compare the settings
    only)."""
    import json

    from brrm.bench.report import RUN_FILE

    (folder / RUN_FILE).write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")


def _resumable(args: argparse.Namespace, judge: RewardJudge, folder: Path | None, settings: Mapping[str, object], *,
               reseeds: bool) -> tuple[dict[str, ItemResult], dict[str, str], int]:
    """What a resumed run keeps of the folder's earlier results, by item key; the failed ones it judges again
    (transient failures always; parse failures and truncations under sampled decoding or ``--retry-failed``:
    :mod:`brrm.types.retry`) are dropped from ``judgments.jsonl`` first. Returns (kept results, key -> the id a
    retried item's streams are keyed by: a sampled retry's is :func:`brrm.seeds.retry_id`, how many parse failures
    or truncations were kept as they were). ``reseeds``: the runner keys streams by ``seed_ids`` (False for a
    pairwise best-of-N group, whose sampled parse failures are then kept like greedy ones)."""
    from brrm.bench.report import ITEMS_FILE, check_resume, drop_lines, failed_seeds, keep_complete_lines, retried
    from brrm.seeds import retry_id
    from brrm.types.retry import is_sampled, retry_statuses

    if folder is None:
        return {}, {}, 0
    done = check_resume(folder, settings)
    sampled = reseeds and is_sampled(judge.info)
    again, kept = retried(done, retry_statuses(sampled=sampled, retry_failed=bool(args.retry_failed)))
    path = folder / ITEMS_FILE
    seeds = failed_seeds(path) if again else {}
    seed_ids = {key: retry_id(done[key].item.id, seeds.get(key)) if sampled else done[key].item.id for key in again}
    if again:
        keep_complete_lines(path)
        drop_lines(path, again)
    return {k: r for k, r in done.items() if k not in again}, seed_ids, kept


def _finish(bench: Benchmark, scored: list[Scored], folder: Path | None, model: str | None,
            revision: dict[str, Any], calibration: str | None = None) -> None:
    from brrm.bench.report import cost_line, protocol_table_lines, published_figure, write_scored

    published = published_figure(bench, model)
    term: TextIO = sys.stdout
    print(f"{bench.title} — {scored[0].all.metric}", file=term)
    for line in protocol_table_lines(scored, published):
        print("  " + line, file=term)
    for run in scored:
        print(f"  {run.label}: {_headline(run)}", file=term)
    if published is not None:
        print(f"  published ({bench.published_key}, model card of {model}): {published}", file=term)
    many = len(scored) > 1
    for run in scored:
        prefix = f"{run.label} " if many else ""
        if cost_line(run.all):
            print(prefix + cost_line(run.all), file=term)
        for note in run.all.notes:
            print(f"{prefix}note: {note}", file=term)
    at = revision.get("commit") or "unknown revision"
    print(f"data: {revision.get('source')} — {revision.get('repository') or 'local copy'} @ {at}"
          + (f", files sha256 {revision['sha256']}" if revision.get("sha256") else "")
          + (f", items sha256 {revision['items_sha256']}" if revision.get("items_sha256") else "")
          + f" ({revision.get('from')})", file=term)
    _calibration(scored, folder, many, calibration)
    if folder is not None:
        write_scored(folder, scored, published, revision)
        print(f"wrote {folder}/result.json and result.md" + (" and judgments.jsonl" if scored[0].all.cost else "")
              + (f" (each protocol's in {' and '.join(r.label + '/' for r in scored)})" if many else ""), file=term)
    elif scored[0].all.cost is not None:
        print("(pass --output DIR to keep the per-item judgments)", file=term)


def _headline(run: Scored) -> str:
    """The headline row over both denominators, the protocol's own first."""
    from brrm.bench.report import fmt

    name = run.all.headline
    over_all, over_parsed = fmt(run.all.overall), fmt(run.parsed_score(name))
    if not run.per_item:
        return f"{name} {over_all} (official output files: scored as the official script does)"
    both = [f"{over_parsed} over parsed items ({run.n_parsed} of {run.all.row(name).n})",
            f"{over_all} over all items (failures scored by the benchmark's rule)"]
    if run.protocol is None or run.protocol.headline != "parsed":
        both.reverse()
    return f"{name} " + "; ".join(both)


def _calibration(scored: list[Scored], folder: Path | None, many: bool, calibration: str | None) -> None:
    """ECE, Brier and log loss of each run's P(A ≻ B) beside its accuracy; ``report.html`` with the reliability
    diagram in its folder (nothing when no labelled judgment measured a probability). With ``--calibration``, how
    many of the benchmark's pairs that calibration was fitted on (:func:`brrm.calibration.split.overlap`)."""
    from brrm.bench.calibration_report import measure_results, summary_line, write_report

    for run in scored:
        metrics = measure_results(list(run.results))
        if not metrics:
            continue
        prefix = f"{run.label} " if many else ""
        print(prefix + summary_line(metrics), file=sys.stdout)
        note = _overlap_sentence(run, calibration) if calibration else ""
        if note:
            print(f"{prefix}calibration: {note}", file=sys.stdout)
        if folder is not None:
            where = folder / run.label if many else folder
            write_report(where, run.all, metrics, note)
            run.calibration.update({label: {k: v for k, v in m.to_dict().items() if k != "bins"}
                                    for label, m in metrics})


def _overlap_sentence(run: Scored, calibration: str) -> str:
    from brrm.calibration.data import content_key
    from brrm.calibration.split import overlap
    from brrm.types.calibration import read_calibration

    keys = [content_key(r.item.conversation, r.item.responses[p.i], r.item.responses[p.j])
            for r in run.results for p in r.item.pairs]
    return overlap(read_calibration(calibration).details, keys).sentence()


def _description() -> str:
    from brrm.bench.registry import names

    return ("Run a judge on a benchmark with the benchmark's own protocol and official metric "
            f"({', '.join(names())}), or score stored outputs with --predictions.")


COMMAND = Command(
    "bench", arguments=_arguments, run=run, progress=True,
    help="run a reward-model benchmark (official protocol and metric), or replay outputs",
    description=_description)
