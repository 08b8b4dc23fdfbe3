"""``brrm calibrate --cascade`` (issue 48 item 2): a cascade's margin or band fitted on content groups so that the
cascade agrees with its second judge alone on a target share of them; the figures it reports are the ones the
cascade then shows. Scripted judges of known behaviour (:mod:`brrm.testing.scripted`), in process."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from brrm.calibration.cascade import (
    CascadeObservation,
    fit_cascade,
    measure,
    observe,
    read_cascade_fit,
    wilson,
)
from brrm.calibration.data import content_key
from brrm.cli import main
from brrm.compose import PairwiseRewardJudge
from brrm.compose.cascade import CascadeJudge, Confidence
from brrm.errors import ConfigError
from brrm.testing.scripted import ScriptedOrdered, scripted_pair
from brrm.types import PairwiseJudgment, Status, Verdict
from brrm.types.cascade import CascadeRule


def test_wilson_interval_matches_the_published_formula():
    # scipy.stats.binomtest(k, n).proportion_ci(0.95, method="wilson") gives these (scipy 1.16)
    assert wilson(81, 100, 0.95) == pytest.approx((0.7222115462093562, 0.8748524849023126), abs=1e-12)
    assert wilson(0, 10, 0.95) == pytest.approx((0.0, 0.27753279986288926), abs=1e-12)
    assert wilson(99, 100, 0.95) == pytest.approx((0.9455138038212946, 0.9982325679358593), abs=1e-12)
    assert wilson(7, 10, 0.0) == (0.7, 0.7) and all(math.isnan(x) for x in wilson(0, 0, 0.5))
    with pytest.raises(ConfigError, match="confidence must be in"):
        wilson(1, 2, 1.0)


def test_observations_read_the_rule_as_the_cascade_does():
    ok = PairwiseJudgment(Verdict.A, Status.OK, p_a=0.8)
    failed = PairwiseJudgment(Verdict.NONE, Status.PARSE_FAILURE, "no verdict")
    free = PairwiseJudgment(Verdict.TIE, Status.OK, p_a=0.5, attempts=0)  # identical responses: no model call
    obs, skipped = observe([ok, failed, free, ok], [Verdict.B, Verdict.A, Verdict.TIE, Verdict.A], ["k1", "k2", "k3",
                                                                                                 "k4"], rule="band")
    assert skipped == {"no_reference": 1} and [o.key for o in obs] == ["k1", "k2", "k4"]
    assert obs[0] == CascadeObservation("k1", pytest.approx(0.3), False) and obs[2].agree
    assert math.isnan(obs[1].measure) and not obs[1].agree  # a failure escalates at every threshold
    margin, _ = observe([ok], [Verdict.A], ["k"], rule=CascadeRule.MARGIN)
    assert margin[0].measure == pytest.approx(math.log(4))  # |logit 0.8|
    assert observe([free], [Verdict.A], ["k"], rule="band")[0][0].measure == math.inf
    with pytest.raises(ConfigError, match="cascade_agree has no threshold to fit"):
        observe([ok], [Verdict.A], ["k"], rule="agree")


def _groups(n: int) -> list[CascadeObservation]:
    """Group g: measure g / (2n) (so in [0, 0.5)); every fifth group below 0.2 disagrees."""
    return [CascadeObservation(f"g{g}", g / (2 * n), not (g % 5 == 0 and g / (2 * n) < 0.2)) for g in range(n)]


def test_the_fit_is_the_lowest_threshold_whose_fit_groups_reach_the_target():
    obs = _groups(60)
    fit = fit_cascade(obs, rule="band", target=1.0, confidence=0.0)
    held = set(json.loads(json.dumps(fit.details["split"]))["heldout_group_keys"])
    fit_side = [o for o in obs if o.key[:16] not in held]
    worst = max(o.measure for o in fit_side if not o.agree)
    assert fit.threshold == worst  # the largest disagreeing measure: every group above it agrees
    assert fit.fit.agreement == 1.0 and fit.fit.escalated == sum(o.measure <= worst for o in fit_side)
    assert fit.fit == measure(fit_side, worst, confidence=0.0)
    assert fit.keywords == {"cascade_band": worst} and len(fit.hash) == 16
    loose = fit_cascade(obs, rule="band", target=0.8, confidence=0.0)
    assert loose.threshold < fit.threshold and loose.fit.agreement >= 0.8
    sure = fit_cascade(obs, rule="band", target=1.0, confidence=0.95)  # any first decision leaves doubt: none
    assert (sure.fit.escalation_rate, sure.fit.agreement, sure.heldout.escalation_rate) == (1.0, 1.0, 1.0)
    with pytest.raises(ConfigError, match=r"target must be an agreement in \(0, 1\]"):
        fit_cascade(obs, rule="band", target=1.5)
    with pytest.raises(ConfigError, match="each side needs at least 5"):
        fit_cascade(obs[:6], rule="band")


def _judged(tmp_path: Path, pair: Any, which: str, label: bool = False) -> Path:
    table = pair.first if which == "first" else pair.second
    judge = PairwiseRewardJudge(ScriptedOrdered(table, which))
    out = judge.judge_pairs(list(pair.prompts), list(pair.a), list(pair.b), ids=[f"p{i}" for i in range(len(pair.a))])
    path = tmp_path / f"{which}.jsonl"
    rows = [{**j.to_dict(), "content_key": content_key(q, a, b),
             **({"label": pair.second[(a, b)][0].value} if label else {})}
            for j, q, a, b in zip(out, pair.prompts, pair.a, pair.b, strict=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_fits_on_both_judges_rows_and_the_cascade_shows_the_figures_it_printed(tmp_path, capsys):
    pair = scripted_pair(300, seed=3)
    first, second = _judged(tmp_path, pair, "first"), _judged(tmp_path, pair, "second")
    out = tmp_path / "cascade.json"
    argv = ["calibrate", "--input", str(first), "--cascade", str(second), "--cascade-rule", "band", "--target",
            "0.95", "--output", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    fit = read_cascade_fit(out)
    assert fit.rule is CascadeRule.BAND and fit.details["reference"] == "second judge"
    assert len(fit.details["split"]["fit_digest"]) == len(fit.details["split"]["heldout_digest"]) == 64
    assert f"band delta = {fit.threshold:.6g}" in printed and "second-judge judgments saved" in printed
    assert f"--cascade-band {fit.threshold:.6g}" in printed and fit.hash in printed
    # the cascade at the fitted band, on the held-out groups: the escalation and agreement the fit reported
    held = set(fit.details["split"]["heldout_group_keys"])
    idx = [i for i, (q, a, b) in enumerate(zip(pair.prompts, pair.a, pair.b, strict=True))
           if content_key(q, a, b)[:16] in held]
    strong = ScriptedOrdered(pair.second, "second")
    cascade = CascadeJudge(PairwiseRewardJudge(ScriptedOrdered(pair.first, "first")), PairwiseRewardJudge(strong),
                           Confidence.of(**{k.removeprefix("cascade_"): v for k, v in fit.keywords.items()}))
    got = cascade.judge_pairs([pair.prompts[i] for i in idx], [pair.a[i] for i in idx], [pair.b[i] for i in idx])
    agree = sum(j.winner is pair.second[(pair.a[i], pair.b[i])][0] for j, i in zip(got, idx, strict=True))
    assert strong.calls == fit.heldout.escalated and len(idx) == fit.heldout.items
    assert agree == fit.heldout.agreeing and fit.heldout.agreement >= 0.95
    assert main(argv) == 2 and "--overwrite" in capsys.readouterr().err  # an existing fit is not replaced


def test_cli_fits_on_labels_when_no_second_judge_ran(tmp_path, capsys):
    pair = scripted_pair(120, seed=4)
    first = _judged(tmp_path, pair, "first", label=True)
    out = tmp_path / "fit.json"
    assert main(["calibrate", "--input", str(first), "--cascade-rule", "band", "--output", str(out)]) == 0
    fit = read_cascade_fit(out)
    assert fit.details["reference"] == "labels" and fit.target == 0.99
    assert "reference: labels" in capsys.readouterr().out
    again = fit_cascade(observe(*_first_and_labels(first), rule="band")[0], rule="band")
    assert again.threshold == fit.threshold and again.heldout == fit.heldout


def _first_and_labels(path: Path) -> tuple[list[PairwiseJudgment], list[Verdict], list[str]]:
    from brrm.types.codec import judgment_from_dict

    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [judgment_from_dict(r) for r in rows], [Verdict(r["label"]) for r in rows], [r["content_key"] for r in rows]


def test_cli_refuses_what_it_cannot_fit(tmp_path, capsys):
    pair = scripted_pair(40)
    first = _judged(tmp_path, pair, "first", label=True)
    out = str(tmp_path / "f.json")
    cases = [(["--cascade-rule", "band", "--cascade-band", "0.1"], "--cascade-band sets a threshold"),
             (["--cascade-rule", "band", "--target", "0"], r"--target must be an agreement in (0, 1]"),
             (["--target", "0.9"], "name the rule with --cascade-rule margin"),
             (["--cascade", str(tmp_path / "nowhere"), "--cascade-rule", "band"], "the second judge's judged rows"),
             (["--cascade-rule", "band", "--report", str(tmp_path / "r.html")], "writes no HTML report")]
    for extra, message in cases:
        assert main(["calibrate", "--input", str(first), "--output", out, *extra]) == 2
        assert message in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "brrm-cascade-fit/1", "rule": "band", "threshold": 0.7}))
    with pytest.raises(ConfigError, match=r"cascade_band must be in \[0, 0.5\)"):
        read_cascade_fit(bad)


@pytest.fixture(scope="module")
def tiny_folder(tiny, tmp_path_factory) -> str:
    """The session's tiny Qwen3 (tests/conftest.py), saved once for the model flags."""
    from brrm.testing.models import save_tokenizer

    model, tok = tiny
    path = tmp_path_factory.mktemp("tiny") / "tiny"
    model.save_pretrained(path)
    save_tokenizer(tok, path)
    return str(path)


def test_cli_judges_records_with_both_models_and_two_identical_judges_never_escalate(tmp_path, tiny_folder, capsys):
    """The tiny Qwen3 read as a Bradley–Terry model twice: the second judge always agrees with the first, so the
    fitted margin (the rule picked for a bt first judge) is 0 on the point estimate and nothing is escalated."""
    rows = [{"id": f"r{i}", "prompt": f"question {i}?", "response_a": f"yes {i}", "response_b": f"no, {i * 7}",
             "label": "A"} for i in range(16)]
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "fit.json"
    same = {"kind": "bt", "recipe": "llama_nemotron"}
    argv = ["calibrate", "--input", str(records), "--output", str(out), "--model", tiny_folder, "--kind", "bt",
            "--recipe", "llama_nemotron", "--cascade", tiny_folder, "--cascade-options", json.dumps(same),
            "--target", "0.9", "--confidence", "0", "--heldout", "0.5", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    fit = read_cascade_fit(out)
    assert fit.rule is CascadeRule.MARGIN and fit.threshold == 0.0 and fit.details["first_model"] == tiny_folder
    assert fit.fit.escalated == fit.heldout.escalated == 0 and fit.heldout.agreement == 1.0
    assert fit.details["reference"] == "second judge" and fit.keywords == {"cascade_margin": 0.0}
    from brrm.load import check

    check(tiny_folder, kind="bt", recipe="llama_nemotron", cascade=tiny_folder, cascade_options=same,
          **fit.keywords)  # the recorded fit is brrm.load's own keyword
    # no second judge: the labels stand in for it (every pair labelled A; the first judge alone agrees where it
    # prefers A, and the fit escalates what it must)
    labelled = tmp_path / "labelled.json"
    assert main(["calibrate", "--input", str(records), "--output", str(labelled), "--model", tiny_folder, "--kind",
                 "bt", "--recipe", "llama_nemotron", "--cascade-rule", "margin", "--target", "0.9", "--confidence", "0",
                 "--heldout", "0.5", "--no-progress"]) == 0
    by_labels = read_cascade_fit(labelled)
    assert by_labels.details["reference"] == "labels" and "second_model" not in by_labels.details
    assert by_labels.fit.items + by_labels.heldout.items == 16 and by_labels.fit.agreement >= 0.9
