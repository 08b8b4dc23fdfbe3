"""Calibration you can trust (issue 33): one binning rule in every figure, exact at the edges; held-out splits by
content group that never leak duplicates; a calib.json that names its data, its bound and its clipping; an audit
that says when a calibration is applied to the pairs it was fitted on.

Judged files are written by hand where a figure needs probabilities placed exactly on bin edges (no model gives
P(A ≻ B) = 0.3 on demand); the audit and the overlap run a tiny real reward model through the CLI."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

import pytest

from brrm.audit import AuditOptions, plan_items, run_audit
from brrm.calibration import read_calibration
from brrm.calibration.data import content_key, observations
from brrm.calibration.fit import T_MIN
from brrm.calibration.split import KEY_CHARS, MIN_GROUPS
from brrm.calibration.split import split as split_by_group
from brrm.cli import main
from brrm.numerics import bin_edges, bin_index
from brrm.records import read_records
from brrm.types import JudgeInfo, PairwiseJudgment, Status, Verdict

EDGES = [k / 10 for k in range(11)]
"""Every edge of the 10 equal-width bins, as Python writes them: 0.0, 0.1, …, 0.3, …, 1.0."""

EXPECTED_BIN = {p: min(k, 9) for k, p in enumerate(EDGES)}
"""The documented rule: a value on an inner edge opens the bin above it; 1.0 is in the last bin."""


def test_the_rule_on_every_edge_and_outside():
    edges = bin_edges(10)
    assert edges == EDGES  # the edges printed are the literals, so 0.3 is an edge, not 0.30000000000000004
    assert [bin_index(p, edges) for p in EDGES] == [EXPECTED_BIN[p] for p in EDGES]
    assert bin_index(0.3 - 1e-16, edges) == 2 and bin_index(0.7, edges) == 7
    assert [bin_index(k / 50, bin_edges(50)) for k in range(51)] == [min(k, 49) for k in range(51)]
    with pytest.raises(ValueError, match="outside"):
        bin_index(1.0000001, edges)


def judged_rows(n: int, p_of, label_of, *, text=lambda k: f"pair {k}") -> list[dict]:
    """``n`` scalar judged rows (a probability without digit logits), each its own content group."""
    return [{"id": f"r{k}", "winner": "A" if p_of(k) >= 0.5 else "B", "status": "ok", "p_a": p_of(k),
             "logit_1": None, "label": label_of(k), "content_key": content_key("q", text(k), "ref")}
            for k in range(n)]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_calibrate_bins_edge_values_by_the_rule(tmp_path, capsys):
    rows = judged_rows(44, lambda k: EDGES[k % 11], lambda k: "AB"[k % 2])
    assert main(["calibrate", "-i", str(write(tmp_path / "j.jsonl", rows)), "-o", str(tmp_path / "c.json")]) == 0
    metrics = read_calibration(tmp_path / "c.json").details["metrics"]
    counts = [a + b for a, b in zip(metrics["fit, raw"]["bin_counts"], metrics["held-out, raw"]["bin_counts"],
                                    strict=True)]
    expected = Counter(EXPECTED_BIN[EDGES[k % 11]] for k in range(44))
    assert counts == [expected[b] for b in range(10)] and counts[9] == 8 and counts[3] == 4
    assert "1e-12" in read_calibration(tmp_path / "c.json").details["log_loss_clip"]
    assert "1e-12" in capsys.readouterr().out


class EdgeJudge:
    """A RewardJudge stand-in answering P(A ≻ B) on a bin edge chosen by the record (its response_a ``k=<i>``):
    no model can be asked for P = 0.3 exactly."""

    def __init__(self) -> None:
        self.info = JudgeInfo(model="edge-judge", kind="brrm", recipe="scripted", backend="fake",
                              chat_template_hash="-", template_hash="-", default_strategy="round_robin",
                              record={"seed": 0}, chunk_size=100)

    def judge_pairs(self, conversations, responses_a, responses_b, /, *, swap=None, ids=None, labels=None,
                    principles=None, progress=None, on_result=None, on_step=None):
        out = []
        for i, a in enumerate(responses_a):
            p = EDGES[int(a.split("=")[1]) % 11]
            out.append(PairwiseJudgment(Verdict.A if p >= 0.5 else Verdict.B, Status.OK, p_a=p,
                                        id=ids[i] if ids else "", label=labels[i] if labels else Verdict.NONE))
        if progress:
            progress(float(len(out)))
        return out

    def close(self) -> None:
        pass


def test_audit_histograms_and_reliability_bins_agree_on_edges(tmp_path):
    rows = [{"id": f"r{k}", "prompt": f"q{k}", "response_a": f"k={k}", "response_b": "ref", "label": "AB"[k % 2]}
            for k in range(33)]
    items = plan_items(read_records(write(tmp_path / "in.jsonl", rows), "pairs"), "pairs")
    run_audit(items, tmp_path / "a", AuditOptions(shape="pairs", progress=False), judge=EdgeJudge())
    overall = json.loads((tmp_path / "a" / "summary.json").read_text())["overall"]
    expected = Counter(EXPECTED_BIN[EDGES[k % 11]] for k in range(33))
    hist = overall["p_a"]["histogram"]
    assert hist["edges"] == EDGES
    assert hist["counts"] == [b["n"] for b in overall["calibration"]["measured"]["bins"]] \
        == [expected[b] for b in range(10)]
    fine = Counter(min(round(EDGES[k % 11] * 50), 49) for k in range(33))
    assert overall["p_a"]["fine_histogram"]["counts"] == [fine[b] for b in range(50)]


def test_no_content_group_straddles_the_split_for_any_seed(tmp_path, capsys):
    # 100 distinct pairs and 20 of them again under other ids, some shown in the other order: 120 rows
    rows = judged_rows(100, lambda k: 0.2 + 0.006 * k, lambda k: "AB"[k % 3 == 0])
    for k in range(0, 100, 5):
        again = dict(rows[k], id=f"dup{k}")
        if k % 10 == 0:  # the same pair, responses in the other order: the same content group
            again["content_key"] = content_key("q", "ref", f"pair {k}")
        rows.append(again)
    assert all(r["content_key"] == rows[int(r["id"][3:])]["content_key"] for r in rows[100:])  # order-free keys
    path = write(tmp_path / "j.jsonl", rows)

    def check(split: dict) -> None:
        fit, held = set(split["fit_group_keys"]), set(split["heldout_group_keys"])
        assert not fit & held and len(fit | held) == 100 == split["fit_groups"] + split["heldout_groups"]
        assert split["fit_observations"] + split["heldout_observations"] == 120
        sides = Counter(r["content_key"][:KEY_CHARS] in fit for r in rows)  # duplicates go with their original
        assert (sides[True], sides[False]) == (split["fit_observations"], split["heldout_observations"])

    # the rule for 200 seeds, as calib.json records it (each `brrm calibrate` also draws its reliability diagram,
    # ~0.8 s of CPU, which is not what this test is about) ...
    items = observations(rows).items
    for seed in range(200):
        check(split_by_group(items, seed, 0.3).to_dict(seed, 0.3))
    # ... and `brrm calibrate` records exactly that split for the seed it is given
    recorded = []
    for seed in (0, 7, 19):
        assert main(["calibrate", "-i", str(path), "-o", str(tmp_path / "c.json"), "--split-seed", str(seed),
                     "--overwrite"]) == 0
        recorded.append(read_calibration(tmp_path / "c.json").details["split"])
        assert recorded[-1] == split_by_group(items, seed, 0.3).to_dict(seed, 0.3)
        check(recorded[-1])
    assert len({tuple(r["fit_group_keys"]) for r in recorded}) == 3  # three seeds, three different splits
    out = capsys.readouterr().out
    assert "pairs / " in out and "observations held out" in out


def test_digests_name_the_rows_and_a_bound_is_said(tmp_path, capsys):
    rows = judged_rows(30, lambda k: 0.6 if k % 2 else 0.4, lambda k: "A" if k % 2 else "B")
    assert main(["calibrate", "-i", str(write(tmp_path / "j.jsonl", rows)), "-o", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err
    calib = read_calibration(tmp_path / "c.json")
    split, search = calib.details["split"], calib.details["search"]
    assert calib.temperature == T_MIN and search == {"bounds": [1e-3, 1e3], "bound_hit": True}
    assert "warning: the temperature sits on the search bound" in err
    assert len(split["fit_digest"]) == 64 and split["fit_digest"] != split["heldout_digest"]
    # the same rows in another order: the same digests; one probability changed: another digest
    assert main(["calibrate", "-i", str(write(tmp_path / "r.jsonl", rows[::-1])), "-o", str(tmp_path / "r.json")]) == 0
    assert read_calibration(tmp_path / "r.json").details["split"]["fit_digest"] == split["fit_digest"]
    changed = [dict(r, p_a=0.7) if r["content_key"][:KEY_CHARS] in split["fit_group_keys"] and r["p_a"] == 0.6
               else r for r in rows]
    assert main(["calibrate", "-i", str(write(tmp_path / "x.jsonl", changed)), "-o", str(tmp_path / "x.json")]) == 0
    assert read_calibration(tmp_path / "x.json").details["split"]["fit_digest"] != split["fit_digest"]
    report = (tmp_path / "c.html").read_text()
    assert split["fit_digest"] in report and "clipped" in report


def test_too_few_pairs_a_side_is_one_line(tmp_path, capsys):
    rows = judged_rows(2 * MIN_GROUPS, lambda k: 0.7, lambda k: "A")
    code = main(["calibrate", "-i", str(write(tmp_path / "j.jsonl", rows)), "-o", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"at least {MIN_GROUPS} distinct pairs" in err
    assert not (tmp_path / "c.json").exists()


def test_an_audit_says_the_calibration_was_fitted_on_its_pairs(tmp_path, capsys):
    from brrm.testing import save_tiny_qwen3

    rm = str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True))
    rows = [{"id": f"r{k}", "prompt": f"What is {k} + {k}?", "response_a": f"{k} + {k} = {2 * k}.",
             "response_b": f"{k} + {k} = {2 * k + 1}.", "label": "AB"[k % 2]} for k in range(24)]
    records = write(tmp_path / "r.jsonl", rows)
    assert main(["calibrate", "-i", str(records), "-o", str(tmp_path / "c.json"), "--model", rm, "--heldout", "0.5",
                 "--no-progress"]) == 0
    split = read_calibration(tmp_path / "c.json").details["split"]
    capsys.readouterr()
    assert main(["audit", str(records), "--output", str(tmp_path / "a"), "--model", rm,
                 "--calibration", str(tmp_path / "c.json"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    seen = json.loads((tmp_path / "a" / "summary.json").read_text())["calibration_overlap"]
    assert seen["known"] and seen["pairs"] == 24
    assert (seen["in_fit"], seen["in_heldout"]) == (split["fit_groups"], split["heldout_groups"])
    sentence = f"{split['fit_groups']} of 24 pairs were in the calibration's fit split"
    assert sentence in err and sentence in html.unescape((tmp_path / "a" / "report.html").read_text())
