"""``brrm audit``: a resumable offline audit of a response dataset, with an HTML report.

``brrm audit INPUT --output DIR`` judges every record of INPUT (pairs, single responses or groups) into the
SQLite store ``DIR/audit.sqlite`` batch by batch, then writes ``DIR/report.html``, ``DIR/summary.json``,
``DIR/results.jsonl`` and ``DIR/results.parquet``. Rerunning the same command judges only what is missing
(nothing, once finished); ``--ray [ADDRESS]`` judges on a Ray actor pool; ``brrm audit --status DIR`` shows a
run's progress from another terminal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.cli import common
from brrm.cli.command import Command
from brrm.cli.flags import LoadKeywords, quiet_libraries
from brrm.cli.ray_flags import add_ray_args, ray_options

if TYPE_CHECKING:
    from brrm.audit.plan import AuditItem
    from brrm.audit.runner import AuditOptions, AuditOutcome
    from brrm.records import RecordError
    from brrm.records.shapes import Record
    from brrm.types import JudgeSpec
from brrm.errors import ConfigError
from brrm.types.protocols import kind_trait


def _arguments(p: argparse.ArgumentParser) -> None:
    from brrm.records import FORMATS
    from brrm.types.strategies import STRATEGIES

    p.add_argument("input", nargs="?", metavar="INPUT",
                   help="records file (.jsonl, .json, .parquet, .csv, .tsv), or a Hugging Face dataset folder or "
                        "hub id")
    p.add_argument("--output", "-o", metavar="DIR", help="audit folder (created if missing)")
    p.add_argument("--status", metavar="DIR", dest="status_dir",
                   help="show the progress of the audit in DIR (safe while it runs) and exit")
    p.add_argument("--shape", choices=("auto", "pairs", "single", "groups"), default="auto",
                   help="record shape (default: from the first record: response_a/response_b, response, responses)")
    p.add_argument("--input-format", choices=FORMATS, default=None,
                   help="default: from the file suffix; hf for a dataset folder or hub id")
    p.add_argument("--split", default=None, help="split of a Hugging Face dataset (default: its only split)")
    p.add_argument("--limit", type=int, default=None, help="audit only the first N records")
    p.add_argument("--field", action="append", default=None, metavar="FIELD=COLUMN",
                   help="remap an input column, e.g. --field prompt=instruction (as in brrm judge)")
    p.add_argument("--slice-by", action="append", default=[], metavar="COLUMN",
                   help="also report figures per value of this input column (repeatable), e.g. source model")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto", help="groups: ranking strategy (as brrm rank)")
    p.add_argument("--low-margin", type=float, default=0.1,
                   help="flag pairwise judgments with |P(A>B) - 0.5| below this (default 0.1)")
    p.add_argument("--max-flagged", type=int, default=200, help="flagged items shown in the report (default 200)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="items per judge call and per store write (default: the backend's own; 64 on Ray)")
    p.add_argument("--summary-every", type=float, default=60.0, metavar="SECONDS",
                   help="print a summary line when work finishes, at most this often (default 60)")
    p.add_argument("--probes", default=None, metavar="LIST",
                   help="pairs: also run robustness probes (as brrm probe), e.g. length,injection; writes "
                        "DIR/probes.json and a report section (rerun each time, not resumed)")
    add_ray_args(p, writer="the store")
    common.add_retry_failed_arg(p)
    common.add_model_args(p)


def run(args: argparse.Namespace) -> int:
    """Run or resume an audit (or show ``--status``); returns the exit code."""
    if args.status_dir:
        from brrm.audit.status import status_text

        print(status_text(args.status_dir))
        return 0
    if not args.input:
        raise ConfigError("brrm audit needs INPUT (a records file) and --output DIR, or --status DIR")
    if not args.output:
        raise ConfigError("--output DIR is required: the audit folder (store, report, summary, exports)")
    if (out := Path(args.output)).exists() and not out.is_dir():
        raise ConfigError(f"--output {str(out)!r} is a file; give a folder")
    model, opts = common.load_options(args)  # flag combinations are checked before anything is read or loaded
    records, shape = _read(args)
    kind = _resolve_kind(model, opts["kind"], shape)
    opts["kind"] = kind
    items, options = _plan(args, records, shape, kind, opts)
    probes = _probe_names(args, shape)
    ray = ray_options(args)
    from brrm.audit import JudgeSpec, run_audit
    from brrm.records import FieldMap

    quiet_libraries()
    print(f"brrm audit: {len(records)} records from {args.input} ({shape}); model "
          f"{model or 'the embedded demo (SmolLM2-135M-Instruct; pass --model for a real judge)'}; kind {kind}; "
          f"backend {opts['backend']}" + (f"; on Ray ({args.ray})" if ray else ""), file=sys.stderr)
    column = (FieldMap.from_overrides(args.field) if args.field else FieldMap()).principle
    common.note_ignored_principles(records, column, kind_trait(kind, "takes_principle"), f"kind {kind}", sys.stderr)
    common.report_duplicate_ids(records, sys.stderr)
    spec = JudgeSpec.from_load(model, **opts)
    if probes:
        _run_probes(records, spec, probes, Path(args.output))
    outcome = run_audit(items, args.output, options, spec=spec, ray=ray, source=args.input,
                        argv=sys.argv[1:], provenance=_provenance(args.input), term=sys.stderr)
    _print_outcome(outcome)
    return 0


def _read(args: argparse.Namespace) -> tuple[list[Record | RecordError], str]:
    """The records and their shape (``--shape`` or detected from the first valid record)."""
    from brrm.records import FieldMap, GroupRecord, PairRecord, RecordError, read_records

    fields = FieldMap.from_overrides(args.field) if args.field else None
    records = read_records(args.input, args.shape, fields=fields, limit=args.limit, format=args.input_format,
                           split=args.split)
    common.require_records(records, args.input)
    if args.shape != "auto":
        return records, args.shape
    first = next(r for r in records if not isinstance(r, RecordError))
    return records, "pairs" if isinstance(first, PairRecord) else "groups" if isinstance(first, GroupRecord) else \
        "single"


def _resolve_kind(model: str | None, kind: str, shape: str) -> str:
    """The judge kind before anything loads (``auto``: from the model's config, as ``brrm.load`` does).

    Raises:
        ConfigError: when the kind cannot audit this shape (BR-RM cannot score single responses).
    """
    if kind == "auto":
        if model is None:
            kind = "principle" if shape == "single" else "brrm"
        else:
            from brrm.recipes import detect_kind, looks_like_hub_id, model_config

            if not looks_like_hub_id(model) and not Path(model).expanduser().is_dir():
                raise ConfigError(f"--model {model!r} is neither a folder nor a hub id")
            kind = detect_kind(model, model_config(model))[0]
    if shape == "single" and kind_trait(kind, "pairwise"):
        raise ConfigError("single-response records need --kind bt or --kind principle (a BR-RM judge compares "
                          "pairs: give records with response_a/response_b, or responses lists)")
    return kind


def _plan(args: argparse.Namespace, records: list[Record | RecordError], shape: str, kind: str,
          opts: LoadKeywords) -> tuple[list[AuditItem], AuditOptions]:
    from brrm.audit import AuditOptions, plan_items
    from brrm.audit.judging import resolve_strategy
    from brrm.records import ScalarRecord

    needs_principle = bool(kind_trait(kind, "takes_principle"))  # a principle model has no default principle
    if needs_principle and shape != "single" and not args.principle:
        raise ConfigError(f"--kind principle judging {shape} needs --principle 'The response is …'")
    if needs_principle and shape == "single" and not args.principle and not any(
            isinstance(r, ScalarRecord) and r.principle for r in records):
        raise ConfigError("--kind principle needs --principle 'The response is …', or records with their own "
                          "principles")
    if args.strategy != "auto" and shape != "groups":
        raise ConfigError(f"--strategy applies to group records (responses lists), not {shape}")
    ray_options(args)  # --actors without --ray is refused before anything is read
    strategy = resolve_strategy(args.strategy, kind=kind, shape=shape)
    principles = list(args.principle or []) if shape == "single" else []
    if shape == "single":
        opts.pop("principle", None)  # each item carries its principle (the row's, or one item per --principle)
    items = plan_items(records, shape, slice_by=args.slice_by, principles=principles,
                       principle_kind=kind == "principle", strategy=strategy)
    options = AuditOptions(shape=shape, strategy=strategy, slice_by=tuple(args.slice_by), low_margin=args.low_margin,
                           max_flagged=args.max_flagged, chunk_size=args.chunk_size,
                           summary_every_s=args.summary_every, progress=not args.no_progress,
                           calibration=vars(args).get("calibration"), retry_failed=args.retry_failed)
    return items, options


def _probe_names(args: argparse.Namespace, shape: str) -> tuple[str, ...]:
    """The ``--probes`` names, checked before anything loads (pairs only)."""
    if args.probes is None:
        return ()
    from brrm.probes import parse_probes

    if shape != "pairs":
        raise ConfigError(f"--probes applies to pair records (response_a/response_b), not {shape}")
    return parse_probes(args.probes)


def _run_probes(records: list[Record | RecordError], spec: JudgeSpec, probes: tuple[str, ...], out: Path) -> None:
    """Probe the judge on the valid pairs (cost stated first); the report is written to ``out/probes.json``."""
    import json

    from brrm.audit.report import PROBES_FILE
    from brrm.cli.probe import print_report
    from brrm.probes import probe_cost, run_probes
    from brrm.records import PairRecord, seed_ids

    good = [r for r in records if isinstance(r, PairRecord)]
    judge = spec.load()
    try:
        print(f"probes: {', '.join(probes)}; cost {probe_cost(judge, len(good), probes)} judgments", file=sys.stderr)
        report = run_probes(judge, [r.conversation for r in good], [r.response_a for r in good],
                            [r.response_b for r in good], probes=probes, ids=seed_ids(good),
                            display_ids=[r.id for r in good],
                            seed=judge.info.sampling.seed if judge.info.sampling else 0)
    finally:
        judge.close()
    print_report(sys.stderr, report)
    out.mkdir(parents=True, exist_ok=True)
    (out / PROBES_FILE).write_text(json.dumps(report.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")


def _provenance(source: str) -> dict[str, str | int]:
    """The input file's path, size and sha256, and the versions and host this ran on."""
    import brrm

    path = Path(source).expanduser()
    out: dict[str, str | int] = {"input": str(path.resolve()), "brrm": brrm.__version__,
                                 "python": platform.python_version(), "platform": platform.platform(),
                                 "host": socket.gethostname()}
    if path.is_file():
        with path.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256")
        out.update(input_sha256=digest.hexdigest(), input_bytes=path.stat().st_size)
    return out


def _print_outcome(outcome: AuditOutcome) -> None:
    files = outcome.files
    print(f"judged {outcome.judged} items this run ({outcome.pending_at_start} were pending of {outcome.total} rows) "
          f"in {outcome.seconds:.1f} s", file=sys.stderr)
    for name in ("report", "summary", "jsonl", "parquet"):
        if name in files:
            print(f"{name}: {files[name]}")
    if "summary" in files:
        summary = json.loads(Path(files["summary"]).read_text(encoding="utf-8"))
        draw = (summary.get("run") or {}).get("sampled") or {}
        if draw.get("sampled"):
            print(f"sampled verdicts (temperature {draw['temperature']:g}): each is one draw and may go against its "
                  "own P(A>B)", file=sys.stderr)
        seen = summary.get("calibration_overlap")
        if seen:
            print(f"calibration: {seen['sentence']}", file=sys.stderr)


COMMAND = Command(
    "audit", arguments=_arguments, run=run, progress=True,
    help="resumable dataset audit with an HTML report (pairs, single responses, groups)",
    description="Judge every record of a dataset into a crash-safe store in --output, then write "
                "an HTML report, a JSON summary and JSONL/Parquet exports. Rerun the same command "
                "to resume; only missing items are judged.")
