"""The HTML report: self-contained, every plot present, flagged items shown, record text shown as text — checked in
a real headless Chromium (Debian's ``chromium`` package; skipped with a reason where it is absent).
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess

import pytest

from brrm.audit import AuditOptions, plan_items, run_audit
from brrm.backends.base import Completion
from brrm.records import read_records
from tests.audit_support import ScriptedBRRM, fake_brrm, ranking, write_jsonl

pytestmark = pytest.mark.timeout(180)

XSS = ("<script>document.title='PWNED'</script><img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
       "<b>bold-marker</b> & done")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAIR_PLOTS = {"verdicts", "p_a_histogram", "dimensions", "position", "failure_rates", "slice:source"}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A swap audit over a scripted BR-RM with every flag: a position-inconsistent pair with HTML in its texts, a
    parse failure, a truncation, another inconsistent pair, a clean pair and a bad line."""
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    base = tmp_path_factory.mktemp("audit-report")
    rows = [{"id": "xss", "prompt": "<script>alert(1)</script>Say hi.", "response_a": XSS, "response_b": "Hello.",
             "label": "A", "source": "<i>src</i>"},
            {"id": "parse", "prompt": "2+2?", "response_a": "4 (parse)", "response_b": "5", "label": "A",
             "source": "web"},
            {"id": "trunc", "prompt": "Long?", "response_a": "long (trunc)", "response_b": "short", "source": "web"},
            {"id": "incons", "prompt": "Pick.", "response_a": "left (incons)", "response_b": "right (incons)",
             "source": "web"},
            {"id": "fine", "prompt": "Capital of France?", "response_a": "Paris.", "response_b": "Lyon.",
             "label": "A", "source": "web"},
            "{broken line"]

    def verdict(first, second):
        if "(parse)" in first + second:
            return "\\boxed{1 or 2}"
        if "(trunc)" in first + second:
            return Completion(tuple(tok.encode("I was still think", add_special_tokens=False)), "I was still think",
                              "length")
        if "(incons)" in first or first in (XSS, "Hello."):
            return 1  # the first shown always wins: the two orders disagree
        return 1 if first == "Paris." else 2

    items = plan_items(read_records(write_jsonl(base / "in.jsonl", rows), "pairs"), "pairs", slice_by=["source"])
    opts = AuditOptions(shape="pairs", slice_by=("source",), progress=False)
    run_audit(items, base / "audit", opts, judge=fake_brrm(tok, ScriptedBRRM(verdict), swap=True))
    return base / "audit"


def test_report_escapes_record_text_and_embeds_every_plot(report):
    html = (report / "report.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower() and "<b>bold-marker</b>" not in html and "<i>src</i>" not in html
    assert "&lt;script&gt;document.title=&#39;PWNED&#39;&lt;/script&gt;" in html and "&lt;i&gt;src&lt;/i&gt;" in html
    assert "default-src 'none'" in html and "http://" not in html and "https://" not in html  # nothing to fetch
    plots = dict(re.findall(r'data-plot="([^"]+)"><img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html))
    assert set(plots) == PAIR_PLOTS
    from PIL import Image

    for data in plots.values():
        with Image.open(io.BytesIO(base64.b64decode(data))) as img:
            assert img.format == "PNG" and img.width > 300 and img.height > 200
    s = json.loads((report / "summary.json").read_text())
    assert s["flagged"]["counts"] == {"invalid_input": 1, "parse_failure": 1, "truncated": 1, "backend_error": 0,
                                      "empty": 0, "inconsistent": 2, "low_margin": 0}
    assert s["overall"]["position"]["swapped"] == 3 and s["overall"]["position"]["consistent"] == 1
    assert s["overall"]["agreement"]["accuracy"] == 0.5 and s["overall"]["rates"]["parse_failure"] == 0.2
    # cost: the scripted backend cannot say what it served from cache: "not reported", never 0
    tokens = s["overall"]["tokens"]
    assert tokens["results"] == 5 and tokens["tokens_per_judgment"]["cached"] is None
    assert tokens["tokens_per_judgment"]["prompt"]["mean"] > 0 and s["run"]["judgments_per_second"] > 0
    assert "cached not reported" in html


def test_report_renders_in_headless_chromium_without_running_record_text(report, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
           (report / "report.html").as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    console = [line for line in res.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []  # no script error, no blocked load, no CSP violation
    assert "<title>brrm audit:" in dom and "PWNED" not in dom.split("</title>")[0]
    assert "data-pwned" not in dom.split("<body", 1)[1].split(">", 1)[0]  # the onerror handler never ran
    assert "<b>bold-marker</b>" not in dom and "&lt;b&gt;bold-marker&lt;/b&gt; &amp; done" in dom
    figures = re.findall(r'<figure class="plot" data-plot="([^"]+)"><img src="data:image/png;base64,', dom)
    assert set(figures) == PAIR_PLOTS
    flagged = dom.split('id="flagged-items"', 1)[1].split("</table>", 1)[0]
    assert flagged.count('class="flagged-item"') == 5  # 2 inconsistent, parse failure, truncation, bad line
    for text in ("Response A", "Response B", "Analysis of A (turn 1)", "Turn 2 reversed (B first)",
                 "Information Accuracy | Response Completeness", "I was still think", "position inconsistent"):
        assert text in flagged
    assert 'id="invalid-rows"' in dom and "line 6: not valid JSON" in dom
    assert ranking(1).split("\n")[0] in dom  # both turns' texts are shown


@pytest.fixture(scope="module")
def labelled_report(tmp_path_factory):
    """An audit of eight labelled pairs whose P(A ≻ B) all lie near 0.5 (0.46–0.54), each flagged low-margin with
    the reason "turn 2 thinking hit its budget and was closed", and no failure at all."""
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    base = tmp_path_factory.mktemp("audit-calibration")
    gaps = [-0.16, -0.12, -0.08, -0.04, 0.04, 0.08, 0.12, 0.16]  # logit gaps: P = σ(gap) in [0.46, 0.54]
    rows = [{"id": f"p{k}", "prompt": f"Question {k}?", "response_a": f"answer {k} gap={g}", "response_b": "other",
             "label": "A" if k % 2 else "B", "kind": "math" if k < 4 else "chat"} for k, g in enumerate(gaps)]

    def verdict(first, second):
        gap = float(first.split("gap=")[1]) if "gap=" in first else -float(second.split("gap=")[1])
        text = ranking(1 if gap > 0 else 2)
        return Completion(tuple(tok.encode(text, add_special_tokens=False)), text, "stop",
                          choice_logits=((gap, 0.0),), think_budget_hit=True)

    items = plan_items(read_records(write_jsonl(base / "in.jsonl", rows), "pairs"), "pairs", slice_by=["kind"])
    opts = AuditOptions(shape="pairs", slice_by=("kind",), progress=False)
    run_audit(items, base / "audit", opts, judge=fake_brrm(tok, ScriptedBRRM(verdict)))
    from brrm.calibration import Calibration, write_calibration

    write_calibration(base / "calib.json", Calibration("pairwise", 0.5))  # twice as confident
    run_audit(items, base / "calibrated", opts,
              judge=fake_brrm(tok, ScriptedBRRM(verdict), calibration=str(base / "calib.json")))
    return base / "audit"


def test_near_half_probabilities_flag_reasons_and_calibration_are_shown(labelled_report, tmp_path):
    s = json.loads((labelled_report / "summary.json").read_text())
    p = s["overall"]["p_a"]
    assert len(p["values"]) == 8 and all(0.45 < v < 0.55 for v in p["values"])
    assert len(p["fine_histogram"]["counts"]) == 50 and max(p["fine_histogram"]["counts"]) <= 2  # 0.02-wide bins
    assert s["flagged"]["reasons"] == {"turn 2 thinking hit its budget and was closed": 8}
    cal = s["overall"]["calibration"]
    assert cal["labelled"] == 8 and cal["measured"]["n"] == 8 and 0 <= cal["measured"]["ece"] <= 1
    html = (labelled_report / "report.html").read_text(encoding="utf-8")
    plots = set(re.findall(r'data-plot="([^"]+)"><img src="data:image/png;base64,', html))
    assert "failure_rates" not in plots and "p_a_histogram" in plots and "slice:kind" in plots
    assert "none: no parse failure, truncation, backend error" in html
    assert "“turn 2 thinking hit its budget and was closed” × 8" in html and "low margin 8" in html
    assert 'data-calibration="reliability"><img src="data:image/png;base64,' in html and "Brier" in html
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    shot = tmp_path / "report.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,3000", f"--screenshot={shot}",
           (labelled_report / "report.html").as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as img:
        assert img.width == 1280 and len(img.convert("L").getcolors(256) or ()) > 16  # rendered, not a blank page


def test_a_calibrated_judge_shows_before_and_after(labelled_report):
    s = json.loads((labelled_report.parent / "calibrated" / "summary.json").read_text())
    cal = s["overall"]["calibration"]
    from brrm.calibration import Calibration

    assert cal["calibration"] == Calibration("pairwise", 0.5).hash and cal["raw"]["n"] == cal["measured"]["n"] == 8
    raw = json.loads((labelled_report / "summary.json").read_text())["overall"]["calibration"]["measured"]
    assert cal["raw"]["brier"] == pytest.approx(raw["brier"]) and cal["measured"]["brier"] != raw["brier"]
    html = (labelled_report.parent / "calibrated" / "report.html").read_text(encoding="utf-8")
    assert f"before calibration {cal['calibration']}" in html
