"""Self-consistency voting (issue 21.3): k independent two-turn judgments per order, their majority, agreement
and mean P(A ≻ B), on a tiny real Qwen3 through the real CLI, and the vote arithmetic on typed results."""

from __future__ import annotations

import json
import math

import pytest

import brrm
from brrm.cli import main
from brrm.compose.vote import vote
from brrm.errors import ConfigError
from brrm.testing import save_tiny_qwen3
from brrm.types import PairwiseJudgment, Status, Verdict
from brrm.types.cost import JudgmentCost
from tests.conftest import REPO

BUDGET = ["--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off", "--no-progress", "-q"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _j(winner: Verdict, p: float = math.nan, status: Status = Status.OK) -> PairwiseJudgment:
    if status is not Status.OK:
        return PairwiseJudgment(winner=Verdict.NONE, status=status, reason="no verdict", generated_tokens=5)
    return PairwiseJudgment(winner=winner, status=status, p_a=p, generated_tokens=5)


def test_majority_ties_agreement_mean_and_failures():
    v = vote([_j(Verdict.A, 0.9), _j(Verdict.A, 0.7), _j(Verdict.B, 0.2)], orders=1)
    assert (v.winner, v.samples, v.consistent) == (Verdict.A, 3, None)
    assert v.agreement == pytest.approx(2 / 3) and v.p_a == pytest.approx(0.6)
    assert v.generated_tokens == 15 and len(v.sub_judgments) == 3
    split = vote([_j(Verdict.A, 0.8), _j(Verdict.B, 0.3)], orders=1)
    assert split.winner is Verdict.TIE and split.agreement == 0.5 and "votes split: A 1, B 1" in split.reason
    # a failed sample does not vote and does not enter the mean
    part = vote([_j(Verdict.B, 0.1), _j(Verdict.NONE, status=Status.PARSE_FAILURE), _j(Verdict.B, 0.3)], orders=1)
    assert part.winner is Verdict.B and part.p_a == pytest.approx(0.2) and part.agreement == 1.0
    assert "1 of 3 sampled judgments failed" in part.reason
    none = vote([_j(Verdict.NONE, status=Status.TRUNCATED)] * 2, orders=1)
    assert none.status is Status.TRUNCATED and math.isnan(none.agreement) and none.winner is Verdict.NONE
    # swap: forward majority A, reversed (mirrored) majority B -> inconsistent; overall split -> tie
    swapped = vote([_j(Verdict.A, 0.6), _j(Verdict.A, 0.6), _j(Verdict.B, 0.4), _j(Verdict.B, 0.4)], orders=2)
    assert swapped.consistent is False and swapped.winner is Verdict.TIE and swapped.swapped
    assert [s for _, s in swapped.ordered_judgments()] == [Verdict.A, Verdict.A, Verdict.B, Verdict.B]


def test_cost_counts_pairs_orders_samples_turns(tiny_dir):
    judge = brrm.load(tiny_dir, kind="brrm", samples=3, swap=True, thinking="off")
    cost = judge.judgment_cost("pairs", 8)
    assert (cost.judgments, cost.generations) == (48, 96)
    assert cost.describe() == "8 pairs x 2 orders x 3 samples = 48 judgments (96 generations)"
    assert judge.judgment_cost("pairs", 8, swap=False) == JudgmentCost("pairs", 8, 8, orders=1, samples=3, turns=2,
                                                                        pairs=8)
    assert judge.cost("group", 4, strategy="circular") == 4 * 2 * 3  # the judge's swap, its samples
    assert judge.info.composition.samples == 3 and judge.info.to_dict()["options"]["samples"] == 3
    assert "samples" not in brrm.load(tiny_dir, kind="brrm", thinking="off").info.to_dict()["options"]


def test_bad_samples_are_named_before_loading(tiny_dir):
    with pytest.raises(ConfigError, match="samples must be an integer >= 1"):
        brrm.load(tiny_dir, kind="brrm", samples=0)
    with pytest.raises(ConfigError, match="greedy decoding gives 4 identical"):
        brrm.load(tiny_dir, kind="brrm", samples=4, temperature=0)


def test_cli_samples_3_swap_gives_6_votes_byte_identical_at_batch_1_and_8(tmp_path, tiny_dir, capsys):
    """Two pairs of examples/pairs.jsonl (a single-turn one and the multi-turn one): 12 judgments, 24 generations,
    more rows than a batch of 8 holds, so the batch-8 run refills its batch as in a longer file."""
    lines = (REPO / "examples/pairs.jsonl").read_text().splitlines()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(f"{lines[0]}\n{lines[3]}\n")
    assert "conversation" in lines[3] and "conversation" not in lines[0]
    outs = []
    for bs in ("1", "8"):
        out = tmp_path / f"b{bs}.jsonl"
        assert main(["judge", "--input", str(pairs), "--output", str(out), "--model",
                     tiny_dir, "--kind", "brrm", "--batch-size", bs, "--samples", "3", "--swap",
                     *BUDGET]) == 0
        outs.append(out.read_bytes())
    printed = capsys.readouterr().out
    assert "cost: 2 pairs x 2 orders x 3 samples = 12 judgments (24 generations)" in printed
    assert "voting: 3 samples per order; mean agreement" in printed
    assert outs[0] == outs[1]  # byte-identical files, every sample's provenance included
    rows = [json.loads(line) for line in outs[0].splitlines()]
    assert len(rows) == 2
    for row in rows:
        subs = row["sub_judgments"]
        assert len(subs) == 6 and row["samples"] == 3 and row["status"] == "ok"
        verdicts = [s["winner"] for s in subs if s["status"] == "ok"]
        top = max(verdicts.count(v) for v in ("A", "B", "tie"))
        assert row["agreement"] == pytest.approx(top / len(verdicts))
        leaders = [v for v in ("A", "B", "tie") if verdicts.count(v) == top]
        assert row["winner"] == (leaders[0] if len(leaders) == 1 else "tie")
        assert row["p_a"] == pytest.approx(sum(s["p_a"] for s in subs) / 6)
        seeds = {s["provenance"]["seed"] for s in subs}
        assert len(seeds) == 6  # each sample of each order draws from its own streams
    # sample 0 of each order is the unvoted judgment: voting adds samples, it does not move the first one
    plain = tmp_path / "plain.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(plain), "--model", tiny_dir, "--kind", "brrm",
                 "--batch-size", "8", "--swap", *BUDGET]) == 0
    capsys.readouterr()
    for voted, one in zip(rows, map(json.loads, plain.read_bytes().splitlines()), strict=True):
        assert voted["sub_judgments"][0] == one["sub_judgments"][0]
        assert voted["sub_judgments"][3] == one["sub_judgments"][1]


def test_samples_share_the_turn1_prefill_exactly_and_reach_rank(tiny_dir):
    from brrm.templates import render_brrm_turn1
    from brrm.types import Conversation

    def load(batch_size):
        return brrm.load(tiny_dir, kind="brrm", samples=4, batch_size=batch_size, max_new_tokens=420,
                         block_token_cap=8, thinking="off", seed=3)

    judge, control = load(8), load(1)  # one row per decoding batch: nothing to share
    out = judge.judge_pairs(["What is 2+2?"], ["4"], ["5"], ids=["q"])
    assert len(out[0].sub_judgments) == 4 and out[0].samples == 4
    turn1 = render_brrm_turn1(Conversation.coerce("What is 2+2?"), "4", "5", judge.model.config.context)
    p1 = judge.model.encoder.chat([{"role": "user", "content": turn1}], add_generation_prompt=True)[1]
    assert judge.model.backend.stats["shared_prompt_tokens"] == 3 * len(p1)  # P1 prefilled once, not 4 times
    unshared = control.judge_pairs(["What is 2+2?"], ["4"], ["5"], ids=["q"])
    assert control.model.backend.stats["shared_prompt_tokens"] == 0
    assert json.dumps(out[0].to_dict()) == json.dumps(unshared[0].to_dict())  # sharing changes no bit
    group = judge.rank("Say hi.", ["Hi!", "Go away."], strategy="knockout")
    assert group.judgments and all(j.samples == 4 and len(j.sub_judgments) == 4 for j in group.judgments)


class _SeededVerdicts:
    """A scripted BR-RM whose turn-2 verdict follows the sample's seed (what real sampling cannot give on demand:
    a known split of votes); turn 1 is a valid analysis."""

    def __call__(self, prompt, request):
        from tests.serve_helpers import T1, is_turn2, ranking

        return ranking(1 + request.seed % 2) if is_turn2(prompt) else T1


def _scripted(samples, **kw):
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    return brrm.load(kind="brrm", backend=FakeBackend(build_tiny_tokenizer(), _SeededVerdicts()), decoding="faithful",
                     samples=samples, **kw)


def test_voting_reaches_the_server_and_the_trl_reward():
    from fastapi.testclient import TestClient

    from brrm.rlhf.trl import trl_reward
    from brrm.serve import ServerLimits, create_app

    judge = _scripted(5, swap=True)
    direct = judge.judge_pairs(["What is 2+2?"], ["4"], ["5"], ids=["p"])[0]
    app = create_app(judge, limits=ServerLimits(warmup=False), close_judge=False)
    with TestClient(app) as client:
        r = client.post("/v1/judge", json={"pairs": [{"id": "p", "prompt": "What is 2+2?", "response_a": "4",
                                                       "response_b": "5"}]})
    assert r.status_code == 200
    got = r.json()["judgments"][0]
    assert got["samples"] == 5 and len(got["sub_judgments"]) == 10 and got["winner"] == direct.winner.value
    assert got["agreement"] == pytest.approx(direct.agreement)
    reward = trl_reward(_scripted(3), mode="group", strategy="round_robin", num_generations=2)
    values = reward(prompts=["Say hi."] * 2, completions=["Hi!", "Hello."])
    assert len(values) == 2 and sum(values) == pytest.approx(1.0)  # 3 votes never tie: one win per game


def test_bench_sweeps_samples_and_prints_accuracy_against_cost(tmp_path, capsys, shared, tiny_dir):
    """Issue 21: ``brrm bench NAME --sweep-samples 1,2`` runs each K and tabulates the headline against its cost."""
    code = main(["bench", "llmbar", "--subset", "Natural", "--limit", "2", "--data-dir", str(shared / "data"),
                 "--model", tiny_dir, "--kind", "brrm",
                 "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off", "--sweep-samples", "1,2",
                 "--output", str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    rows = [ln.split() for ln in out.split("self-consistency sweep (headline figure against its cost):")[1]
            .strip().splitlines()[1:]]
    assert [r[0] for r in rows] == ["1", "2"] and int(rows[1][4]) == 2 * int(rows[0][4]) == 8
    assert (tmp_path / "out" / "samples-2" / "result.json").is_file()
    assert main(["bench", "llmbar", "--sweep-samples", "0,2"]) == 2
