"""Calibration: a scripted judge with a known miscalibration (its verdict logits scaled by K) gets its temperature
back within 5%; ``brrm calibrate`` lowers held-out ECE and writes the report; ``brrm.load(calibration=)`` applies
it with raw and calibrated probabilities and the calibration's hash in provenance; scalar models get a scale.

The scripted backend stands in for a model only because a real one cannot be given a known miscalibration."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import brrm
from brrm.backends.base import Completion
from brrm.backends.fake import FakeBackend
from brrm.calibration import Calibration, fit_temperature, measure, read_calibration
from brrm.calibration.data import content_key
from brrm.cli import main
from brrm.errors import ConfigError
from brrm.numerics import sigmoid

K = 2.5
"""The scripted judge's overconfidence: its logit difference is K times the true log-odds."""

T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None\n[End of Quality Analysis for Response 1]\n\n"
      "[Quality Analysis for Response 2]\n- Critical Issues: None\n[End of Quality Analysis for Response 2]")
VERDICT = "[The Begin of Ranking Score]\n\\boxed{%d}\n[The End of Ranking Score]"
GRID = [-3 + 0.25 * g for g in range(25)]
"""True log-odds that response A is better; each cell has 20 pairs labelled in exactly that proportion."""


def true_logit(prompt: str, first: bool = True) -> float:
    """The cell of the response shown first (its text is ``z=<value>`` or ``ref``)."""
    a = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n", 1)[0]
    b = prompt.split("[The Begin of Response 2]\n", 1)[1].split("\n", 1)[0]
    return float(a[2:]) if a.startswith("z=") else -float(b[2:])


def script(prompt: str, request) -> str | Completion:
    if "Evaluation Hierarchies" not in prompt.rsplit("<|im_start|>user", 1)[-1]:
        return T1
    z = K * true_logit(prompt)
    return Completion((5,), VERDICT % (1 if z >= 0 else 2), "stop", choice_logits=((z, 0.0),))


@pytest.fixture(scope="module")
def tok():
    from brrm.testing import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def scalar_rm(tmp_path_factory) -> str:
    """A tiny random Qwen3 with a one-label head, saved once for the module's tests (they only read it)."""
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("rm") / "rm", sequence_classification=True))


def pairs() -> list[tuple[str, str, str]]:
    """(id, response_a, label) over the grid: each cell's id holds 20 pairs, round(20·σ(z)) of them labelled A."""
    out = []
    for g, z in enumerate(GRID):
        n_a = round(20 * sigmoid(z))
        out += [(f"g{g}", f"z={z}", "A" if i < n_a else "B") for i in range(20)]
    return out


def judged_file(tok, path: Path, **options) -> Path:
    judge = brrm.load(backend=FakeBackend(tok, script), kind="brrm", decoding="faithful", **options)
    data = pairs()
    out = judge.judge_pairs(["Which is better?"] * len(data), [a for _, a, _ in data], ["ref"] * len(data),
                            ids=[i for i, _, _ in data], labels=[lab for _, _, lab in data])
    lines = [json.dumps({**j.to_dict(), "id": i, "content_key": content_key("Which is better?", a, "ref")}) + "\n"
             for j, (i, a, _) in zip(out, data, strict=True)]
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("swap", [False, True])  # swap: each order is an observation (the reversed one mirrored)
def test_the_temperature_of_a_known_miscalibration_is_recovered(tok, tmp_path, capsys, swap):
    judged = judged_file(tok, tmp_path / "judged.jsonl", swap=swap)
    code = main(["calibrate", "--input", str(judged), "--output", str(tmp_path / "calib.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    calib = read_calibration(tmp_path / "calib.json")
    assert calib.kind == "pairwise" and abs(calib.temperature - K) / K < 0.05
    metrics = calib.details["metrics"]
    assert metrics["held-out, calibrated"]["ece"] < metrics["held-out, raw"]["ece"]
    assert metrics["held-out, calibrated"]["log_loss"] < metrics["held-out, raw"]["log_loss"]
    assert metrics["held-out, calibrated"]["brier"] < metrics["held-out, raw"]["brier"]
    split = calib.details["split"]
    assert split["fit_observations"] + split["heldout_observations"] == (1000 if swap else 500)
    assert split["heldout_observations"] > 100
    assert "temperature" in out and "held-out, calibrated" in out
    html = (tmp_path / "calib.html").read_text()
    assert "data:image/png;base64," in html and "10 equal-width bins" in html


def test_load_applies_it_raw_and_calibrated_side_by_side(tok, tmp_path):
    calib = Calibration("pairwise", K)
    (tmp_path / "c.json").write_text(json.dumps(calib.to_dict()))
    judge = brrm.load(backend=FakeBackend(tok, script), kind="brrm", decoding="faithful",
                      calibration=str(tmp_path / "c.json"))
    (j,) = judge.judge_pairs(["Q?"], ["z=1.0"], ["ref"])
    assert j.p_a_raw == pytest.approx(sigmoid(K)) and j.p_a == pytest.approx(sigmoid(1.0))
    assert j.provenance.calibration == calib.hash and j.to_dict()["p_a_raw"] == j.p_a_raw
    assert judge.info.composition.calibration == calib.hash
    assert judge.info.to_dict()["options"]["calibration"] == calib.hash  # what stores and replies carry
    (s,) = judge.judge_pairs(["Q?"], ["z=1.0"], ["ref"], swap=True)  # both orders calibrated, then averaged
    fwd, rev = s.sub_judgments
    assert fwd.p_a == pytest.approx(sigmoid(1.0)) and rev.p_a == pytest.approx(sigmoid(1.0))
    assert s.p_a == pytest.approx(sigmoid(1.0)) and s.p_a_raw == pytest.approx(sigmoid(K))
    plain = brrm.load(backend=FakeBackend(tok, script), kind="brrm", decoding="faithful")
    (r,) = plain.judge_pairs(["Q?"], ["z=1.0"], ["ref"])
    assert math.isnan(r.p_a_raw) and r.provenance.calibration == "" and r.p_a == pytest.approx(sigmoid(K))


def test_a_scalar_model_gets_a_scale(tmp_path, capsys):
    rows: list[dict] = []
    for g, z in enumerate(GRID):  # a scalar model under-confident by 2: σ(Δ) with Δ = z / 2
        n_a = round(20 * sigmoid(z))
        rows += [{"id": f"g{g}r{r}", "winner": "A", "status": "ok", "p_a": sigmoid(z / 2), "logit_1": None,
                  "label": "A" if i < n_a else "B", "content_key": content_key("q", f"z={z} #{r}", "ref")}
                 for r in range(2) for i in range(20)]
    (tmp_path / "scalar.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["calibrate", "-i", str(tmp_path / "scalar.jsonl"), "-o", str(tmp_path / "s.json")]) == 0
    calib = read_calibration(tmp_path / "s.json")
    assert calib.kind == "scalar" and abs(calib.scale - 2.0) / 2.0 < 0.05 and "scale" in capsys.readouterr().out


def test_a_tiny_reward_model_applies_a_scalar_calibration(scalar_rm, tmp_path):
    rm = scalar_rm
    (tmp_path / "s.json").write_text(json.dumps(Calibration("scalar", 0.5).to_dict()))
    judge = brrm.load(rm, calibration=str(tmp_path / "s.json"))
    raw = brrm.load(rm)
    (j,) = judge.judge_pairs(["What is 2+2?"], ["4"], ["five"])
    (r,) = raw.judge_pairs(["What is 2+2?"], ["4"], ["five"])
    delta = math.log(r.p_a / (1 - r.p_a))
    assert j.p_a_raw == pytest.approx(r.p_a) and j.p_a == pytest.approx(sigmoid(2 * delta))
    assert j.provenance.calibration == Calibration("scalar", 0.5).hash
    with pytest.raises(ConfigError, match="is for pairwise judges; kind 'bt' is scalar"):
        (tmp_path / "p.json").write_text(json.dumps(Calibration("pairwise", 2.0).to_dict()))
        brrm.load(rm, calibration=str(tmp_path / "p.json"))


def test_metrics_on_known_values():
    m = measure([0.05, 0.05, 0.95, 0.95], [0, 0, 1, 1])
    assert m.ece == pytest.approx(0.05) and m.brier == pytest.approx(0.0025) and m.accuracy == 1.0
    assert m.log_loss == pytest.approx(-math.log(0.95)) and [b.n for b in m.bins] == [2] + [0] * 8 + [2]
    assert fit_temperature([2.0, -2.0, 2.0, -2.0], [1, 0, 0, 1]) == pytest.approx(1e3)  # no signal: flat


@pytest.mark.parametrize(("argv", "message"), [
    (("calibrate", "-i", "/nonexistent.jsonl", "-o", "c.json"), "--input '/nonexistent.jsonl' does not exist"),
    (("calibrate", "-i", "x.jsonl", "-o", "c.json", "--heldout", "1.5"), "--heldout must lie in (0, 1)"),
    (("judge", "-i", "x.jsonl", "--calibration", "/nonexistent.json"), "calibration '/nonexistent.json' does not"),
])
def test_mistakes_are_one_line(capsys, argv, message):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bench_shows_calibration_beside_accuracy_and_applies_a_calibration(shared, scalar_rm, tmp_path, capsys):
    import shutil
    import subprocess

    rm = scalar_rm
    (tmp_path / "s.json").write_text(json.dumps(Calibration("scalar", 0.25).to_dict()))
    args = ["bench", "llmbar", "--subset", "Natural", "--limit", "20", "--model", rm, "--data-dir",
            str(shared / "data"), "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "raw")]) == 0
    out = capsys.readouterr().out
    assert "calibration over 40 labelled presentations" in out and "ECE" in out and "Brier" in out
    page = (tmp_path / "raw" / "report.html").read_text()
    assert "Natural" in page and "data:image/png;base64," in page and "log loss" in page
    figures = json.loads((tmp_path / "raw" / "result.json").read_text())["calibration"]["P(A ≻ B)"]
    assert figures["n"] == 40 and 0 <= figures["ece"] <= 1 and "calibration, P(A ≻ B): ECE" in (
        tmp_path / "raw" / "result.md").read_text()
    # the benchmark's own judgments are labelled pairs to fit on: 40 presentations of 20 pairs, the gold as label
    assert main(["calibrate", "-i", str(tmp_path / "raw" / "judgments.jsonl"), "-o", str(tmp_path / "b.json"),
                 "--heldout", "0.5"]) == 0
    split = read_calibration(tmp_path / "b.json").details["split"]
    assert split["fit_observations"] + split["heldout_observations"] == 40
    assert split["fit_groups"] + split["heldout_groups"] == 20
    assert main([*args, "--calibration", str(tmp_path / "b.json")]) == 0  # applied to the pairs it was fitted on
    assert f"{split['fit_groups']} of 20 pairs were in the calibration's fit split" in capsys.readouterr().out
    capsys.readouterr()
    assert main([*args, "--output", str(tmp_path / "cal"), "--calibration", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "raw (before calibration): ECE" in out
    assert "unknown: the calibration file keeps no group keys" in out  # s.json was written by hand
    rows = [json.loads(line) for line in (tmp_path / "cal" / "judgments.jsonl").read_text().splitlines()]
    judged = [p["judgment"] for r in rows for p in r["presentations"]]
    assert judged and all(j["p_a_raw"] is not None and j["p_a"] != j["p_a_raw"] for j in judged)
    assert {j["provenance"]["calibration"] for j in judged} == {Calibration("scalar", 0.25).hash}
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    shot = tmp_path / "bench.png"
    res = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1400",
                          f"--screenshot={shot}", (tmp_path / "cal" / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]


def labelled_records(path: Path, n: int = 24) -> Path:
    """``n`` labelled pair records (distinct arithmetic prompts), alternately labelled A and B."""
    rows = [{"id": f"r{k}", "prompt": f"What is {k} + {k}?", "response_a": f"{k} + {k} = {2 * k}.",
             "response_b": f"{k} + {k} = {2 * k + 1}.", "label": "AB"[k % 2]} for k in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_calibrate_judges_labelled_records_first_with_a_tiny_model(scalar_rm, tmp_path, capsys):
    rm = scalar_rm
    code = main(["calibrate", "--input", str(labelled_records(tmp_path / "r.jsonl")), "--output",
                 str(tmp_path / "c.json"), "--model", rm, "--heldout", "0.5", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    calib = read_calibration(tmp_path / "c.json")
    split = calib.details["split"]
    assert calib.kind == "scalar" and calib.model == rm and math.isfinite(calib.scale)
    assert split["fit_observations"] + split["heldout_observations"] == 24 and "held-out, calibrated" in out
    # too few distinct pairs for a held-out figure: one line, naming the minimum, before any pair is judged
    pairs_file = Path(__file__).parents[1] / "examples" / "pairs.jsonl"
    code = main(["calibrate", "--input", str(pairs_file), "--output", str(tmp_path / "d.json"), "--model", rm,
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "each side needs at least 5 distinct pairs" in err and "Traceback" not in err
    assert "judging" not in err  # refused before any pair was judged
    assert not (tmp_path / "d.json").exists()
