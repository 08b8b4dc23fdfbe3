"""``brrm calibrate``: fit a temperature for P(A ≻ B) on labelled pairs, with a held-out split and a report.

``brrm calibrate --input labelled.jsonl --output calib.json [--report calib.html] [--heldout 0.3] [--split-seed 0]``.
The input is either judged pairs (``brrm judge --output`` lines, labelled) — fitted at once — or labelled records
to judge first with the model flags (``--model …``, as ``brrm judge``). Pairs go to the fit or the held-out split
by content group (:mod:`brrm.calibration.split`: the conversation and both responses, order-free, so duplicates
under other ids and both orders of a swapped pair stay together); a split with fewer than 5 pairs on a side is
refused. ``calib.json`` records the split (sizes in pairs and observations, digests of both sides' rows, the fit's
group keys), the search bounds of the temperature (a warning when the fit sits on one) and the log-loss clipping.
Prints and writes ECE, Brier score and log loss before and after on both splits; the HTML report embeds the
reliability diagram of the held-out split before and after. Apply the result with ``--calibration calib.json``
(any model command) or ``brrm.load(..., calibration="calib.json")``.

``--cascade SECOND`` (or ``--cascade-rule``, ``--target``) fits a judge cascade's margin or band instead
(:mod:`brrm.cli.calibrate_cascade`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.cli import calibrate_cascade, common

if TYPE_CHECKING:
    from brrm.calibration.data import Observations
    from brrm.calibration.fit import Metrics
    from brrm.calibration.split import Split
    from brrm.types.calibration import Calibration
    from brrm.types.jsonvalue import JSONDict
from brrm.cli.command import Command
from brrm.errors import ConfigError, install_extra


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", required=True, help="labelled pairs: brrm judge output, or records to judge")
    p.add_argument("--output", "-o", required=True, help="the calibration file to write (calib.json)")
    p.add_argument("--report", default=None, help="HTML report path (default: the output path with .html)")
    p.add_argument("--heldout", type=float, default=0.3, help="fraction of pairs held out, in (0, 1) (default 0.3)")
    p.add_argument("--split-seed", dest="split_seed", type=int, default=0,
                   help="seed of the fit / held-out split")
    p.add_argument("--limit", type=int, default=None, help="use only the first N records")
    common.add_model_args(p)
    common.add_overwrite_arg(p, resume=False)
    calibrate_cascade.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Check the flags, get judged rows, fit, write calib.json and the report, print the table (a cascade's
    threshold instead with ``--cascade``, ``--cascade-rule`` or ``--target``: :mod:`brrm.cli.calibrate_cascade`)."""
    import importlib.util

    if calibrate_cascade.wanted(args):
        return calibrate_cascade.run(args)

    from brrm.calibration.data import observations

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"brrm calibrate draws its reliability diagram with matplotlib: {install_extra('audit')}")
    if not 0.0 < args.heldout < 1.0:
        raise ConfigError(f"--heldout must lie in (0, 1), got {args.heldout}")
    out = Path(args.output).expanduser()
    report = Path(args.report).expanduser() if args.report else out.with_suffix(".html")
    for flag, path in (("--output", out), ("--report", report)):
        if not path.parent.is_dir():
            raise ConfigError(f"{flag} {str(path)!r}: folder {str(path.parent)!r} does not exist")
        common.refuse_overwrite(str(path), args, flag=flag)
    rows, model = _judged_rows(args)
    obs = observations(rows)
    kind = obs.kind
    parts, calibration, tables = _fit(obs, kind, model, args)
    from brrm.calibration.report import calibration_html, reliability_png
    from brrm.calibration.split import rows_digest
    from brrm.types.calibration import write_calibration

    write_calibration(out, calibration)
    png = reliability_png([("held-out, raw", tables[2][1]), ("held-out, calibrated", tables[3][1])])
    split_text = (f"by content group, seed {args.split_seed}, {args.heldout:.0%} held out: {len(parts.fit_groups)} "
                  f"pairs / {len(parts.fit)} observations fit, {len(parts.heldout_groups)} pairs / "
                  f"{len(parts.heldout)} observations held out")
    facts = {"model": model or "unknown", "kind": kind, _param(kind): f"{_value(calibration):.4f}",
             "fitted on": str(calibration.to_dict()["fit_on"]), "split": split_text,
             "fit rows digest": rows_digest(parts.fit), "held-out rows digest": rows_digest(parts.heldout),
             "log loss": "p clipped to [1e-12, 1 - 1e-12]", "hash": calibration.hash}
    report.write_text(calibration_html(f"brrm calibration: {model or args.input}", facts, tables, png),
                      encoding="utf-8")
    _print(calibration, kind, tables, obs.skipped, parts, args.split_seed, out, report)
    return 0


def _param(kind: str) -> str:
    return "temperature" if kind == "pairwise" else "scale"


def _value(calibration: Calibration) -> float:
    return float(calibration.temperature if calibration.kind == "pairwise" else calibration.scale)


def _judged_rows(args: argparse.Namespace) -> tuple[list[JSONDict], str]:
    """Judged rows of the input (judging records first when they are not judged yet) and the model's id."""
    path, judged = calibrate_cascade.input_file(args)
    if judged:
        rows = calibrate_cascade.read_rows(path, args.limit)
        return rows, calibrate_cascade.row_model(rows)
    return _judge_records(args)


def _judge_records(args: argparse.Namespace) -> tuple[list[JSONDict], str]:
    from brrm.calibration.data import content_key
    from brrm.calibration.split import sides
    from brrm.records import RecordError, read_records
    from brrm.types import Verdict

    if vars(args).get("calibration"):
        raise ConfigError("--calibration does not apply to brrm calibrate: it fits on the raw probabilities")
    common.load_options(args)
    records = [r for r in read_records(args.input, "pairs", limit=args.limit) if not isinstance(r, RecordError)]
    common.require_records(records, args.input)
    judge = common.load_judge(args, kind="brrm")  # its flags checked first (brrm.load validates them)
    labelled = [r for r in records if r.label not in (None, Verdict.NONE, Verdict.TIE)]
    try:  # refuse a split too small before any pair is judged
        sides([content_key(r.conversation, r.response_a, r.response_b) for r in labelled], args.split_seed,
              args.heldout)
    except ConfigError:
        judge.close()
        raise
    try:
        out = calibrate_cascade.judge_records(judge, records, args, "calibrate", "judging", labels=True)
    finally:
        judge.close()
    return [{**common.with_id(j, r.id).to_dict(), "line": r.line,
             "content_key": content_key(r.conversation, r.response_a, r.response_b)}
            for j, r in zip(out, records, strict=True)], judge.info.model


def _fit(obs: Observations, kind: str, model: str,
         args: argparse.Namespace) -> tuple[Split, Calibration, list[tuple[str, Metrics]]]:
    from brrm.calibration.fit import EPS, T_MAX, T_MIN, at_bound, fit_temperature, measure
    from brrm.calibration.split import split
    from brrm.numerics import sigmoid
    from brrm.types.calibration import Calibration

    parts = split(obs.items, args.split_seed, args.heldout)
    t = fit_temperature([o.z for o in parts.fit], [o.y for o in parts.fit])
    tables = []
    for name, part in (("fit", parts.fit), ("held-out", parts.heldout)):
        y = [o.y for o in part]
        tables.append((f"{name}, raw", measure([o.p for o in part], y)))
        tables.append((f"{name}, calibrated", measure([sigmoid(o.z / t) for o in part], y)))
    metrics = {label: {**{k: v for k, v in m.to_dict().items() if k != "bins"},
                       "bin_counts": [b.n for b in m.bins]} for label, m in tables}
    details = {"split": parts.to_dict(args.split_seed, args.heldout), "skipped": dict(obs.skipped),
               "metrics": metrics, "binning": "ECE: 10 equal-width bins of P(A>B); a value on an inner edge "
               "opens the bin above it, 1.0 is in the last bin (brrm.numerics.bin_index)",
               "log_loss_clip": f"p clipped to [{EPS:g}, 1 - {EPS:g}]",
               "search": {"bounds": [T_MIN, T_MAX], "bound_hit": at_bound(t)}, "source": str(args.input)}
    return parts, Calibration(kind, t, model, details), tables


def _print(calibration: Calibration, kind: str, tables: list[tuple[str, Metrics]], skipped: Mapping[str, int],
           parts: Split, seed: int, out: Path, report: Path) -> None:
    from brrm.calibration.fit import EPS, T_MAX, T_MIN, at_bound

    print(f"brrm calibrate: {kind} judge; {_param(kind)} {_value(calibration):.4f} fitted on "
          f"{len(parts.fit_groups)} pairs ({len(parts.fit)} observations; z = {calibration.to_dict()['fit_on']})")
    if at_bound(calibration.temperature):
        print(f"warning: the temperature sits on the search bound ({calibration.temperature:g}; the search spans "
              f"[{T_MIN:g}, {T_MAX:g}]): the fit pairs ask for sharper or flatter probabilities than it allows — "
              "too few pairs, or all judged one way; do not trust this calibration", file=sys.stderr)
    print(f"split by content group (seed {seed}): {len(parts.fit_groups)} pairs / "
          f"{len(parts.fit)} observations fit, {len(parts.heldout_groups)} pairs / {len(parts.heldout)} "
          "observations held out")
    if any(skipped.values()):
        print("left out: " + ", ".join(f"{k} {v}" for k, v in skipped.items() if v))
    print(f"  {'split':<22} {'n':>5} {'ECE':>8} {'Brier':>8} {'log loss':>9} {'accuracy':>9}")
    for label, m in tables:
        print(f"  {label:<22} {m.n:>5} {m.ece:>8.4f} {m.brier:>8.4f} {m.log_loss:>9.4f} {m.accuracy:>9.4f}")
    print(f"  (n: observations; log loss with p clipped to [{EPS:g}, 1 - {EPS:g}])")
    print(f"wrote {out} (hash {calibration.hash}) and {report}")


COMMAND = Command(
    "calibrate", arguments=_arguments, run=run, progress=True,
    help="fit a temperature for P(A>B) on labelled pairs (ECE, Brier, log loss), or a cascade's threshold",
    description="Fit a temperature (pairwise judges) or a scale (scalar models) for P(A>B) on "
                "labelled pairs: judged pairs (brrm judge output) or records judged first with "
                "--model. Reports ECE, Brier score and log loss before/after on a held-out split. With "
                "--cascade (or --cascade-rule, --target): fit a judge cascade's margin or band so that it "
                "agrees with its second judge alone on --target of held-out content groups.")
