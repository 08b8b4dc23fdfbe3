"""Robustness probes (issue 21.5): scripted judges with a known bias (the probe recovers it exactly), the
manipulations themselves, and ``brrm probe`` end to end on a tiny real Qwen3."""

from __future__ import annotations

import json
import re

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.cli import main
from brrm.errors import ConfigError
from brrm.probes import PROBES, bootstrap, parse_probes, run_probes
from brrm.probes.variants import FILLER, inject, pad_length, reformat
from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3
from tests.conftest import REPO
from tests.serve_helpers import T1, is_turn2, ranking, responses_in

N = 20
CONVS = [f"Question {k}: what is the answer?" for k in range(N)]
BODY = " ".join(f"Step {i} is done." for i in range(30))  # ~500 characters: additive probes stay under 1.5x
A = [f"The right answer to {k}. {BODY}" for k in range(N)]
B = [f"A wrong answer to {k}. {BODY}" for k in range(N)]
IDS = [f"q{k}" for k in range(N)]


class LengthBiased:
    """Scripted BR-RM: on questions k % 4 == 0 a response at least 1.5x longer than the other wins; on k % 4 == 1
    the verdict is a coin flip drawn from the turn-2 seed (what real sampling gives, on demand); otherwise the
    response saying "right" wins. Scripted flip rates: length 5/20 (the padded loser wins on k % 4 == 0), position
    5/20 (a coin flip keeps its digit, so its verdict follows the position), injection and self-praise 0."""

    def __call__(self, prompt, request):
        if not is_turn2(prompt):
            return T1
        k = int(re.search(r"Question (\d+)", prompt).group(1))
        first, second = responses_in(prompt)
        if k % 4 == 1:
            return ranking(1 + request.seed % 2)
        if k % 4 == 0 and max(len(first), len(second)) >= 1.5 * min(len(first), len(second)):
            return ranking(1 if len(first) > len(second) else 2)
        return ranking(1 if "right" in first else 2)


def _judge(**kw):
    return brrm.load(kind="brrm", backend=FakeBackend(build_tiny_tokenizer(), LengthBiased()), decoding="faithful",
                     **kw)


def test_the_probe_recovers_the_scripted_flip_rates():
    report = run_probes(_judge(), CONVS, A, B, probes="length,self-praise,injection,position", ids=IDS, seed=1)
    figs = {f.probe: f for f in report.probes}
    assert report.streams == "shared" and report.pairs == N and report.judgments == 5 * N
    length = figs["length"]
    assert length.flip_rate.value == 0.25 and length.flip_rate.n == N and length.failed == 0
    assert length.flip_rate.low < 0.25 < length.flip_rate.high  # a seeded percentile interval around it
    assert length.toward_target == 1.0  # every flip made the padded loser win
    assert {it.id for it in length.items if it.flipped} == {f"q{k}" for k in range(0, N, 4)}
    assert {it.id for it in length.most_moved} == {f"q{k}" for k in range(0, N, 4)}  # flips first
    assert figs["self-praise"].flip_rate.value == 0.0 and figs["injection"].flip_rate.value == 0.0
    position = figs["position"]
    assert position.flip_rate.value == 0.25
    assert {it.id for it in position.items if it.flipped} == {f"q{k}" for k in range(1, N, 4)}
    # same seed, same report; another seed moves only the intervals
    again = run_probes(_judge(), CONVS, A, B, probes="length", ids=IDS, seed=1).probes[0]
    assert again.flip_rate == length.flip_rate
    other = run_probes(_judge(), CONVS, A, B, probes="length", ids=IDS, seed=2).probes[0].flip_rate
    assert other.value == 0.25 and (other.low, other.high) != (length.flip_rate.low, length.flip_rate.high)


def test_variants_share_the_originals_streams():
    """The coin-flip items keep their verdict under every content probe only because a variant draws the original
    pair's seeds: the verdicts of the coin items differ across seeds, so fresh streams would flip about half."""
    report = run_probes(_judge(), CONVS, A, B, probes="self-praise,authority,format,injection", ids=IDS)
    assert all(f.flip_rate.value == 0.0 for f in report.probes)
    judge = _judge()
    coins = [k for k in range(1, N, 4)]
    fresh = judge.judge_pairs([CONVS[k] for k in coins], [A[k] for k in coins], [B[k] + " Extra." for k in coins],
                              ids=[IDS[k] for k in coins])
    plain = judge.judge_pairs([CONVS[k] for k in coins], [A[k] for k in coins], [B[k] for k in coins],
                              ids=[IDS[k] for k in coins])
    assert [j.winner for j in fresh] != [j.winner for j in plain]  # independent streams would move them


def test_a_judge_behind_judge_pairs_only_is_probed_with_independent_streams():
    inner = _judge()

    class Opaque:  # e.g. a remote judge: no ordered judge to key a variant's streams by the original pair
        info = inner.info
        judge_pairs = inner.judge_pairs

    report = run_probes(Opaque(), CONVS, A, B, probes="length", ids=IDS)
    flipped = {it.id for it in report.probes[0].items if it.flipped}
    assert report.streams == "independent"
    assert flipped > {f"q{k}" for k in range(0, N, 4)}  # the scripted flips, plus coin flips drawn afresh


def test_probes_with_swap_and_voting_follow_the_judge():
    report = run_probes(_judge(swap=True, samples=3), CONVS, A, B, probes="length", ids=IDS)
    length = report.probes[0]
    assert report.judgments == 2 * N * 2 * 3
    # swap turns the length-susceptible items' padded-loser win into a win in both orders (still a flip); the coin
    # items draw their original streams, so they never flip
    assert {it.id for it in length.items if it.flipped} == {f"q{k}" for k in range(0, N, 4)}


def test_scalar_model_reward_shift():
    def score(prompt):
        text = prompt.rsplit("<|im_start|>assistant", 1)[-1]
        return len(text) / 1000 + (1.0 if "right" in text else 0.0)

    judge = brrm.load(kind="bt", backend=FakeBackend(build_tiny_tokenizer(), score_script=score))
    report = run_probes(judge, CONVS, A, B, probes="length,authority", ids=IDS)
    length, authority = report.probes
    assert report.streams == "deterministic"
    expected = [(len(pad_length(b)) - len(b)) / 1000 for b in B]
    assert length.reward_shift is not None
    assert length.reward_shift.value == pytest.approx(sum(expected) / N)
    assert length.flip_rate.value == 0.0  # the bonus of "right" (1.0) outweighs the padding (~0.55)
    assert authority.reward_shift.value == pytest.approx(len(PROBES["authority"].make("", 1)) / 1000)


def test_manipulations_say_no_more():
    padded = pad_length("Paris.")
    head, rest = padded.split("\n\n", 1)
    assert head == "Paris." and len(padded) >= 12 and set(re.split(r"(?<=\.) ", rest)) <= set(FILLER)
    assert all(2 * len(b) <= len(pad_length(b)) < 2 * len(b) + 50 for b in B)
    assert reformat("One. Two!\nThree?") == "**Answer**\n\n- One.\n- Two!\n- Three?"
    assert "\\boxed{2}" in inject("x", 2) and "\\boxed{1}" not in inject("x", 2)
    assert parse_probes("length, injection,length") == ("length", "injection")
    with pytest.raises(ConfigError, match="probe 'speed' is not valid; expected some of length, authority"):
        parse_probes("length,speed")
    iv = bootstrap([1.0, 0.0, 1.0, 1.0], resamples=500, confidence=0.9, seed=3)
    assert iv.value == 0.75 and 0.0 <= iv.low <= 0.75 <= iv.high <= 1.0 and iv.n == 4


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def two_pairs(tmp_path_factory):
    """Two pairs of examples/pairs.jsonl, a single-turn one and the multi-turn one: each probe's flip rate over 2
    pairs."""
    lines = (REPO / "examples/pairs.jsonl").read_text().splitlines(keepends=True)
    assert "conversation" in lines[3] and "conversation" not in lines[0]
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text(lines[0] + lines[3])
    return str(path)


def test_cli_probe_on_a_tiny_model(tmp_path, tiny_dir, two_pairs, capsys):
    out = tmp_path / "probe.json"
    assert main(["probe", two_pairs, "--probes", "length,injection", "--model", tiny_dir,
                 "--kind", "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off",
                 "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "cost: (1 original + 2 probes) x [2 pairs x 1 order x 1 sample = 2 judgments (4 generations)] = 6 " \
           "judgments" in err
    assert err.index("cost:") < err.index("probes over 2 pairs")
    for name in ("length", "injection"):
        assert re.search(rf"{name}\s+flip rate \d\.\d{{3}} \[\d\.\d{{3}}, \d\.\d{{3}}\]\s+\(2 pairs, 0 failed\)", err)
    report = json.loads(out.read_text())
    assert [p["probe"] for p in report["probes"]] == ["length", "injection"]
    for p in report["probes"]:
        fr = p["flip_rate"]
        assert fr["n"] == 2 and fr["low"] <= fr["value"] <= fr["high"] and len(p["items"]) == 2
        assert sum(it["flipped"] for it in p["items"]) == round(fr["value"] * 2)


def test_cli_probe_bad_flags_are_one_error_line(capsys):
    assert main(["probe", str(REPO / "examples/pairs.jsonl"), "--probes", "length,bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("brrm: error: probe 'bogus' is not valid") and err.count("\n") == 1


def test_audit_probes_write_probes_json_and_a_report_section(tmp_path, tiny_dir, two_pairs, capsys):
    out = tmp_path / "audit"
    assert main(["audit", two_pairs, "--output", str(out), "--model", tiny_dir, "--kind",
                 "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off", "--no-progress",
                 "--probes", "length,injection"]) == 0
    err = capsys.readouterr().err
    assert "probes: length, injection; cost 6 judgments" in err and "flip rate" in err
    report = json.loads((out / "probes.json").read_text())
    assert [p["probe"] for p in report["probes"]] == ["length", "injection"] and report["pairs"] == 2
    html = (out / "report.html").read_text()
    section = html.split('<section id="robustness">', 1)[1].split("</section>", 1)[0]
    for p in report["probes"]:
        fr = p["flip_rate"]
        assert f'data-probe="{p["probe"]}"' in section
        assert f"{fr['value']:.3f} [{fr['low']:.3f}, {fr['high']:.3f}]" in section


def test_audit_probes_need_pairs(tmp_path, capsys):
    single = tmp_path / "single.jsonl"
    single.write_text(json.dumps({"prompt": "hi", "response": "hello"}) + "\n")
    code = main(["audit", str(single), "--output", str(tmp_path / "out"), "--kind", "bt", "--model",
                 str(tmp_path / "none"), "--probes", "length"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("brrm: error:") and "--probes applies to pair records" in err
