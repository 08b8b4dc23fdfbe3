"""``brrm calibrate --cascade``: fit a judge cascade's margin ``m`` or band ``δ`` (:mod:`brrm.calibration.cascade`).

Four ways in, by what ``--input`` holds and what ``--cascade`` names:

* records and ``--model FIRST --cascade SECOND``: both judges judge every record alone; the second's verdicts are
  the reference (a second-judge-judged set);
* records and ``--model FIRST`` with ``--cascade-rule``: the first judge judges them; the labels are the reference;
* judged rows of the first judge (``brrm judge --output``) and ``--cascade SECOND.jsonl``, the second judge's
  judged rows of the same records (matched by ``id``): nothing is judged;
* judged rows of the first judge alone, with ``--cascade-rule``: the labels are the reference.

The rule is ``--cascade-rule`` (``auto``: ``margin`` for a Bradley–Terry first judge, ``band`` otherwise; judged rows
must name it). Prints the threshold, the agreement with the second judge with its Wilson interval and the escalation
rate on both splits and the second-judge judgments saved on the held-out split; writes the fit (threshold, both
sides' digests and group keys, the models) to ``--output``. Apply it with ``--cascade-margin``/``--cascade-band``
or ``brrm.load(first, cascade=second, **read_cascade_fit(path).keywords)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from brrm.cli import common
from brrm.errors import ConfigError
from brrm.progress import Progress

if TYPE_CHECKING:
    from brrm.calibration.cascade import CascadeFit
    from brrm.records.shapes import PairRecord
    from brrm.types import PairwiseJudgment, RewardJudge, Verdict
    from brrm.types.jsonvalue import JSONDict


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the cascade fit (``--cascade`` and ``--cascade-kind``/``--cascade-options`` are the model
    flags'); any of ``--cascade``, ``--cascade-rule`` or ``--target`` asks for it."""
    g = p.add_argument_group("cascade fit (brrm calibrate --cascade)")
    g.add_argument("--cascade-rule", dest="cascade_rule", choices=("auto", "margin", "band"), default=None,
                   help="the threshold to fit: margin (Bradley-Terry |r_A - r_B|) or band (|P(A>B) - 0.5|); "
                        "auto: margin for a bt first judge, band otherwise (default: auto)")
    g.add_argument("--target", type=float, default=None,
                   help="share of content groups on which the cascade must agree with the second judge alone, in "
                        "(0, 1] (default 0.99)")
    g.add_argument("--confidence", type=float, default=0.95,
                   help="level of the Wilson intervals, in [0, 1); 0 fits on the point estimate (default 0.95)")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the flags ask for a cascade fit rather than a temperature."""
    return any(vars(args).get(k) is not None for k in ("cascade", "cascade_rule", "target"))


def run(args: argparse.Namespace) -> int:
    """Check the flags, get first judgments and reference verdicts, fit, write the fit file, print the figures."""
    from brrm.calibration.cascade import fit_cascade, observe, write_cascade_fit

    target = 0.99 if args.target is None else args.target
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"--target must be an agreement in (0, 1], got {target}")
    if not 0.0 <= args.confidence < 1.0:
        raise ConfigError(f"--confidence must be in [0, 1), got {args.confidence}")
    if not 0.0 < args.heldout < 1.0:
        raise ConfigError(f"--heldout must lie in (0, 1), got {args.heldout}")
    for flag in ("cascade_margin", "cascade_band", "cascade_agree"):
        if vars(args).get(flag) is not None:
            raise ConfigError(f"--{flag.replace('_', '-')} sets a threshold; brrm calibrate --cascade fits one: "
                              "name the rule with --cascade-rule margin|band")
    if args.report:
        raise ConfigError("--report: a cascade fit writes no HTML report; its figures are printed and in --output")
    out = Path(args.output).expanduser()
    if not out.parent.is_dir():
        raise ConfigError(f"--output {str(out)!r}: folder {str(out.parent)!r} does not exist")
    common.refuse_overwrite(str(out), args, flag="--output")
    firsts, references, keys, rule, models = _inputs(args)
    obs, skipped = observe(firsts, references, keys, rule=rule)
    fit = fit_cascade(obs, rule=rule, target=target, heldout=args.heldout, seed=args.split_seed,
                      confidence=args.confidence)
    from dataclasses import replace

    fit = replace(fit, details={**fit.details, "skipped": {**skipped, "first_failed_escalate": sum(
        not j.ok for j in firsts)}, **models, "source": str(args.input)})
    write_cascade_fit(out, fit)
    _print(fit, out)
    return 0


def _inputs(args: argparse.Namespace) -> tuple[list[PairwiseJudgment], list[Verdict], list[str], str,
                                                dict[str, str]]:
    """(first judgments, reference verdicts, content groups, rule, model record) from judged rows or records."""
    path, judged = input_file(args)
    return _from_rows(args, path) if judged else _from_records(args)


def input_file(args: argparse.Namespace) -> tuple[Path, bool]:
    """``--input`` and whether it holds judged rows (its first line: :func:`brrm.calibration.data.is_judged`).

    Raises:
        ConfigError: when it does not exist.
    """
    from brrm.calibration.data import is_judged

    path = Path(args.input).expanduser()
    if not path.is_file():
        raise ConfigError(f"--input {args.input!r} does not exist")
    first_line = next((ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()), "")
    try:
        return path, is_judged(json.loads(first_line))
    except ValueError:
        return path, False


def read_rows(path: Path, limit: int | None) -> list[JSONDict]:
    """The JSON lines of a judged-rows file (the first ``limit`` when set)."""
    rows = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return rows[:limit] if limit else rows


def _from_rows(args: argparse.Namespace, path: Path) -> tuple[list[PairwiseJudgment], list[Verdict], list[str], str,
                                                              dict[str, str]]:
    """Judged rows of the first judge; the references from ``--cascade FILE`` (matched by id) or the labels."""
    from brrm.calibration.data import row_content_key
    from brrm.types import Verdict, parse_label
    from brrm.types.codec import judgment_from_dict

    if args.cascade_rule in (None, "auto"):
        raise ConfigError("judged rows do not say the first judge's kind: name the rule with --cascade-rule "
                          "margin (a Bradley-Terry first judge) or band (a probability)")
    rows = read_rows(path, args.limit)
    firsts = [judgment_from_dict(r) for r in rows]
    keys = [row_content_key(r, k) for k, r in enumerate(rows, start=1)]
    models = {"first_model": row_model(rows)}
    if args.cascade is None:
        refs = [parse_label(r.get("label") or "none", where=f"row {k} label") for k, r in enumerate(rows, start=1)]
        return firsts, refs, keys, args.cascade_rule, {**models, "reference": "labels"}
    second = Path(args.cascade).expanduser()
    if not second.is_file():
        raise ConfigError(f"--cascade {args.cascade!r}: with judged rows as --input, --cascade names the second "
                          "judge's judged rows of the same records (brrm judge --output), not a model")
    by_id = {str(r.get("id")): r for r in read_rows(second, None)}
    refs = []
    for r in rows:
        other = by_id.get(str(r.get("id")))
        if other is None:
            raise ConfigError(f"--cascade {args.cascade!r} has no judgment of record id {r.get('id')!r}")
        refs.append(Verdict(str(other["winner"])) if other.get("status") == "ok" else Verdict.NONE)
    return firsts, refs, keys, args.cascade_rule, {**models, "second_model": row_model(list(by_id.values())),
                                                   "reference": "second judge"}


def row_model(rows: list[JSONDict]) -> str:
    """The one model the rows' provenance names ("" for none, or several)."""
    provs = [r.get("provenance") for r in rows]
    models = {str(p.get("model", "")) for p in provs if isinstance(p, dict)} - {""}
    return models.pop() if len(models) == 1 else ""


def _from_records(args: argparse.Namespace) -> tuple[list[PairwiseJudgment], list[Verdict], list[str], str,
                                                     dict[str, str]]:
    """Records judged by the first judge (``--model``) and, with ``--cascade MODEL``, by the second alone."""
    from brrm.calibration.data import content_key
    from brrm.calibration.split import sides
    from brrm.records import read_records
    from brrm.records.shapes import PairRecord
    from brrm.types import Verdict

    records = [r for r in read_records(args.input, "pairs", limit=args.limit) if isinstance(r, PairRecord)]
    common.require_records(records, args.input)
    keys = [content_key(r.conversation, r.response_a, r.response_b) for r in records]
    sides(keys, args.split_seed, args.heldout)  # a split too small is refused before any pair is judged
    first, second = _judges(args)
    try:
        rule = args.cascade_rule or "auto"
        if rule == "auto":  # a probability (pairwise judge, principle model): a band; a Bradley-Terry reward: a margin
            rule = "band" if first.info.pairwise or first.info.takes_principle else "margin"
        firsts = judge_records(first, records, args, "calibrate --cascade (first judge)", "first judge")
        if second is None:
            refs = [r.label for r in records]
            return firsts, refs, keys, rule, {"first_model": first.info.model, "reference": "labels"}
        refs = [j.winner if j.ok else Verdict.NONE for j in judge_records(
            second, records, args, "calibrate --cascade (second judge)", "second judge")]
        return firsts, refs, keys, rule, {"first_model": first.info.model, "second_model": second.info.model,
                                          "reference": "second judge"}
    finally:
        first.close()
        if second is not None:
            second.close()


def _judges(args: argparse.Namespace) -> tuple[RewardJudge, RewardJudge | None]:
    """The first judge (the model flags, without the cascade's) and the second (``--cascade``), loaded."""
    import brrm
    from brrm.cli.flags import CASCADE_KEYWORDS
    from brrm.load_cascade import CascadePlan

    if vars(args).get("calibration"):
        raise ConfigError("--calibration does not apply to brrm calibrate --cascade: it fits on the judgments as "
                          "the cascade will read them; calibrate the first judge first and judge with it")
    from brrm.cli.flags import quiet_libraries

    quiet_libraries()
    model, opts = common.load_options(args)
    plain = {k: v for k, v in opts.items() if k not in CASCADE_KEYWORDS}
    plan: CascadePlan | None = None
    if args.cascade is not None:
        plan = CascadePlan.of(args.cascade, plain.get("backend", "transformers"), cascade_kind=args.cascade_kind or
                              "auto", cascade_band=0.0, cascade_options=args.cascade_options)
    first = brrm.load(model, **plain)  # type: ignore[arg-type]
    try:
        second = (brrm.load(str(plan.second), kind=plan.kind, **plan.options)  # type: ignore[arg-type]
                  if plan is not None else None)
    except BaseException:
        first.close()
        raise
    return first, second


def judge_records(judge: RewardJudge, records: list[PairRecord], args: argparse.Namespace, command: str, what: str,
                  *, labels: bool = False) -> list[PairwiseJudgment]:
    """``judge``'s judgments of ``records`` (with their labels when ``labels``), after ``command``'s header line,
    under a progress bar named ``what``."""
    from brrm.records import seed_ids

    common.header(sys.stderr, command, judge, len(records), args.input)
    with Progress(len(records), desc=f"{what} (pairs done)", unit="pair", disable=args.no_progress) as bar:
        out = judge.judge_pairs([r.conversation for r in records], [r.response_a for r in records],
                                [r.response_b for r in records], ids=seed_ids(records),
                                labels=[r.label for r in records] if labels else None, progress=bar.turns)
        bar.done(len(out))
    return out


def _print(fit: CascadeFit, out: Path) -> None:
    sign = "m" if fit.rule.value == "margin" else "delta"
    level = f"Wilson {fit.confidence:.0%}" if fit.confidence else "point estimates"
    print(f"brrm calibrate --cascade: {fit.rule.value} {sign} = {fit.threshold:.6g} (target: agreement with the second "
          f"judge alone on {fit.target:.2%} of content groups; {level}; reference: {fit.details.get('reference')})")
    print(f"  {'split':<9} {'groups':>7} {'agreement':>10} {'interval':>19} {'items':>7} {'escalated':>10} "
          f"{'rate':>7}")
    for name, a in (("fit", fit.fit), ("held-out", fit.heldout)):
        print(f"  {name:<9} {a.groups:>7} {a.agreement:>10.4f} {f'[{a.low:.4f}, {a.high:.4f}]':>19} {a.items:>7} "
              f"{a.escalated:>10} {a.escalation_rate:>7.2%}")
    h = fit.heldout
    print(f"held-out: {h.items - h.escalated} of {h.items} second-judge judgments saved "
          f"({1 - h.escalation_rate:.2%}); the first judge runs on every item")
    if not fit.meets_target:
        print(f"warning: the held-out agreement {h.agreement:.4f} is below the target {fit.target:.4f}: more "
              "labelled pairs, a higher --confidence or a lower --target", file=sys.stderr)
    print(f"wrote {out} (hash {fit.hash}); apply with --cascade-{fit.rule.value} {fit.threshold:.6g} or "
          f"brrm.load(..., cascade=SECOND, **read_cascade_fit({str(out)!r}).keywords)")
