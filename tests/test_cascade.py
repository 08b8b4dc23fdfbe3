"""The judge cascade (issue 48.1): a first judge decides alone where it is confident, a second judge decides the
rest. Scripted judges of known behaviour: a real Bradley–Terry judge over a scripted classifier (reward = the number
in the response, ``BOOM`` a backend error) and a scripted ordered-pair judge (BR-RM's interface) whose verdicts and
P(A ≻ B) are set per pair; both count the model calls they make."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.compose import PairwiseRewardJudge
from brrm.compose.cascade import CascadeJudge, Confidence, described_cost, escalation_rate
from brrm.errors import ConfigError
from brrm.testing import build_tiny_tokenizer
from brrm.testing.scripted import ScriptedOrdered
from brrm.types import PairwiseJudgment, Status, Verdict
from brrm.types.cascade import CascadeRule, CascadeStage, CascadeWhy
from brrm.types.codec import judgment_from_dict, reward_from_dict
from brrm.types.cost import CascadeCost

CONV = [{"role": "user", "content": "which is better?"}]


def _reward(prompt: str) -> float | Exception:
    """The scripted classifier: the last ``r<number>`` of the prompt is the reward; ``BOOM`` fails."""
    if "BOOM" in prompt:
        return RuntimeError("scripted classifier failure")
    return float(re.findall(r"r(-?\d+(?:\.\d+)?)", prompt)[-1])


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A tiny random-weight Qwen3 folder (read as BR-RM, or as a Bradley–Terry model through vocabulary logit 0)."""
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "tiny"))


def _bt(tokenizer: Any, **options: Any) -> tuple[brrm.RewardJudge, FakeBackend]:
    backend = FakeBackend(tokenizer, score_script=_reward)
    return brrm.load(kind="bt", backend=backend, **options), backend


Ordered = ScriptedOrdered
"""A scripted ordered-pair judge: ``table[(first, second)] = (verdict in the shown frame, P(first ≻ second))``;
a pair not in the table: response 1 wins with P 0.9. ``calls`` counts ordered judgments (one per model run)."""


# margins r_A - r_B: 3, -2.5, 1.5 (outside m = 1), 0.5, -0.2, 0.9 (inside), and a first-stage failure (BOOM)
PAIRS = [("r4", "r1"), ("r1", "r3.5"), ("r2", "r0.5"), ("r1", "r0.5"), ("r0.8", "r1"), ("r1.9", "r1"),
         ("BOOM r1", "r2")]
INSIDE = [3, 4, 5]
FAILED = [6]


def _pairs() -> tuple[list[Any], list[str], list[str]]:
    return [CONV] * len(PAIRS), [a for a, _ in PAIRS], [b for _, b in PAIRS]


def test_margin_escalates_exactly_the_items_inside_and_the_failure(tokenizer):
    first, backend = _bt(tokenizer)
    ordered = Ordered()
    judge = CascadeJudge(first, PairwiseRewardJudge(ordered), Confidence.of(margin=1.0))
    out = judge.judge_pairs(*_pairs(), ids=[f"p{i}" for i in range(len(PAIRS))])
    escalated = [i for i, j in enumerate(out) if j.cascade is not None and j.cascade.escalated]
    assert escalated == INSIDE + FAILED and ordered.calls == len(escalated)
    whys = [j.cascade.why for j in out if j.cascade is not None]
    assert whys == [CascadeWhy.CONFIDENT] * 3 + [CascadeWhy.UNCERTAIN] * 3 + [CascadeWhy.FIRST_FAILED]
    for i in (0, 1, 2):  # the first stage's own judgment: its winner, σ(r_A - r_B), its provenance
        c = out[i].cascade
        assert c is not None and c.stage is CascadeStage.FIRST and c.first is None and c.rule is CascadeRule.MARGIN
        assert out[i].provenance is not None and out[i].provenance.backend == "fake"
    assert [out[i].winner for i in range(3)] == [Verdict.A, Verdict.B, Verdict.A]
    assert out[0].cascade.measure == pytest.approx(3.0) and out[0].cascade.detail == "|r_A - r_B| = 3 > 1"
    assert out[3].cascade.measure == pytest.approx(0.5) and out[3].cascade.detail == "|r_A - r_B| = 0.5 <= 1"
    for i in INSIDE + FAILED:  # the second's verdict and P, the first's judgment kept beside it
        c = out[i].cascade
        assert c is not None and c.stage is CascadeStage.SECOND and c.first is not None
        assert (out[i].winner, out[i].p_a, out[i].id) == (Verdict.A, 0.9, f"p{i}")
        assert out[i].generated_tokens == 40 and out[i].prompt_tokens == 100 + c.first.prompt_tokens
    failed = out[6].cascade
    assert failed is not None and failed.first is not None and failed.first.status is Status.BACKEND_ERROR
    assert failed.detail.startswith("first stage backend_error: response A:") and math.isnan(failed.measure)
    assert len(backend.prompts) == 2 * len(PAIRS)  # the first stage scored every response once
    # the decision survives the results' JSON (audit store, remote replies)
    assert [judgment_from_dict(j.to_dict()).to_dict() for j in out] == [j.to_dict() for j in out]
    assert out[3].to_dict()["cascade"]["first"]["p_a"] == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_costs_worst_case_and_expected_match_the_calls_made(tokenizer):
    first, backend = _bt(tokenizer)
    ordered = Ordered()
    judge = CascadeJudge(first, PairwiseRewardJudge(ordered, swap=True), Confidence.of(margin=1.0))
    n = len(PAIRS)
    cost = judge.judgment_cost("pairs", n)
    assert isinstance(cost, CascadeCost) and judge.cost("pairs", n) == cost.total
    assert cost.first is not None and cost.second is not None
    assert (cost.first.total, cost.second.total) == (2 * n, 2 * n)  # 2n scored sequences; n pairs x 2 orders
    assert cost.total == 4 * n and cost.generations == 2 * n + 2 * 2 * n  # one pass each; two turns per judgment
    alone = first.judge_pairs(*_pairs())  # the first judge's own run tells the rate before the second runs
    before = len(backend.prompts)
    out = judge.judge_pairs(*_pairs())
    rate = escalation_rate(out)
    assert rate == judge.confidence.escalation_rate(alone) == pytest.approx(4 / 7)
    assert Confidence.of(margin=2.0).escalation_rate(alone) == pytest.approx(5 / 7)  # 1.5 joins the band
    made = len(backend.prompts) - before + ordered.calls  # the cascade's scored sequences + ordered judgments
    assert made == cost.expected(rate) == 2 * n + 2 * 4
    assert cost.expected(1.0) == cost.total and cost.expected(0.0) == 2 * n
    assert "then up to 7 pairs x 2 orders" in cost.describe()
    with pytest.raises(ValueError, match="escalation_rate must be in"):
        cost.expected(1.5)


def test_band_on_a_single_sample_probability_and_a_failure_escalates():
    p = {("x1", "y1"): (Verdict.A, 0.95), ("x2", "y2"): (Verdict.A, 0.55), ("x3", "y3"): (Verdict.B, 0.3),
         ("x4", "y4"): (Verdict.B, 0.45), ("x5", "y5"): (Verdict.NONE, math.nan)}
    cheap, strong = Ordered(p, "first"), Ordered(name="second")
    judge = CascadeJudge(PairwiseRewardJudge(cheap), PairwiseRewardJudge(strong), Confidence.of(band=0.1))
    out = judge.judge_pairs([CONV] * 5, [f"x{k}" for k in range(1, 6)], [f"y{k}" for k in range(1, 6)])
    assert [j.cascade.escalated for j in out if j.cascade] == [False, True, False, True, True]
    assert (cheap.calls, strong.calls) == (5, 3)
    assert [j.p_a for j in out] == [0.95, 0.9, 0.3, 0.9, 0.9]
    assert out[2].cascade is not None and out[2].cascade.detail == "|P(A > B) - 0.5| = 0.2 > 0.1"
    assert out[4].cascade is not None and out[4].cascade.why is CascadeWhy.FIRST_FAILED
    assert out[4].provenance is None and out[4].cascade.first is not None  # the scripted judges record none


def test_agree_on_swap_orders_escalates_only_the_inconsistent():
    # x2 is judged by position (first shown wins both orders): its swap orders disagree
    table = {("x2", "y2"): (Verdict.A, 0.8), ("y2", "x2"): (Verdict.A, 0.8), ("y1", "x1"): (Verdict.B, 0.2)}
    cheap, strong = Ordered(table, "first"), Ordered(name="second")
    with pytest.raises(ConfigError, match="cascade_agree needs a first judge of pairs with swap=True"):
        CascadeJudge(PairwiseRewardJudge(cheap), PairwiseRewardJudge(strong), Confidence.of(agree=True))
    judge = CascadeJudge(PairwiseRewardJudge(cheap, swap=True), PairwiseRewardJudge(strong),
                         Confidence.of(agree=True))
    out = judge.judge_pairs([CONV] * 2, ["x1", "x2"], ["y1", "y2"])
    assert [j.cascade.escalated for j in out if j.cascade] == [False, True]
    assert out[0].cascade is not None and out[0].cascade.detail == "2 of 2 ordered judgments agree"
    assert out[1].cascade is not None and out[1].cascade.first is not None
    assert out[1].cascade.first.consistent is False and out[1].cascade.measure == 0.5
    assert (cheap.calls, strong.calls) == (4, 1)


class Sampled(Ordered):
    """Voting samples: on ``x2`` sample 1 says B, on ``x3`` sample 2 fails; every other sample says A."""

    votes = True

    def judge_ordered(self, conversations: Sequence[Any], first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None, samples: Sequence[int] = (),
                      **kw: Any) -> list[PairwiseJudgment]:
        self.calls += len(first)
        table = {("x2", 1): PairwiseJudgment(Verdict.B, Status.OK, p_a=0.3),
                 ("x3", 2): PairwiseJudgment(Verdict.NONE, Status.TRUNCATED, "scripted: out of tokens")}
        return [table.get((a, k), PairwiseJudgment(Verdict.A, Status.OK, p_a=0.8)) for a, k in zip(first, samples,
                                                                                                   strict=True)]


def test_agree_on_voting_samples_escalates_a_split_vote_and_a_failed_sample():
    cheap, strong = Sampled(name="first"), Ordered(name="second")
    judge = CascadeJudge(PairwiseRewardJudge(cheap, samples=3), PairwiseRewardJudge(strong), Confidence.of(agree=True))
    out = judge.judge_pairs([CONV] * 3, ["x1", "x2", "x3"], ["y1", "y2", "y3"])
    assert [j.cascade.escalated for j in out if j.cascade] == [False, True, True]
    assert (cheap.calls, strong.calls) == (9, 2)
    assert [j.cascade.measure for j in out if j.cascade] == pytest.approx([1.0, 2 / 3, 2 / 3])
    assert out[2].cascade is not None and out[2].cascade.detail == "2 of 3 ordered judgments agree (1 failed)"
    assert out[2].cascade.first is not None and out[2].cascade.first.ok  # the vote is ok; its failed sample escalates


def test_results_do_not_depend_on_the_batch(tokenizer):
    first, _ = _bt(tokenizer)
    judge = CascadeJudge(first, PairwiseRewardJudge(Ordered()), Confidence.of(margin=1.0))
    convs, a, b = _pairs()
    batch = [j.to_dict() for j in judge.judge_pairs(convs, a, b)]
    alone = [judge.judge_pairs([convs[i]], [a[i]], [b[i]])[0].to_dict() for i in range(len(a))]
    reversed_batch = [j.to_dict() for j in judge.judge_pairs(convs[::-1], a[::-1], b[::-1])][::-1]
    assert batch == alone == reversed_batch


def test_rules_are_checked():
    with pytest.raises(ConfigError, match="exactly one confidence rule"):
        Confidence.of()
    with pytest.raises(ConfigError, match="exactly one confidence rule"):
        Confidence.of(margin=1.0, band=0.1)
    with pytest.raises(ConfigError, match=r"cascade_band must be in \[0, 0.5\)"):
        Confidence.of(band=0.5)
    with pytest.raises(ConfigError, match="cascade_margin"):
        Confidence.of(margin=-1.0)
    with pytest.raises(ConfigError, match="exactly one confidence rule"):  # before the (missing) models load
        brrm.load("/nonexistent/first", cascade="/nonexistent/second")


def test_load_builds_the_cascade_and_its_info_says_so(tokenizer):
    second = PairwiseRewardJudge(Ordered())
    judge, backend = _bt(tokenizer, cascade=second, cascade_band=0.2)
    assert isinstance(judge, CascadeJudge) and isinstance(judge, brrm.RewardJudge)
    assert judge.info.pairwise and judge.info.needs_reference and judge.info.default_strategy == "round_robin"
    recorded = judge.info.to_dict()["options"]["cascade"]
    assert '"rule":"band"' in recorded and '"model":"scripted-second"' in recorded and '"threshold":0.2' in recorded
    assert brrm.JudgeInfo.from_dict(judge.info.to_dict()).composition.cascade == recorded
    one = judge.judge(CONV, "r2", "r1")  # σ(1) = 0.73: |P - 0.5| = 0.23 > 0.2
    assert one.cascade is not None and not one.cascade.escalated and one.winner is Verdict.A
    scored = judge.score([CONV, CONV], ["r1", "r3"], references=["r1.2", "r1"])
    assert scored[1].reward == pytest.approx(1 / (1 + math.exp(-2)))  # σ(2): the first stage decided
    assert [r.cascade.stage for r in scored if r.cascade] == ["second", "first"]  # σ(-0.2) is inside the band
    assert scored[0].reward == 0.9 and reward_from_dict(scored[0].to_dict()).to_dict() == scored[0].to_dict()
    with pytest.raises(ConfigError, match="neither stage of this cascade takes one"):
        judge.judge_pairs([CONV], ["r2"], ["r1"], principles="be brief")
    variant = judge.with_options(cascade_margin=5.0, margin=0.1)
    assert isinstance(variant, CascadeJudge) and variant.confidence == Confidence(CascadeRule.MARGIN, 5.0)
    assert variant.first.info.composition.margin == 0.1


def test_trl_group_rewards_through_the_cascade(tokenizer):
    """TRL's reward function (group mode, circular) over a cascade: each GRPO group ranked from cascade judgments."""
    from brrm.rlhf.trl import trl_reward

    table = {("r1", "r1.5"): (Verdict.B, 0.2), ("r1.5", "r1"): (Verdict.A, 0.8)}
    strong = Ordered(table)
    judge, _ = _bt(tokenizer, cascade=PairwiseRewardJudge(strong), cascade_margin=1.0)
    rf = trl_reward(judge, mode="group", num_generations=3, strategy="circular")
    rewards = rf(prompts=["which is better?"] * 3, completions=["r5", "r1", "r1.5"])
    # circular: (0,1), (1,2), (2,0); only (1,2) is inside the margin and goes to the scripted second judge
    # (the scripted second judge says r1.5 beats r1): r5 wins both its judgments, r1 none, r1.5 one of two
    assert strong.calls == 1
    assert rewards == pytest.approx([1.0, 0.0, 0.5])


def test_a_named_second_judge_is_in_the_spec_and_the_spec_rebuilds_the_cascade(tmp_path, tiny):
    judge = brrm.load(tiny, kind="brrm", thinking="off", swap=True, cascade=tiny, cascade_kind="brrm",
                      cascade_agree=True, cascade_options={"thinking": "off", "samples": 3})
    assert isinstance(judge, CascadeJudge) and judge.confidence.rule is CascadeRule.AGREE
    assert judge.second.info.composition.samples == 3 and judge.first.info.composition.swap is True
    spec = judge.info.spec
    assert spec is not None and spec.options["cascade"] == tiny and spec.options["cascade_agree"] is True
    from brrm.load import check

    check(tiny, kind="brrm", cascade=tiny, cascade_kind="brrm", cascade_band=0.1)  # nothing loads
    with pytest.raises(ConfigError, match="nowhere"):  # the second judge's folder, named before anything loads
        check(tiny, kind="brrm", cascade=str(tmp_path / "nowhere"), cascade_band=0.1)
    stricter = judge.with_options(cascade_band=0.2)
    assert stricter.info.spec is not None and stricter.info.spec.options["cascade_band"] == 0.2
    assert "cascade_agree" not in stricter.info.spec.options and stricter.confidence.rule is CascadeRule.BAND
    assert judge.with_options(max_new_tokens=300).info.spec is None  # which stage took it: no one load call says
    again = brrm.JudgeSpec.from_json(spec.to_json()).load()
    try:
        assert isinstance(again, CascadeJudge) and again.info.to_dict() == judge.info.to_dict()
    finally:
        again.close()
        judge.close()


def test_the_server_judges_through_the_cascade_and_replies_say_which_stage(tokenizer):
    from fastapi.testclient import TestClient

    from brrm.serve import ServerLimits, create_app

    strong = Ordered()
    judge, _ = _bt(tokenizer, cascade=PairwiseRewardJudge(strong), cascade_margin=1.0)
    with TestClient(create_app(judge, limits=ServerLimits(warmup=False), close_judge=False)) as client:
        pairs = [{"id": f"p{i}", "prompt": "which is better?", "response_a": a, "response_b": b}
                 for i, (a, b) in enumerate(PAIRS)]
        r = client.post("/v1/judge", json={"pairs": pairs})
        assert r.status_code == 200, r.text
        body = r.json()
        stages = [j["cascade"]["stage"] for j in body["judgments"]]
        assert stages == ["first"] * 3 + ["second"] * 4 and strong.calls == 4
        assert body["judgments"][6]["cascade"]["why"] == "first_failed"
        assert body["judgments"][3]["cascade"]["first"]["provenance"]["backend"] == "fake"
        assert '"rule":"margin"' in body["model"]["options"]["cascade"]


def test_an_audit_stores_the_cascade_apart_from_its_first_judge(tokenizer, tmp_path):
    import json

    from brrm.audit import AuditOptions, plan_items, run_audit
    from brrm.records import read_records

    rows = [{"id": f"p{i}", "prompt": "which is better?", "response_a": a, "response_b": b, "label": "A"}
            for i, (a, b) in enumerate(PAIRS)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = plan_items(read_records(tmp_path / "in.jsonl", "pairs"), "pairs")
    options = AuditOptions(shape="pairs", progress=False)
    strong = Ordered()
    judge, _ = _bt(tokenizer, cascade=PairwiseRewardJudge(strong), cascade_margin=1.0)
    assert run_audit(items, tmp_path / "a", options, judge=judge).judged == 7
    results = [json.loads(x)["result"] for x in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    assert [r["cascade"]["stage"] for r in results] == ["first"] * 3 + ["second"] * 4 and strong.calls == 4
    alone, _ = _bt(tokenizer)  # the first judge alone is another configuration: judged afresh, never reused
    assert run_audit(items, tmp_path / "a", options, judge=alone).judged == 7


def test_brrm_judge_cascade_flags(tmp_path, capsys, tiny):
    """``brrm judge --cascade``: the tiny Qwen3 read as a Bradley–Terry model (vocabulary logit 0) first, the same
    weights as BR-RM second; a margin no random-weight reward difference reaches escalates every pair."""
    import json

    from brrm.cli import main
    from tests.conftest import REPO

    out = tmp_path / "out.jsonl"
    second = {"temperature": 0, "thinking": "off", "max_new_tokens": 450, "block_token_cap": 8}
    argv = ["judge", "--input", str(REPO / "examples/pairs.jsonl"), "--output", str(out), "--limit", "2", "--model",
            tiny, "--kind", "bt", "--recipe", "llama_nemotron", "--cascade", tiny, "--cascade-kind", "brrm",
            "--cascade-margin", "1000", "--cascade-options", json.dumps(second), "--no-progress", "-q"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "cost: cascade: 4 scored sequences, then up to 2 pairs x 1 order x 1 sample = 2 judgments" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["cascade"]["stage"] for r in rows] == ["second", "second"]
    for r in rows:
        first = r["cascade"]["first"]
        assert r["cascade"]["why"] == "uncertain" and r["cascade"]["threshold"] == 1000.0
        assert first["status"] == "ok" and first["turn1_text"] == "" and r["turn1_text"] != ""  # BT, then BR-RM
        assert r["cascade"]["detail"].endswith("<= 1000")
    # a rule flag without --cascade is refused, naming it
    assert main(["judge", "--input", str(REPO / "examples/pairs.jsonl"), "--output", str(tmp_path / "x.jsonl"),
                 "--model", tiny, "--cascade-band", "0.1", "-q"]) == 2
    assert "--cascade-band applies to a judge cascade" in capsys.readouterr().err


def test_a_cascade_record_tells_its_cost_as_the_judges_do(tokenizer):
    """What a client of a served cascade (RemoteJudge) counts from the judge's record equals what the judges count."""
    from brrm.service.remote import RemoteJudge

    first, _ = _bt(tokenizer)
    voted = Ordered()
    voted.votes = True  # draws separate samples
    for second in (PairwiseRewardJudge(Ordered(), swap=True), PairwiseRewardJudge(voted, samples=3)):
        judge = CascadeJudge(first, second, Confidence.of(margin=1.0))
        for shape, n, strategy in (("pairs", 7, "auto"), ("score", 5, "auto"), ("group", 4, "circular"),
                                   ("group", 4, "round_robin"), ("group", 2, "circular")):
            for swap in (None, False, True):
                local = judge.judgment_cost(shape, n, strategy=strategy, swap=swap)
                assert described_cost(judge.info, shape, n, strategy=strategy, swap=swap) == local
        remote = object.__new__(RemoteJudge)  # its cost reads nothing but its info and swap
        remote.info, remote.swap = judge.info, None
        assert remote.judgment_cost("group", 4, strategy="circular") == judge.judgment_cost("group", 4,
                                                                                             strategy="circular")
    assert judge.judgment_cost("group", 4, strategy="circular").second.total == 4 * 3  # circular: 4 pairs, 3 votes


def test_a_benchmark_through_a_cascade_whose_first_judge_is_never_sure_scores_as_its_second(tokenizer):
    """RewardBench's chat fixture: a Bradley–Terry first stage that gives every response the same reward is inside
    any margin, so every pair goes to the second judge, and the benchmark's score is the second judge's alone."""
    from brrm.bench import get_benchmark
    from brrm.bench.runner import run
    from tests.test_bench_protocols import REWARDBENCH

    bench = get_benchmark("rewardbench")
    items = bench.load(bench.resolve_subsets(["chat"]), source=str(REWARDBENCH))
    table = {}  # the second judge is always right, in either presentation order
    for it in items:
        for p in it.pairs:
            a, b = it.responses[p.i], it.responses[p.j]
            table[(a, b)] = (p.gold, 0.9 if p.gold is Verdict.A else 0.1)
            table[(b, a)] = (p.gold.mirrored(), 0.1 if p.gold is Verdict.A else 0.9)
    strong, alone = Ordered(table), Ordered(table)
    flat = brrm.load(kind="bt", backend=FakeBackend(tokenizer, score_script=lambda prompt: 0.25),
                     cascade=PairwiseRewardJudge(strong), cascade_margin=0.5)
    results, _ = run(flat, items, orders=bench.orders(None))
    expected, _ = run(PairwiseRewardJudge(alone), items, orders=bench.orders(None))
    assert strong.calls == alone.calls == len(items) == 10
    assert all(s.judgment.cascade is not None and s.judgment.cascade.escalated for r in results for s in r.shown)
    assert bench.score(results).overall == bench.score(expected).overall == 100.0
