"""``brrm arena``: the long table's checks, pairing, a strength-scripted judge whose order is recovered, the ratings
and intervals against evalica's own functions on identical battles, the outputs, and the CLI on a tiny Qwen3."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from brrm import ConfigError
from brrm.arena import Battle, fit, markdown, plan, rate, read_table, run_arena, table_from_rows
from brrm.types import JudgeInfo, PairwiseJudgment, Status, Verdict
from tests.conftest import REPO

# the arena extra; evalica (with pandas and scipy, ~3 s of imports) is imported by the tests that use it, not when
# every xdist worker collects this module
pytestmark = pytest.mark.skipif(importlib.util.find_spec("evalica") is None,
                                reason="the arena extra: pip install -e '.[arena]'")
np = pytest.importorskip("numpy")


class StrengthJudge:
    """A :class:`~brrm.RewardJudge` stand-in: each answer's text ends with its model's name; P(A ≻ B) is
    σ(s_A − s_B) of the models' known strengths (logits), the verdict drawn from it with a seeded RNG."""

    def __init__(self, strengths: dict[str, float], *, pairwise: bool = True, seed: int = 0) -> None:
        self.strengths = strengths
        self.info = JudgeInfo(model="strength-judge", kind="brrm", recipe="scripted", backend="fake",
                              chat_template_hash="-", template_hash="-", default_strategy="round_robin",
                              record={"seed": seed}, chunk_size=64, pairwise=pairwise, fingerprint="f00d")
        self.rng = random.Random(seed)
        self.swaps: list[bool | None] = []

    def _strength(self, text: str) -> float:
        return self.strengths[text.rsplit(" ", 1)[-1]]

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str], responses_b: Sequence[str], /,
                    *, swap: bool | None = None, ids: Sequence[str] | None = None, labels: Any = None,
                    principles: Any = None, progress: Any = None, on_result: Any = None,
                    on_step: Any = None) -> list[PairwiseJudgment]:
        self.swaps.append(swap)
        out = []
        for i, (a, b) in enumerate(zip(responses_a, responses_b, strict=True)):
            if "FAIL" in a or "FAIL" in b:
                out.append(PairwiseJudgment(Verdict.NONE, Status.PARSE_FAILURE, "scripted failure",
                                            id=ids[i] if ids else ""))
                continue
            p = 1.0 / (1.0 + math.exp(self._strength(b) - self._strength(a)))
            win = Verdict.A if self.rng.random() < p else Verdict.B
            out.append(PairwiseJudgment(win, Status.OK, p_a=p, id=ids[i] if ids else "", consistent=True))
        if progress:
            progress(float(len(out)))
        return out

    def close(self) -> None:
        pass


def _rows(models: Sequence[str], n_prompts: int, skip: set[tuple[int, str]] = frozenset()) -> list[tuple[int, Any]]:
    rows, line = [], 0
    for k in range(n_prompts):
        for m in models:
            if (k, m) in skip:
                continue
            line += 1
            rows.append((line, {"prompt_id": f"p{k}", "model": m, "prompt": f"Question {k}?",
                                "response": f"Answer {k} by {m}", "category": "math" if k % 2 else "chat"}))
    return rows


STRENGTHS = {"weak": -1.0, "mid": 0.0, "strong": 1.0, "best": 2.0}


def test_a_scripted_judge_with_known_strengths_is_recovered_in_order():
    table = table_from_rows(_rows(list(STRENGTHS), 60))
    judge = StrengthJudge(STRENGTHS)
    result = run_arena(judge, table, round_robin=True, anchor="mid", bootstrap=50, seed=3)
    board = result.leaderboard
    assert [r.model for r in board.ratings] == ["best", "strong", "mid", "weak"]
    assert set(judge.swaps) == {True} and len(judge.swaps) == 6  # both orders by default; chunks of 64 pairs
    got = {r.model: r for r in board.ratings}
    assert got["mid"].rating == pytest.approx(1000.0) and got["mid"].lower == pytest.approx(1000.0)
    for m, s in STRENGTHS.items():  # soft outcomes are the true probabilities: the fit recovers the logits exactly
        assert got[m].rating == pytest.approx(1000.0 + 400.0 / math.log(10) * s, abs=0.5)
        assert got[m].lower <= got[m].rating <= got[m].upper
    assert all(r.judgments == 180 and r.failures == 0 and r.status == "ok" for r in board.ratings)
    assert len(result.battles) == 360 and board.judgments == 360


def test_hard_ratings_and_intervals_equal_evalicas_own_functions():
    import evalica

    table = table_from_rows(_rows(["weak", "mid", "strong"], 40))
    judge = StrengthJudge(STRENGTHS, seed=1)
    result = run_arena(judge, table, baseline="mid", outcomes="hard", bootstrap=40, seed=11)
    ok = [b for b in result.battles if b.ok]
    codes = {"model_a": evalica.Winner.X, "model_b": evalica.Winner.Y, "tie": evalica.Winner.Draw}
    xs, ys, ws = [b.model_a for b in ok], [b.model_b for b in ok], [codes[b.winner] for b in ok]
    own = evalica.bradley_terry(xs, ys, ws).scores
    boot = evalica.bootstrap(evalica.bradley_terry, xs, ys, ws, n_resamples=40, bootstrap_method="percentile",
                             random_state=11)
    # Arena-Hard-Auto's published scale, reimplemented only here: 400 log10(strength), the baseline at 1000 in the
    # fit and in every bootstrap sample, the interval the samples' 2.5 / 97.5 percentiles
    rating = {m: 400 * math.log10(own[m] / own["mid"]) + 1000 for m in own.index}
    dist = 400 * np.log10(boot.distribution.div(boot.distribution["mid"], axis=0)) + 1000
    for r in result.leaderboard.ratings:
        assert r.rating == pytest.approx(rating[r.model], abs=1e-9)
        assert r.lower == pytest.approx(np.percentile(dist[r.model], 2.5), abs=1e-9)
        assert r.upper == pytest.approx(np.percentile(dist[r.model], 97.5), abs=1e-9)
    wins = {m: np.mean([(b.winner == "model_a") == (b.model_a == m) for b in ok if m in (b.model_a, b.model_b)])
            for m in ("weak", "strong")}
    got = {r.model: r.win_rate for r in result.leaderboard.ratings}
    assert got["weak"] == pytest.approx(wins["weak"]) and got["strong"] == pytest.approx(wins["strong"])
    assert math.isnan(got["mid"])  # the baseline has no win rate against itself


def test_the_same_battles_and_seed_give_the_same_table_and_ties_count_half():
    battles = [Battle("p", "", "a", "b", "ok", "", w, math.nan, None, False, "j", "")
               for w in ("model_a", "tie", "model_b", "tie", "model_a", "model_b", "model_a")]
    one = fit(battles, ["a", "b"], outcomes="hard", bootstrap=20, seed=5)
    two = fit(battles, ["a", "b"], outcomes="hard", bootstrap=20, seed=5)
    assert one == two
    # a wins 3 + 2 halves of 7: strength ratio 4/3 (Bradley-Terry's MLE for two players is the win ratio)
    a, b = (next(r for r in one.ratings if r.model == m) for m in "ab")
    assert a.rating - b.rating == pytest.approx(400 * math.log10(4 / 3), abs=1e-3)


def test_duplicate_rows_are_refused_naming_both_lines(tmp_path):
    path = tmp_path / "arena.jsonl"
    rows = [{"prompt_id": 1, "model": "x", "prompt": "Hi?", "response": "a"},
            {"prompt_id": 1, "model": "y", "prompt": "Hi?", "response": "b"},
            {"prompt_id": 1, "model": "x", "prompt": "Hi?", "response": "c"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"1 pair appears more than once: \('1', 'x'\) \(×2, on lines 1 and 3\)"):
        read_table(path)


def test_a_bad_line_is_reported_by_number_and_the_rest_goes_on(tmp_path):
    path = tmp_path / "arena.jsonl"
    good = [r for _, r in _rows(["weak", "strong"], 3)]
    lines = [json.dumps(good[0]), "{not json", json.dumps({"prompt_id": "p9", "model": "weak", "prompt": "Q?"}),
             *map(json.dumps, good[1:])]
    path.write_text("\n".join(lines) + "\n")
    table = read_table(path)
    assert [(e.line, e.reason.split(":")[1].strip()) for e in table.errors] == [
        (2, "not valid JSON (Expecting property name enclosed in double quotes)"), (3, "missing field 'response'")]
    assert len(table.answers) == 6 and table.models == ("weak", "strong")
    result = run_arena(StrengthJudge(STRENGTHS), table, baseline="weak", bootstrap=10)
    assert len(result.battles) == 3
    # category math has one battle: kept, with why it has no ratings
    math_board = next(c for c in result.categories if c.category == "math")
    assert math_board.leaderboard is None and "the bootstrap needs at least 2" in math_board.reason


def test_a_model_missing_prompts_is_reported_and_rated_on_what_exists():
    table = table_from_rows(_rows(["weak", "mid", "strong"], 6, skip={(0, "strong"), (4, "strong")}))
    assert table.missing == {"strong": ("p0", "p4")}
    result = run_arena(StrengthJudge(STRENGTHS), table, baseline="mid", bootstrap=10)
    assert {r.model: r.judgments for r in result.leaderboard.ratings} == {"strong": 4, "weak": 6, "mid": 10}


def test_failed_battles_are_counted_and_kept_out_of_battles_jsonl(tmp_path):
    rows = _rows(["weak", "strong"], 4)
    rows[0][1]["response"] = "FAIL weak"
    result = run_arena(StrengthJudge(STRENGTHS), table_from_rows(rows), baseline="weak", bootstrap=10)
    paths = result.write(tmp_path)
    battles = [json.loads(x) for x in paths["battles"].read_text().splitlines()]
    failures = [json.loads(x) for x in paths["failures"].read_text().splitlines()]
    assert len(battles) == 3 and len(failures) == 1 and failures[0]["status"] == "parse_failure"
    assert all(b["winner"] in ("model_a", "model_b", "tie") and b["fingerprint"] == "f00d" for b in battles)
    board = list(csv.DictReader(paths["leaderboard"].open()))
    assert [r["model"] for r in board][0] == "strong" and board[0]["failures"] == "1" and board[1]["win_rate"] == ""
    assert "| rank | model | rating |" in result.markdown()


def test_an_arena_without_verdicts_still_writes_every_failure_and_says_why_nothing_is_rated(tmp_path):
    """Every battle failed (a budget too small for the format, a broken endpoint): no fit can be made, and the run
    still writes its outputs — failures.jsonl with each battle's status and reason, every model unrated with the
    reason — instead of stopping with an error after judging (the judgments were paid for)."""
    rows = _rows(["weak", "strong"], 3)
    for _, row in rows:
        row["response"] = "FAIL " + row["response"]
    result = run_arena(StrengthJudge(STRENGTHS), table_from_rows(rows), baseline="weak", bootstrap=10)
    board = result.leaderboard
    why = "0 of 3 battles have a verdict: the bootstrap needs at least 2"
    assert not board.fitted and board.reason == why and (board.judgments, board.failures) == (0, 3)
    assert [(r.status, r.reason, r.failures) for r in board.ratings] == [("unrated", why, 3)] * 2
    assert all(math.isnan(r.rating) for r in board.ratings)
    paths = result.write(tmp_path)
    assert paths["battles"].read_text() == ""
    failures = [json.loads(x) for x in paths["failures"].read_text().splitlines()]
    assert len(failures) == 3 and {(f["status"], f["reason"]) for f in failures} == {("parse_failure",
                                                                                       "scripted failure")}
    assert {r["status"] for r in csv.DictReader(paths["leaderboard"].open())} == {"unrated"}
    assert f"no ratings: {why}; 0 judgments, 3 failures" in result.markdown()
    assert "| - | weak | - |" in result.markdown()
    assert f"No ratings: {why}" in paths["report"].read_text() and "parse_failure 3" in paths["report"].read_text()
    assert {(r["rank_best"], r["rank_worst"]) for r in csv.DictReader(paths["leaderboard"].open())} == {("", "")}
    assert "<td>—</td><td>weak</td>" in paths["report"].read_text()  # no interval, no rank range
    adaptive = run_arena(StrengthJudge(STRENGTHS), table_from_rows(rows), adaptive=True, bootstrap=10)
    assert adaptive.adaptive is not None and adaptive.adaptive.stopped == "exhausted"
    assert adaptive.adaptive.judged == 3 and not adaptive.leaderboard.fitted  # every prompt tried, then it stops
    with pytest.raises(ConfigError, match="--anchor 'nobody' is not a model"):  # before anything is judged
        run_arena(StrengthJudge(STRENGTHS), table_from_rows(rows), baseline="weak", anchor="nobody")


def test_a_model_without_verdicts_yet_is_retried_and_an_unrated_anchor_does_not_stop_the_run():
    """Adaptive pairing keeps judging the pairs of a model that has no verdict yet while they have prompts (it is
    placed nowhere, so no adjacent pair would ever reach it); an anchor without a verdict leaves the others rated on
    the geometric mean instead of stopping the run after its judgments."""
    rows = _rows(["weak", "mid", "strong"], 30)
    for _, row in rows:
        if row["model"] == "strong" and int(row["prompt_id"][1:]) < 25:
            row["response"] = "FAIL " + row["response"]
    table = table_from_rows(rows)
    result = run_arena(StrengthJudge(STRENGTHS), table, adaptive=True, bootstrap=20, anchor="strong")
    strong = next(r for r in result.leaderboard.ratings if r.model == "strong")
    assert strong.status != "unrated" and strong.judgments > 0  # its working prompts were found
    assert result.leaderboard.anchor == "strong" and strong.rating == 1000.0
    failing = [(k, dict(row, response="FAIL " + row["response"]) if row["model"] == "strong" else row)
               for k, row in rows]
    run = run_arena(StrengthJudge(STRENGTHS), table_from_rows(failing), round_robin=True, bootstrap=20,
                    anchor="strong")
    board = run.leaderboard
    assert board.fitted and board.anchor == "" and [r.status for r in board.ratings][-1] == "unrated"
    assert "geometric mean = 1000" in markdown(board)
    board = rate(run.table, run.battles, baseline="strong", bootstrap=20)  # the baseline: the default anchor
    assert board.fitted and board.anchor == "" and [r.status for r in board.ratings][-1] == "unrated"


def test_pairing_refuses_unknown_baseline_and_both_strategies():
    table = table_from_rows(_rows(["weak", "mid"], 2))
    with pytest.raises(ConfigError, match="--baseline 'nope' is not a model"):
        plan(table, "baseline", "nope")
    with pytest.raises(ConfigError, match="exclude each other"):
        plan(table, "round_robin", "weak")
    assert [(m.model_a, m.model_b) for m in plan(table, "baseline", "weak")] == [("mid", "weak"), ("weak", "mid")]


def test_the_example_arena_holds_three_models_by_eight_prompts():
    table = read_table(REPO / "examples/arena.jsonl")
    assert len(table.models) == 3 and len(table.prompts) == 8 and not table.errors and not table.missing


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def test_brrm_arena_runs_on_the_example_with_a_tiny_qwen3(tmp_path, capsys, tiny_dir):
    """The CLI end to end on examples/arena.jsonl's first four prompts (its three models, 8 matchups; README.md's
    example block runs the whole file on a tiny model); a tiny Qwen3 (brrm.testing) stands in for the embedded demo,
    which needs minutes for 32 two-turn runs on a shared 2-core machine."""
    from brrm.cli import main

    four = tmp_path / "four.jsonl"
    four.write_text("".join((REPO / "examples/arena.jsonl").read_text().splitlines(keepends=True)[:12]))
    out = tmp_path / "out"
    argv = ["arena", "--input", str(four), "--baseline", "baseline-bot",
            "--output", str(out), "--model", tiny_dir, "--kind", "brrm", "--max-new-tokens", "420",
            "--block-token-cap", "8", "--thinking", "off", "--no-progress", "--bootstrap", "20"]
    code = main(argv)
    stdout = capsys.readouterr().out
    assert code == 0 and "judged 8 matchups now" in stdout
    first = (out / "leaderboard.csv").read_text()
    assert main(argv) == 0 and "judged 0 matchups now; 8 came from the store" in capsys.readouterr().out
    assert (out / "leaderboard.csv").read_text() == first
    board = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert {r["model"] for r in board} == {"baseline-bot", "terse-bot", "helpful-bot"}
    lines = (out / "battles.jsonl").read_text().splitlines() + (out / "failures.jsonl").read_text().splitlines()
    assert len(lines) == 8
    assert "| rank | model | rating |" in stdout and "8 matchups" in stdout and "position bias: P(the answer" in stdout
    rows = [json.loads(x) for x in lines]
    assert all(r["swapped"] and (r["position_bias"] is None or abs(r["position_bias"]) <= 0.5) for r in rows)
    assert any(r["position_bias"] is not None for r in rows)
    # each battle's cost, both orders' turns together; the transformers backend reports its cache use
    judged = [r for r in rows if r["status"] == "ok"]
    assert judged and all(r["tokens"]["prompt"] > 0 and r["tokens"]["cached"] is not None for r in judged)
    assert "cost: tokens per judgment: mean" in stdout
    page = (out / "report.html").read_text()
    assert "swapped battles" in page and (out / "categories.csv").is_file()


def test_markdown_counts_follow_lmarenas_definitions():
    from brrm.arena.style import counts

    text = ("# Title\n## Part\nSome **bold** and __also bold__ words.\n1. one\n2. two\n- dash\n* star\n"
            "```\n# not a header inside code\n- nor a list\n```\n#no-space is no header")
    assert counts(text)[1:] == (2.0, 4.0, 2.0)
    assert counts("three plain words")[0] == 3.0


def test_style_control_removes_a_pure_length_preference():
    """Equal models, a judge that only prefers longer answers: the raw ratings follow length, the style-controlled
    ones are equal (the known answer) and the length coefficient is positive."""
    rng = random.Random(4)
    base = {"short": 8, "medium": 20, "long": 40}
    rows, line = [], 0
    for k in range(60):
        for m, n in base.items():
            line += 1
            words = " ".join(["w"] * max(1, n + rng.randint(-6, 6)))
            rows.append((line, {"prompt_id": f"p{k}", "model": m, "prompt": "Q?", "response": f"{words} {m}"}))

    class LengthJudge(StrengthJudge):
        def _strength(self, text: str) -> float:
            return 0.0

        def judge_pairs(self, conversations, responses_a, responses_b, /, **kw):
            out = []
            for a, b in zip(responses_a, responses_b, strict=True):
                la, lb = len(a.split()), len(b.split())
                p = 1.0 / (1.0 + math.exp(-3.0 * (la - lb) / (la + lb)))
                out.append(PairwiseJudgment(Verdict.A if p >= 0.5 else Verdict.B, Status.OK, p_a=p))
            return out

    result = run_arena(LengthJudge({}), table_from_rows(rows), round_robin=True, bootstrap=30, seed=2)
    got = {r.model: r for r in result.leaderboard.ratings}
    assert got["long"].rating - got["short"].rating > 150
    assert all(abs(r.style_rating - 1000.0) < 10.0 for r in got.values())
    assert all(r.style_lower <= r.style_rating <= r.style_upper for r in got.values())
    coefficients = dict(result.leaderboard.style)
    assert coefficients["length"] > 100 and abs(coefficients["bold"]) < 1e-6
    assert "style-controlled" in result.markdown() and "length +" in result.markdown()


def test_length_controlled_win_rate_recovers_the_glms_model_term():
    """AlpacaEval 2's GLM on a fixture with a known answer: outcomes are exactly σ(θ + φ tanh(Δ / sd Δ)) with
    θ = 0.5, so the length-controlled win rate is σ(0.5) while the raw one is inflated by the longer answers."""
    rng = random.Random(9)
    rows, texts = [], {}
    for k in range(80):
        for m, n in (("base", 60), ("verbose", 110)):
            texts[(k, m)] = "x" * (n + rng.randint(-40, 40)) + f" {m}"
            rows.append((len(rows) + 1, {"prompt_id": f"p{k}", "model": m, "prompt": "Q?",
                                         "response": texts[(k, m)]}))
    deltas = [len(texts[(k, "verbose")]) - len(texts[(k, "base")]) for k in range(80)]
    sd = float(np.std(deltas))

    class GlmJudge(StrengthJudge):
        def judge_pairs(self, conversations, responses_a, responses_b, /, **kw):
            out = []
            for a, b in zip(responses_a, responses_b, strict=True):
                v, base = (a, b) if a.endswith("verbose") else (b, a)
                p_v = 1.0 / (1.0 + math.exp(-(0.5 + 1.5 * math.tanh((len(v) - len(base)) / sd))))
                p = p_v if v is a else 1.0 - p_v
                out.append(PairwiseJudgment(Verdict.A if p >= 0.5 else Verdict.B, Status.OK, p_a=p))
            return out

    result = run_arena(GlmJudge({}), table_from_rows(rows), baseline="base", bootstrap=10, style_control=False)
    got = {r.model: r for r in result.leaderboard.ratings}
    assert got["verbose"].lc_win_rate == pytest.approx(1.0 / (1.0 + math.exp(-0.5)), abs=0.005)
    assert got["verbose"].win_rate > got["verbose"].lc_win_rate + 0.1
    assert math.isnan(got["base"].lc_win_rate)
    assert "LC win rate" in result.markdown() and "style-controlled" not in result.markdown()


def test_ratings_by_category_are_fitted_and_written(tmp_path):
    table = table_from_rows(_rows(["weak", "mid", "strong"], 20))
    result = run_arena(StrengthJudge(STRENGTHS), table, baseline="mid", bootstrap=10)
    assert [c.category for c in result.categories] == ["chat", "math"]
    for c in result.categories:
        assert c.leaderboard is not None and c.leaderboard.judgments == 20
        assert [r.model for r in c.leaderboard.ratings] == ["strong", "mid", "weak"]
    rows = list(csv.DictReader(result.write(tmp_path)["categories"].open()))
    assert len(rows) == 6 and {r["category"] for r in rows} == {"chat", "math"}
    assert "category chat (20 judgments): strong" in result.markdown()


def test_the_report_shows_the_plots_the_bias_and_the_failures(tmp_path):
    rows = _rows(["weak", "mid", "strong"], 6)
    rows[0][1]["response"] = "FAIL weak"
    result = run_arena(StrengthJudge(STRENGTHS), table_from_rows(rows), round_robin=True, bootstrap=10)
    page = result.write(tmp_path)["report"].read_text()
    assert page.count("data:image/png;base64,") == 2  # forest plot and heatmap
    assert "Style control" in page and "Ratings by category" in page and "parse_failure 2" in page
    from brrm.arena.report import win_matrix

    m = win_matrix(result.battles, ["weak", "strong"], "soft")
    assert math.isnan(m[0][0]) and m[0][1] == pytest.approx(1 / (1 + math.exp(2.0))) and m[1][0] + m[0][1] == 1.0


class SteadyJudge(StrengthJudge):
    """Deterministic verdicts (the likelier side wins), so a resumed run and an uninterrupted one agree; counts
    the pairs it judges and can be told to die (KeyboardInterrupt, like a SIGTERM) after some chunks."""

    def __init__(self, strengths: dict[str, float], die_after: int | None = None) -> None:
        super().__init__(strengths)
        self.judged = 0
        self.die_after = die_after

    def judge_pairs(self, conversations, responses_a, responses_b, /, **kw):
        if self.die_after is not None and self.judged >= self.die_after:
            raise KeyboardInterrupt
        out = super().judge_pairs(conversations, responses_a, responses_b, **kw)
        self.judged += len(out)
        return [PairwiseJudgment(Verdict.A if j.p_a >= 0.5 else Verdict.B, Status.OK, p_a=j.p_a, consistent=True)
                if j.ok else j for j in out]


def test_kill_and_resume_gives_the_identical_leaderboard_and_a_second_run_judges_nothing(tmp_path):
    table = table_from_rows(_rows(list(STRENGTHS), 40))  # 240 round-robin matchups, judged in chunks of 64
    whole = run_arena(SteadyJudge(STRENGTHS), table, round_robin=True, bootstrap=20)
    dying = SteadyJudge(STRENGTHS, die_after=128)
    with pytest.raises(KeyboardInterrupt):
        run_arena(dying, table, round_robin=True, bootstrap=20, store=tmp_path)
    assert dying.judged == 128
    resumed = SteadyJudge(STRENGTHS)
    again = run_arena(resumed, table, round_robin=True, bootstrap=20, store=tmp_path)
    assert resumed.judged == 240 - 128
    assert again.leaderboard == whole.leaderboard and again.battles == whole.battles
    idle = SteadyJudge(STRENGTHS)
    third = run_arena(idle, table, round_robin=True, bootstrap=20, store=tmp_path)
    assert idle.judged == 0 and third.leaderboard == whole.leaderboard
    other = SteadyJudge(STRENGTHS)  # one order only is another configuration: judged afresh
    run_arena(other, table, round_robin=True, bootstrap=20, store=tmp_path, swap=False)
    assert other.judged == 240


class HashedJudge(StrengthJudge):
    """Hard verdicts drawn from P = σ(s_A − s_B) by a hash of the pair's texts: the same pair always gets the same
    verdict whatever the order of calls (an adaptive run and the full grid see the same battles)."""

    def judge_pairs(self, conversations, responses_a, responses_b, /, **kw):
        import hashlib

        out = []
        for a, b in zip(responses_a, responses_b, strict=True):
            p = 1.0 / (1.0 + math.exp(self._strength(b) - self._strength(a)))
            u = int(hashlib.sha256(f"{a}|{b}".encode()).hexdigest()[:12], 16) / 16**12
            out.append(PairwiseJudgment(Verdict.A if u < p else Verdict.B, Status.OK, p_a=p))
        self.judged = getattr(self, "judged", 0) + len(out)
        return out


def test_adaptive_pairing_recovers_the_order_with_fewer_judgments_than_the_grid():
    strengths = {f"m{k}": 1.2 * k for k in range(5)}
    table = table_from_rows(_rows(list(strengths), 80))  # grid: 10 pairs x 80 prompts = 800
    judge = HashedJudge(strengths)
    result = run_arena(judge, table, adaptive=True, outcomes="hard", bootstrap=40, style_control=False)
    run = result.adaptive
    assert run is not None and run.stopped == "separated" and run.grid == 800
    assert run.judged == judge.judged == len(result.battles) < 800 / 3
    assert [r.model for r in result.leaderboard.ratings] == [f"m{k}" for k in range(4, -1, -1)]
    assert "adaptive: " in result.markdown()
    budgeted = run_arena(HashedJudge(strengths), table, adaptive=True, outcomes="hard", bootstrap=20, budget=30,
                         style_control=False)
    assert budgeted.adaptive is not None and budgeted.adaptive.stopped == "budget" and budgeted.adaptive.judged == 30
    with pytest.raises(ConfigError, match="--adaptive chooses its own pairs"):
        run_arena(judge, table, adaptive=True, baseline="m0")


@pytest.mark.parametrize(("extra", "message"), [
    ([], "--baseline MODEL is needed for the baseline pairing (or pass --round-robin)"),
    (["--baseline", "nobody"], "--baseline 'nobody' is not a model"),
    (["--round-robin", "--budget", "5"], "--budget and --target-ci apply to --adaptive"),
    (["--adaptive", "--target-ci", "0"], "--target-ci must be > 0"),
    (["--round-robin", "--anchor", "x"], "--anchor 'x' is not a model"),
    (["--round-robin", "--bootstrap", "3"], "--bootstrap must be an integer >= 10"),
])
def test_cli_mistakes_are_one_line_naming_the_flag_before_a_model_loads(capsys, extra, message):
    from brrm.cli import main

    assert main(["arena", "--input", str(REPO / "examples/arena.jsonl"), "--model", "/nonexistent", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_95_percent_intervals_cover_the_true_ratings_in_about_95_percent_of_seeded_trials():
    true = {"a": -0.5, "b": 0.0, "c": 0.7}
    hits = total = 0
    for trial in range(30):
        rng = random.Random(trial)
        battles = []
        for k in range(60):
            for x, y in (("a", "b"), ("b", "c"), ("a", "c")):
                p = 1 / (1 + math.exp(true[y] - true[x]))
                battles.append(Battle(f"p{k}", "", x, y, "ok", "", "model_a" if rng.random() < p else "model_b",
                                      math.nan, None, False, "j", ""))
        board = fit(battles, ["a", "b", "c"], outcomes="hard", anchor="b", bootstrap=60, seed=trial)
        for r in board.ratings:
            if r.model != "b":
                total += 1
                hits += r.lower <= 1000 + 400 / math.log(10) * true[r.model] <= r.upper
    assert 0.85 <= hits / total <= 1.0, (hits, total)


def test_parquet_and_arena_hard_folders_read_as_the_long_table(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [r for _, r in _rows(["weak", "mid"], 3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "arena.parquet")
    table = read_table(tmp_path / "arena.parquet")
    assert len(table.answers) == 6 and table.prompts["p1"].category == "math"
    # Arena-Hard-Auto v2.0: the prompt inside each answer's messages, categories from question.jsonl
    v2 = tmp_path / "v2"
    (v2 / "model_answer").mkdir(parents=True)
    for m in ("base", "new"):
        (v2 / "model_answer" / f"{m}.jsonl").write_text("".join(json.dumps(
            {"uid": f"q{k}", "ans_id": "x", "model": m, "messages": [
                {"role": "user", "content": f"Question {k}?"},
                {"role": "assistant", "content": {"answer": f"{m} says {k}"}}], "tstamp": 0.0}) + "\n"
            for k in range(2)) + ("{broken\n" if m == "new" else ""))
    (v2 / "question.jsonl").write_text(json.dumps({"uid": "q0", "category": "hard_prompt", "prompt": "Q0?"}) + "\n")
    table = read_table(v2)
    assert table.models == ("base", "new") and table.answer("q1", "new").response == "new says 1"
    assert table.prompts["q0"].text == "Question 0?" and table.prompts["q0"].category == "hard_prompt"
    assert [e.reason.split(":")[1].strip() for e in table.errors] == ["new.jsonl line 3"]
    # v0.1: answers in choices, the prompt in question.jsonl
    v01 = tmp_path / "v01"
    (v01 / "model_answer").mkdir(parents=True)
    for m in ("gpt-4-0314", "mine"):
        (v01 / "model_answer" / f"{m}.jsonl").write_text(json.dumps(
            {"question_id": "a1", "answer_id": "z", "model_id": m,
             "choices": [{"index": 0, "turns": [{"content": f"answer of {m}"}]}]}) + "\n")
    (v01 / "question.jsonl").write_text(json.dumps(
        {"question_id": "a1", "category": "arena-hard-v0.1", "cluster": "c", "turns": [{"content": "Hi?"}]}) + "\n")
    table = read_table(v01)
    assert table.prompts["a1"].text == "Hi?" and table.answer("a1", "mine").response == "answer of mine"


def test_a_scalar_bradley_terry_judge_rates_without_swap(tmp_path):
    """A real tiny Bradley-Terry reward model (brrm.testing): each answer scored once, P(A ≻ B) = σ(r_A − r_B)."""
    import brrm
    from brrm.testing import save_tiny_qwen3

    rm = brrm.load(str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)), kind="bt")
    assert not rm.info.pairwise
    result = run_arena(rm, REPO / "examples/arena.jsonl", baseline="baseline-bot", bootstrap=20)
    assert len(result.battles) == 16 and all(b.ok and not b.swapped and 0 <= b.p_a <= 1 for b in result.battles)
    assert all(b.consistent is None and math.isnan(b.position_bias) for b in result.battles)
    assert {r.model for r in result.leaderboard.ratings} == {"baseline-bot", "terse-bot", "helpful-bot"}


def test_the_embedded_demo_writes_the_arena_outputs_on_one_prompt(tmp_path, capsys):
    """The README's command with the embedded demo judge (no --model), on the example's first prompt and its first
    two models (1 matchup in one order; three models, 16 matchups and both orders run on a tiny Qwen3 above) with
    free-text blocks capped at 8 tokens, not the demo's 32 (the model's real path in a fraction of the time):
    leaderboard, battles and report written; the whole example at the demo's budgets takes minutes (about three on
    an idle 2-core box)."""
    from brrm.cli import main

    one = tmp_path / "one.jsonl"
    one.write_text("".join((REPO / "examples/arena.jsonl").read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "out"
    code = main(["arena", "--input", str(one), "--baseline", "baseline-bot", "--output", str(out), "--no-progress",
                 "--bootstrap", "20", "--block-token-cap", "8", "--single-order"])
    stdout = capsys.readouterr().out
    assert code == 0 and "embedded demo" in stdout and "judged 1 matchups now" in stdout
    board = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert {r["model"] for r in board} == {"baseline-bot", "terse-bot"}
    rows = (out / "battles.jsonl").read_text().splitlines() + (out / "failures.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["model_a"] in {"baseline-bot", "terse-bot"}
    assert "not measured (one order only" in (out / "report.html").read_text()  # position bias needs both orders
