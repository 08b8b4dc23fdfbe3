"""Each benchmark's protocol and official metric, checked with synthetic judges whose answers are known.

The judges are small RewardJudge implementations built through the compose layer (an ordered-pair judge wrapped by
:class:`brrm.compose.PairwiseRewardJudge`, a scalar model by :class:`brrm.compose.ScalarRewardJudge`): always "1",
always "2", always correct, always a parse failure, always a tie, and a constant-reward scalar model. Each gives
the score its benchmark's official protocol implies. Cases: N18 (MT-Bench agreement with inconsistent votes), N20
(ties in preference accuracy), C27 (ties in aggregation); the released BR-RM RM-Bench scorer's always-"2" flaw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from brrm.bench import get_benchmark
from brrm.bench.core import BenchItem, ItemResult, Pair, Shown, ok_judgment, random_swap
from brrm.bench.runner import run
from brrm.compose import PairwiseRewardJudge, ScalarRewardJudge, rank_by_win_rate
from brrm.types import JudgeInfo, PairwiseJudgment, ScalarReward, Status, Verdict

FIXTURES = Path(__file__).parent / "fixtures"
REWARDBENCH = FIXTURES / "reward-bench"

Decide = Callable[[Any, str, str], Verdict]


def _info(kind: str) -> JudgeInfo:
    return JudgeInfo(model=f"synthetic-{kind}", kind=kind, recipe="synthetic", backend="fake", chat_template_hash="",
                     template_hash="", default_strategy="round_robin" if kind == "brrm" else "scores",
                     chunk_size=100_000)


class OrderedJudge:
    """An ordered-pair judge whose verdict (in the presented frame) is ``decide(conversation, first, second)``;
    ``Verdict.NONE`` becomes a parse failure."""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self.info = _info("brrm")
        self.calls = 0

    def judge_ordered(self, conversations: Sequence[Any], first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None, progress: Any = None) -> list[PairwiseJudgment]:
        self.calls += len(first)
        out = []
        for c, a, b in zip(conversations, first, second, strict=True):
            v = self.decide(c, a, b)
            failed = PairwiseJudgment(Verdict.NONE, Status.PARSE_FAILURE, "no ranking block", generated_tokens=3)
            out.append(PairwiseJudgment(v, Status.OK, generated_tokens=3, prompt_tokens=10) if v is not Verdict.NONE
                       else failed)
        if progress:
            progress(float(len(out)))
        return out

    def close(self) -> None:
        pass


class ConstantScorer:
    """A scalar reward model giving every response the same reward (the N20 degenerate model)."""

    def __init__(self, value: float = 0.25) -> None:
        self.value = value
        self.info = _info("bt")

    def score(self, conversations: Sequence[Any], responses: Sequence[str], /, *, principles: Any = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        return [ScalarReward(self.value, Status.OK, input_tokens=5) for _ in responses]

    def close(self) -> None:
        pass


def oracle(items: Sequence[BenchItem]) -> Decide:
    """Always correct: the gold verdict of the pair shown, in the presented frame (ties where the gold is a tie)."""
    table: dict[tuple[int, str, str], Verdict] = {}
    for it in items:
        for p in it.pairs:
            a, b = it.responses[p.i], it.responses[p.j]
            table[(id(it.conversation), a, b)] = p.gold
            table.setdefault((id(it.conversation), b, a), p.gold.mirrored())
    return lambda conv, first, second: table[(id(conv), first, second)]


def synthetic(name: str, items: Sequence[BenchItem]) -> Any:
    """A RewardJudge that always answers "1", "2", correctly, with a parse failure, or a tie."""
    decide: dict[str, Decide] = {
        "always-1": lambda c, a, b: Verdict.A,
        "always-2": lambda c, a, b: Verdict.B,
        "failure": lambda c, a, b: Verdict.NONE,
        "tie": lambda c, a, b: Verdict.TIE,
    }
    return PairwiseRewardJudge(OrderedJudge(oracle(items) if name == "correct" else decide[name]))


def constant_scalar() -> ScalarRewardJudge:
    return ScalarRewardJudge(ConstantScorer())


JUDGES = ("always-1", "always-2", "correct", "failure", "tie")
LIMITS = {"rmb": 120}  # per part; every other benchmark runs whole
_ITEMS: dict[str, list[BenchItem]] = {}


def items_of(name: str, shared: Path) -> list[BenchItem]:
    """The benchmark's items (loaded once per session)."""
    if name not in _ITEMS:
        bench = get_benchmark(name)
        source = str(REWARDBENCH) if name == "rewardbench" else None
        _ITEMS[name] = bench.load(bench.resolve_subsets(None), root=shared / "data", limit=LIMITS.get(name),
                                  source=source)
    return _ITEMS[name]


def scored(name: str, judge_name: str, shared: Path, *, orders: str | None = None, **options: Any) -> Any:
    bench = get_benchmark(name, **options)
    items = items_of(name, shared)
    judge = constant_scalar() if judge_name == "constant" else synthetic(judge_name, items)
    results, _ = run(judge, items, orders=bench.orders(orders), seed=0)
    return bench.score(results), results


def first_shown_share(items: Sequence[BenchItem], *, every_pair: bool = False) -> list[float]:
    """Per item: the share of its pairs (or 1.0 if all, with every_pair) shown with the better response first."""
    out = []
    for it in items:
        firsts = [not random_swap(0, it.id, k) for k in range(len(it.pairs))]
        out.append(float(all(firsts)) if every_pair else sum(firsts) / len(firsts))
    return out


@pytest.mark.parametrize("judge_name", JUDGES)
def test_llmbar_and_mt_bench_score_each_order_alone(shared, judge_name):
    """Both orders are judged and each is scored against the label: a position-biased judge is right exactly
    once per pair (50%), two failed orders are 'equal' as the official script counts them."""
    expected = {"always-1": (50.0, 0.0), "always-2": (50.0, 0.0), "correct": (100.0, 100.0), "failure": (0.0, 100.0),
                "tie": (0.0, 100.0)}[judge_name]
    for name in ("llmbar", "mt-bench"):
        result, results = scored(name, judge_name, shared)
        for r in result.rows:
            assert (r.score, r.extra.get("equal", expected[1])) == expected, (name, r.name)
        n = len(results)
        assert result.rows[-1].n == (n if name == "mt-bench" else 419 - 100)
        subset_rows = [r for r in result.rows if r.name != "Adversarial"]
        assert sum(r.failures for r in subset_rows) == (2 * n if judge_name == "failure" else 0)
        assert sum(r.ties for r in subset_rows) == (2 * n if judge_name == "tie" else 0)
    assert scored("llmbar", judge_name, shared)[0].headline == "Adversarial"


@pytest.mark.parametrize("judge_name", JUDGES)
def test_judgebench_two_game_rule(shared, judge_name):
    """A position-biased, failing or tying judge never gets a pair right (the games cancel); an oracle gets all."""
    result, results = scored("judgebench", judge_name, shared)
    assert len(results) == 350 + 270 and result.headline == "gpt-4o/Overall"
    same = [r.item for r in results if r.item.responses[0] == r.item.responses[1]]
    assert [(it.subset, it.meta["source"]) for it in same] == [("claude", "livecodebench")]  # no judge can tell them
    want = 100.0 if judge_name == "correct" else 0.0
    assert all(r.score == want for r in result.rows if r.name not in ("claude/Coding", "claude/Overall"))
    assert result.row("claude/Overall").score == (100 * 269 / 270 if judge_name == "correct" else 0.0)
    assert result.row("gpt-4o/Overall").n == 350 and result.row("claude/Overall").n == 270


def test_rm_bench_position_bias_is_not_accuracy(shared):
    """The released BR-RM scorer gives an always-"2" judge 100%; brrm maps each verdict back through the order
    it was shown in, so always-"1" and always-"2" split the comparisons between them (sum 100 in every domain)."""
    one, results = scored("rm-bench", "always-1", shared)
    two, _ = scored("rm-bench", "always-2", shared)
    domains = ("chat", "code", "safety")
    assert [r.name for r in one.rows] == [*domains, "Easy", "Normal", "Hard", "Overall"]
    for d in domains:
        part = [it.item for it in results if it.item.meta["domain"] == d]
        assert one.row(d).score == pytest.approx(100 * sum(first_shown_share(part)) / len(part), abs=1e-9)
        assert one.row(d).score + two.row(d).score == pytest.approx(100.0, abs=1e-9)
    assert 40 < two.overall < 60 and two.overall != 100.0
    assert one.row("safety").n == 284 + 157 and one.row("chat").n == 129
    assert any("math" in note for note in one.notes)  # the shared copy has no math file: said, not hidden
    matrix = one.row("chat").extra["matrix"]
    assert one.row("chat").extra["hard"] == pytest.approx(100 * (matrix[0][1] + matrix[0][2] + matrix[1][2]) / 3)


@pytest.mark.parametrize(("judge_name", "want", "failures"), [("correct", 100.0, 0), ("tie", 0.0, 0),
                                                               ("failure", 0.0, 9)])
def test_rm_bench_ties_and_failures_are_wrong_and_counted(shared, judge_name, want, failures):
    result, results = scored("rm-bench", judge_name, shared)
    assert all(r.score == want for r in result.rows)
    assert result.row("chat").failures == failures * 129
    assert result.row("chat").ties == (9 * 129 if judge_name == "tie" else 0)


def test_rm_bench_both_orders_turn_position_bias_into_ties(shared):
    result, _ = scored("rm-bench", "always-1", shared, orders="both")
    assert result.overall == 0.0 and result.row("chat").ties == 9 * 129


@pytest.mark.parametrize("judge_name", JUDGES)
def test_rmb_pairwise_and_best_of_n(shared, judge_name):
    """Pairwise: the chosen response must win; best-of-N: the best must win every comparison of its list."""
    result, results = scored("rmb", judge_name, shared)
    parts = ("pairwise-helpfulness", "pairwise-harmlessness", "bon-helpfulness", "bon-harmlessness")
    assert [r.name for r in result.rows] == [*parts, "Overall"]
    for part in parts:
        items = [r.item for r in results if r.item.subset == part]
        assert len(items) == 120
        share = first_shown_share(items, every_pair=True)
        reverse = [float(all(random_swap(0, it.id, k) for k in range(len(it.pairs)))) for it in items]
        want = {"always-1": 100 * sum(share) / 120, "always-2": 100 * sum(reverse) / 120, "correct": 100.0,
                "failure": 0.0, "tie": 0.0}[judge_name]
        assert result.row(part).score == pytest.approx(want, abs=1e-9)
    assert result.overall == pytest.approx(sum(result.row(p).score for p in parts) / 4)
    if judge_name in ("always-1", "always-2"):
        pair_sum = result.row(parts[0]).score + scored("rmb", "always-" + ("2" if judge_name[-1] == "1" else "1"),
                                                       shared)[0].row(parts[0]).score
        assert pair_sum == pytest.approx(100.0)


@pytest.mark.parametrize(("judge_name", "agreement", "consistency"), [
    ("always-1", 0.0, 0.0), ("always-2", 0.0, 0.0), ("correct", 100.0, 100.0),
    ("failure", 0.0, 0.0), ("tie", 100 * 373 / 1392, 100.0)])
def test_autoj_agreement_needs_both_orders_and_counts_ties_as_labels(shared, judge_name, agreement, consistency):
    result, results = scored("autoj", judge_name, shared)
    overall = result.row("Overall")
    undecidable = [r.item.id for r in results if len(set(r.item.responses)) == 1 and r.item.pairs[0].gold != "tie"]
    assert undecidable == ["autoj/1280"]  # identical responses labelled "2 better": no judge can agree
    if judge_name == "correct":
        agreement = consistency = 100 * 1391 / 1392
    assert overall.n == 1392 and overall.score == pytest.approx(agreement)
    assert overall.extra["consistency"] == pytest.approx(consistency)
    assert overall.failures == (2 * 1392 if judge_name == "failure" else 0)
    assert [r.name for r in result.rows][:2] == ["Summarization", "Exam Questions"]


def test_autoj_scalar_model_is_type_single_with_margin_ties(shared):
    result, _ = scored("autoj", "constant", shared)
    assert result.overall == pytest.approx(100 * 373 / 1392)  # equal rewards are a predicted tie (margin 0)
    assert result.row("Overall").extra["consistency"] is None and "'single'" in result.metric


@pytest.mark.parametrize(("judge_name", "want"), [("always-1", 422), ("always-2", 472), ("tie", 105), ("correct", 999),
                                                  ("failure", 0)])
def test_pandalm_three_way_labels(shared, judge_name, want):
    """Labels are the annotators' majority (105 ties / 422 / 472, SOURCE.md); the test set's order is shown."""
    result, _ = scored("pandalm", judge_name, shared)
    assert result.overall == pytest.approx(100 * want / 999)
    assert result.row("Overall").failures == (999 if judge_name == "failure" else 0)


@pytest.mark.parametrize("judge_name", JUDGES)
def test_rewardbench_generative_ties_and_failures_earn_half(shared, judge_name):
    """Official: a generative tie or unparsed answer is 0.5 ("effectively a tie"); BR-RM's unweighted scorer
    gives it 0. Sections weight subsets by EXAMPLE_COUNTS; Overall is the mean of the four sections."""
    result, results = scored("rewardbench", judge_name, shared)
    assert len(results) == 46 and len(result.rows) == 23 + 4 + 1
    if judge_name in ("tie", "failure", "correct"):
        want = 100.0 if judge_name == "correct" else 50.0
        assert all(r.score == want for r in result.rows)
        unweighted, _ = scored("rewardbench", judge_name, shared, weighting="unweighted")
        assert unweighted.overall == (100.0 if judge_name == "correct" else 0.0)
    else:
        other, _ = scored("rewardbench", "always-2" if judge_name == "always-1" else "always-1", shared)
        for r in result.rows[:23]:
            assert r.score + other.row(r.name).score == pytest.approx(100.0)
        chat = [r for r in results if r.item.subset in ("alpacaeval-easy", "alpacaeval-length")]
        assert result.row("alpacaeval-easy").score == pytest.approx(
            100 * sum(first_shown_share([r.item for r in chat[:2]])) / 2)


def test_rewardbench_section_weights_are_the_official_counts(shared):
    """math-prm weighs 984 against the six hep subsets' 164 each; unweighted means over items instead."""
    bench = get_benchmark("rewardbench")
    items = items_of("rewardbench", shared)
    judge = synthetic("correct", items)
    results, _ = run(judge, items, orders="random")
    wrong_math = [ItemResult(r.item, tuple(Shown(s.pair, s.swapped, ok_judgment(s.judgment.winner.mirrored()))
                                             for s in r.shown)) if r.item.subset == "math-prm" else r for r in results]
    official = bench.score(wrong_math)
    assert official.row("math-prm").score == 0.0
    assert official.row("Reasoning").score == pytest.approx(100 * 6 * 164 / (984 + 6 * 164))
    assert get_benchmark("rewardbench", weighting="unweighted").score(wrong_math).row("Reasoning").score == \
        pytest.approx(100 * 12 / 14)
    assert official.overall == pytest.approx((100 + 100 + 100 + 50) / 4)


def test_n20_constant_reward_model_scores_zero_with_ties_reported(shared, tiny):
    """N20: a reward model that gives chosen and rejected the same score is not accurate: RewardBench counts a
    scalar tie as wrong (strict >), and the report counts the ties with a warning."""
    from brrm import load
    from brrm.backends.fake import FakeBackend

    _, tok = tiny
    judge = load(kind="bt", backend=FakeBackend(tok, score_script=lambda prompt: 0.25))
    bench = get_benchmark("rewardbench")
    items = bench.load(bench.resolve_subsets(["chat"]), source=str(REWARDBENCH))  # 5 subsets x 2 = 10 rows
    results, cost = run(judge, items, orders=bench.orders(None))
    result = bench.score(results)
    assert len(items) == 10 and cost.judgments == 20  # one reward per response
    assert result.row("Chat").score == 0.0 and result.row("Chat").ties == 10 and result.overall == 0.0
    assert any("equal rewards" in note for note in result.notes)


T1 = ("[Quality Assessment Focus]\nInformation Accuracy\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: None identified\n"
      "[End of Quality Analysis for Response 2]")


def test_n20_generative_ties_and_failures_earn_half_and_are_counted(tmp_path, tiny):
    """N20: a BR-RM judge (scripted backend, both orders) ties 4 of 10 pairs (the orders disagree) and fails on 1:
    the official accuracy is (wins + 0.5 * (ties + failures)) / 10, with the counts next to it."""
    from brrm import load
    from brrm.backends.fake import FakeBackend

    rows = [{"prompt": f"Question {k}?", "chosen": f"good answer {k}", "rejected": f"bad answer {k}",
             "chosen_model": "x", "rejected_model": "y", "subset": "alpacaeval-easy", "id": k} for k in range(10)]
    data = tmp_path / "rb.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def script(prompt: str, request: Any) -> str:
        if "Evaluation Hierarchies" not in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return T1
        first = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]
        k = int(first.rsplit(" ", 1)[1])
        if k == 4:
            return "Both are fine."  # no ranking block: a parse failure
        digit = 1 if k < 4 or first.startswith("good") else 2  # k < 4: always "1", so the two orders disagree
        return f"[The Begin of Ranking Score]\n\\boxed{{{digit}}}\n[The End of Ranking Score]"

    _, tok = tiny
    judge = load(kind="brrm", backend=FakeBackend(tok, script), decoding="faithful")
    bench = get_benchmark("rewardbench")
    items = bench.load(("alpacaeval-easy",), source=str(data))
    results, cost = run(judge, items, orders=bench.orders("both"))
    subset = bench.score(results).row("alpacaeval-easy")
    wins = sum(r.verdict(0) is Verdict.A for r in results)
    assert (wins, subset.ties, subset.failures, cost.judgments) == (5, 4, 1, 20)
    assert subset.score == pytest.approx(100 * (wins + 0.5 * (subset.ties + subset.failures)) / 10) == 75.0
    assert subset.extra["strict_accuracy"] == 50.0  # brrm's strict figure, labelled as such in extra


def test_n18_mt_bench_agreement_counts_inconsistent_votes_as_ties(tmp_path):
    """N18: q81 consistent gpt-4 (2 expert rows, one in the swapped model order), q82 position-inconsistent ->
    'tie (inconsistent)', q83 consistent gpt-4 against an expert's alpaca: 3/4 with ties, 2/3 without."""
    def rec(qid, a, b, winner, judge):
        conv = {m: [{"role": "user", "content": f"Question {qid}"},
                    {"role": "assistant", "content": f"{m} answer {qid}"}] for m in (a, b)}
        return {"question_id": qid, "model_a": a, "model_b": b, "winner": winner, "judge": judge, "turn": 1,
                "conversation_a": conv[a], "conversation_b": conv[b]}

    rows = [rec(81, "alpaca-13b", "gpt-4", "model_b", "expert_0"),
            rec(81, "gpt-4", "alpaca-13b", "model_a", "expert_1"), rec(82, "alpaca-13b", "gpt-4", "tie", "expert_0"),
            rec(83, "alpaca-13b", "gpt-4", "model_a", "expert_0"),
            {**rec(83, "alpaca-13b", "gpt-4", "model_a", "expert_0"), "turn": 2}]
    path = tmp_path / "human.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    orders = {81: {"ab": Verdict.B, "ba": Verdict.A}, 82: {"ab": Verdict.A, "ba": Verdict.A},
              83: {"ab": Verdict.B, "ba": Verdict.A}}

    def decide(conv: Any, first: str, second: str) -> Verdict:
        qid = int(first.rsplit(" ", 1)[1])
        return orders[qid]["ab" if first.startswith("alpaca") else "ba"]

    bench = get_benchmark("mt-bench")
    items = bench.load(bench.resolve_subsets(["human"]), source=str(path))
    assert [it.meta["votes"] for it in items] == [["model_b", "model_b"], ["tie"], ["model_a"]]
    results, _ = run(PairwiseRewardJudge(OrderedJudge(decide)), items, orders=bench.orders(None))
    result = bench.score(results)
    with_tie, without = result.row("human turn 1 (with tie)"), result.row("human turn 1 (without tie)")
    assert (with_tie.extra["agree"], with_tie.extra["total"], with_tie.score) == (3, 4, 75.0)
    assert (without.extra["agree"], without.extra["total"]) == (2, 3)
    assert without.score == pytest.approx(200 / 3)
    assert any("1 turn-2 vote rows skipped" in n for n in result.notes)


def test_c27_ties_count_half_and_raw_counts_are_kept():
    """C27: model_x (40 wins, 60 losses) and model_y (40 wins, 60 ties): the official generative RewardBench
    credit is the adjusted win rate, 0.40 vs 0.70, so y ranks first; the ties are reported next to it."""
    bench = get_benchmark("rewardbench")

    def results(losses_are_ties: bool) -> list[ItemResult]:
        out = []
        for k in range(100):
            item = BenchItem(str(k), "alpacaeval-easy", "p", ("c", "r"), (Pair(0, 1, Verdict.A),))
            winner = Verdict.A if k < 40 else (Verdict.TIE if losses_are_ties else Verdict.B)
            out.append(ItemResult(item, (Shown(0, False, ok_judgment(winner)),)))
        return out

    x, y = bench.score(results(False)).row("alpacaeval-easy"), bench.score(results(True)).row("alpacaeval-easy")
    assert (x.score, x.ties, y.score, y.ties) == (40.0, 0, 70.0, 60)
    ranked = rank_by_win_rate({"model_x": {"win": 40, "tie": 0, "loss": 60}, "model_y": {"win": 40, "tie": 60,
                                                                                         "loss": 0}})
    assert [r["name"] for r in ranked] == ["model_y", "model_x"]
    assert [100 * r["win_rate"] for r in ranked] == pytest.approx([y.score, x.score])


def test_random_orders_do_not_depend_on_chunks_or_selection(shared):
    """A result depends only on the item and the seeds: chunk size and the other items change nothing."""
    items = items_of("rm-bench", shared)[:6]
    small = synthetic("always-1", items)
    small.info = replace(small.info, chunk_size=1)
    a, _ = run(small, items, orders="random", seed=3)
    b, _ = run(synthetic("always-1", items), items[3:], orders="random", seed=3)
    assert [s.swapped for r in a[3:] for s in r.shown] == [s.swapped for r in b for s in r.shown]
    assert [s.swapped for r in a for s in r.shown] != [s.swapped for r in run(
        synthetic("always-1", items), items, orders="random", seed=4)[0] for s in r.shown]
    assert not math.isnan(get_benchmark("rm-bench").score(a).overall)


def test_evaluate_runs_a_judge_from_python(shared):
    """The Python entry point: load, protocol, run and metric in one call, with the cost and the judge's info."""
    from brrm.bench import evaluate

    judge = synthetic("always-2", items_of("pandalm", shared))
    result = evaluate(get_benchmark("pandalm"), judge, limit=20, data_dir=str(shared / "data"))
    first20 = items_of("pandalm", shared)[:20]
    assert result.overall == pytest.approx(100 * sum(it.pairs[0].gold is Verdict.B for it in first20) / 20)
    assert result.cost is not None and result.cost.judgments == 20 and result.cost.generated_tokens == 60
    assert result.judge["model"] == "synthetic-brrm" and result.to_dict()["cost"]["judgments"] == 20
