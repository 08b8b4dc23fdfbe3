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
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from brrm.cli import common
from brrm.types.protocols import RewardJudge


def add_parser(sub: Any) -> None:
    from brrm.bench.registry import names

    p = sub.add_parser("bench", help="run a reward-model benchmark (official protocol and metric), or replay outputs",
                       description="Run a judge on a benchmark with the benchmark's own protocol and official metric "
                                   f"({', '.join(names())}), or score stored outputs with --predictions.")
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
    p.add_argument("--data-dir", default=None, help="folder holding the benchmark folders (default: $BRRM_DATA_DIR, "
                                                    "else ../shared/data next to the checkout)")
    p.add_argument("--data", default=None, help="hub id or local copy of hub-only data (rewardbench: default "
                                                 "allenai/reward-bench; mt-bench --subset human: "
                                                 "lmsys/mt_bench_human_judgments)")
    p.add_argument("--orders", choices=("official", "both"), default="official",
                   help="presentation orders: the benchmark's own (default), or both orders combined per pair "
                        "(disagreement is a tie) where its metric scores one verdict per pair")
    p.add_argument("--order-seed", type=int, default=0, help="seed of the benchmark's random presentation orders")
    p.add_argument("--weighting", choices=("official", "unweighted"), default=None,
                   help="rewardbench: official section weights (default) or the BR-RM paper's unweighted sections")
    common.add_model_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every flag, then replay or run; print the table and write the outputs."""
    from brrm.bench.registry import get_benchmark
    from brrm.errors import ConfigError

    bench = get_benchmark(args.name, weighting=args.weighting)
    subsets = bench.resolve_subsets(args.subset)
    orders = bench.orders(args.orders)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    folder = _output_folder(args.output)
    if args.predictions:
        return _replay(args, bench, folder)
    if getattr(args, "swap", None):
        raise ConfigError("--swap does not apply to brrm bench: the benchmark's protocol decides the presentation "
                          "orders (use --orders both where the benchmark allows it)")
    common.load_options(args)  # flag combinations are checked before any data or model loads
    items = bench.load(subsets, root=args.data_dir, limit=args.limit, source=args.data)
    if not items:
        raise ConfigError(f"no {bench.title} items for --subset {', '.join(subsets)}")
    subsets = tuple(s for s in subsets if any(it.subset == s for it in items))
    judge = common.load_judge(args, kind="brrm")
    try:
        result = _run(args, bench, judge, items, subsets, orders, folder)
    finally:
        judge.close()
    _finish(bench, result, folder, judge.info.model)
    return 0


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


def _replay(args: argparse.Namespace, bench: Any, folder: Path | None) -> int:
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
        result = bench.score([r for p in paths for r in read_items(p)])
    else:
        result = bench.replay(paths, root=args.data_dir)
    print(f"brrm bench {bench.name}: replay of {', '.join(map(str, paths))}")
    _finish(bench, result, folder, None)
    return 0


def _run(args: argparse.Namespace, bench: Any, judge: RewardJudge, items: list[Any], subsets: tuple[str, ...],
         orders: str, folder: Path | None) -> Any:
    from brrm.bench.report import ITEMS_FILE, RUN_FILE, check_resume, keep_complete_lines, run_settings, write_items
    from brrm.bench.runner import planned_judgments
    from brrm.bench.runner import run as run_bench

    term = sys.stdout
    common.header(term, f"bench {bench.name}", judge, len(items), f"{bench.title} ({', '.join(subsets)})")
    settings = run_settings(bench, judge.info.to_dict(), subsets=subsets, orders=orders, seed=args.order_seed,
                            source=args.data, limit=args.limit)
    done = check_resume(folder, settings) if folder is not None else {}
    planned = planned_judgments(judge, [it for it in items if it.id not in done], orders=orders, seed=args.order_seed)
    unit = "judgment" if judge.info.pairwise else "reward"
    print(f"protocol: orders {orders}" + (f" (order seed {args.order_seed})" if orders == "random" else "")
          + f"; {planned} {unit}s to run" + (f"; resuming: {len(done)} items already judged" if done else ""),
          file=term)
    handle = None
    if folder is not None:
        import json

        (folder / RUN_FILE).write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
        keep_complete_lines(folder / ITEMS_FILE)  # a line cut by the interruption goes; the others stay as written
        handle = (folder / ITEMS_FILE).open("a" if done else "w", encoding="utf-8")
    try:
        with common.progress_bar(planned, desc=bench.name, unit=unit, disable=args.no_progress) as bar:
            results, cost = run_bench(judge, items, orders=orders, seed=args.order_seed, progress=bar.update,
                                      sink=(lambda part: write_items(handle, part)) if handle else None, done=done)
    finally:
        if handle is not None:
            handle.close()
    return replace(bench.score(results), cost=cost, judge=judge.info.to_dict())


def _finish(bench: Any, result: Any, folder: Path | None, model: str | None) -> None:
    from brrm.bench.report import cost_line, published_figure, table_lines, write_result

    published = published_figure(bench, model)
    term: TextIO = sys.stdout
    print(f"{bench.title} — {result.metric}", file=term)
    for line in table_lines(result, published):
        print("  " + line, file=term)
    if published is not None:
        print(f"  published ({bench.published_key}, model card of {model}): {published}", file=term)
    if cost_line(result):
        print(cost_line(result), file=term)
    for note in result.notes:
        print(f"note: {note}", file=term)
    if folder is not None:
        write_result(folder, result, published)
        print(f"wrote {folder}/result.json and result.md" + (" and judgments.jsonl" if result.cost else ""),
              file=term)
    elif result.cost is not None:
        print("(pass --output DIR to keep the per-item judgments)", file=term)
