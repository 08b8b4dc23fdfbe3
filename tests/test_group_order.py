"""Issue 28 item 3: one canonical group order. Permuting a group's responses never changes any response's reward —
through TRL's reward-function interface, verl's cohort buffer and its reward loop, ``/v1/rank`` and ``/compare`` on a
real ``brrm serve``, and ``brrm rank`` on a file — and identical responses get identical rewards.

The judges are the tests' scripted BR-RM judges (a verdict that depends on both content and position, so a
strategy that pairs by position would show it: the compose layer's own ``rank_groups``, which takes the order it
is given, is checked to be order-dependent on the same groups) and, for ``brrm rank``, the tiny real Qwen3.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math

import httpx
import pytest

from brrm.rlhf import trl_reward
from brrm.rlhf.cohorts import CohortBuffer
from brrm.service.order import CanonicalGroup, content_digest
from tests.serve_helpers import compare_body, serving_in_process
from tests.test_rlhf_groups import scripted_brrm

pytestmark = pytest.mark.timeout(180)

# "aa" and "bb" are of one length: the scripted judge (longer wins) lets response 1 win such a pair, so who meets
# whom and who is shown first decide their rewards; "dup" appears twice.
GROUP = ("aa", "bb", "cccc", "d")
WITH_COPIES = ("dup", "zz", "dup", "yyyy")
PERMS = list(itertools.permutations(range(4)))  # all 24
FEW = [(0, 1, 2, 3), (1, 2, 3, 0), (3, 2, 1, 0), (2, 0, 3, 1), (1, 0, 2, 3), (3, 1, 0, 2)]


def by_text(texts, rewards) -> dict[str, float | None]:
    """{text: reward}, checking that identical texts got identical rewards."""
    out: dict[str, float | None] = {}
    for t, r in zip(texts, rewards, strict=True):
        assert t not in out or out[t] == r, (t, out[t], r)
        out[t] = r
    return out


def permuted(group, perm):
    return [group[i] for i in perm]


def two_by_two(perms):
    """Steps of two groups, each in its own order: the first half of ``perms`` against the second half reversed
    (every order once, each beside another)."""
    half = len(perms) // 2
    return list(zip(perms[:half], reversed(perms[half:]), strict=True))


# ------------------------------------------------------------------------------------------------- the rule
def test_the_rule_orders_by_content_hash_and_maps_back():
    for perm in PERMS:
        texts = permuted(WITH_COPIES, perm)
        canon = CanonicalGroup.of(texts)
        assert canon.arrange(texts) == sorted(texts, key=content_digest)  # one arrangement for every permutation
        assert [texts[p] for p in canon.order] == canon.arrange(texts)
        assert sorted(canon.order) == [0, 1, 2, 3] and [canon.order[s] for s in canon.slots] == [0, 1, 2, 3]
        first, second = (p for p, t in enumerate(texts) if t == "dup")
        assert canon.classes[first] == canon.classes[second]
        assert len(set(canon.classes)) == 3
    assert content_digest("a") != content_digest(["a"]) and content_digest(None) != content_digest("")
    with pytest.raises(ValueError, match="3 values for a group of 4"):
        CanonicalGroup.of(GROUP).arrange(GROUP[:3])


def test_the_compose_layer_alone_is_order_dependent_so_the_checks_below_can_fail():
    judge, _ = scripted_brrm()
    for strategy in ("circular", "knockout"):
        seen = set()
        for p in PERMS:  # until two orders give different rewards
            seen.add(tuple(sorted(by_text(permuted(GROUP, p), [r.reward for r in judge.rank_groups(
                ["Q"], [permuted(GROUP, p)], strategy=strategy)[0].rewards]).items())))
            if len(seen) > 1:
                break
        assert len(seen) > 1, strategy


# ------------------------------------------------------------------------------------------------- TRL
TRL_CASES = [("circular", False, False), ("circular", True, False), ("circular", False, True),
             ("round_robin", False, False), ("round_robin", False, True), ("knockout", False, False)]


@pytest.mark.parametrize("strategy,swap,soft", TRL_CASES)
@pytest.mark.parametrize("group", [GROUP, WITH_COPIES], ids=["distinct", "copies"])
def test_trl_group_rewards_do_not_depend_on_completion_order(strategy, swap, soft, group):
    judge, _ = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy=strategy, num_generations=4, swap=swap, soft=soft)
    seen = set()
    perms = FEW if strategy == "round_robin" else PERMS  # round-robin shows every pair in both orders already
    for perm, other in two_by_two(perms):  # two groups per step, each in its own order: every order once
        texts = permuted(group, perm) + permuted(group, other)
        got = reward(prompts=["Q1"] * 4 + ["Q2"] * 4, completions=texts, completion_ids=[[0]] * 8,
                     trainer_state=None, log_metric=lambda *a: None, log_extra=lambda *a: None)
        first, second = by_text(texts[:4], got[:4]), by_text(texts[4:], got[4:])
        assert first == second
        seen.add(tuple(sorted(first.items())))
    assert len(seen) == 1, seen
    (rewards,) = seen
    assert all(isinstance(v, float) and math.isfinite(v) for _, v in rewards)


def test_trl_reference_strategy_is_order_free_too():
    judge, _ = scripted_brrm()
    reward = trl_reward(judge, mode="group", strategy="reference", num_generations=4, reference_column="ref")
    seen = {tuple(sorted(by_text(permuted(GROUP, p), reward(prompts=["Q"] * 4, completions=permuted(GROUP, p),
                                                            ref=["bb"] * 4)).items())) for p in FEW}
    assert len(seen) == 1


def test_identical_completions_get_identical_rewards_under_circular():
    """In a ring the two copies of "dup" meet different neighbours; each gets the mean of the copies' rewards."""
    judge, _ = scripted_brrm()
    texts = ["dup", "zz", "dup", "yyyy"]
    raw = judge.rank_groups(["Q"], [CanonicalGroup.of(texts).arrange(texts)], strategy="circular")[0]
    copies = [r.reward for t, r in zip(CanonicalGroup.of(texts).arrange(texts), raw.rewards, strict=True)
              if t == "dup"]
    got = trl_reward(judge, mode="group", strategy="circular", num_generations=4)(prompts=["Q"] * 4,
                                                                                  completions=texts)
    assert got[0] == got[2] == pytest.approx(sum(copies) / 2)
    assert copies[0] != copies[1]  # the pooling did something here


# ------------------------------------------------------------------------------------------------- verl
def test_verl_cohort_buffer_and_trl_give_one_reward_per_completion():
    judge, _ = scripted_brrm()
    want = by_text(GROUP, trl_reward(judge, mode="group", strategy="circular", num_generations=4)(
        prompts=["Q"] * 4, completions=list(GROUP)))
    for perm in FEW:
        buf = CohortBuffer(lambda: judge, group_size=4, strategy="circular", cohort_timeout_s=5)

        async def run(perm=perm, buf=buf):
            return await asyncio.gather(*[buf.submit("g", "Q", GROUP[i]) for i in perm])

        out = asyncio.run(run())
        assert by_text(permuted(GROUP, perm), [r.reward for r in out]) == want


def _verl_batch(tok, groups):
    import numpy as np
    import torch
    from verl import DataProto

    texts = [t for g in groups for t in g]
    p = tok("Q")["input_ids"]
    r_ids = [tok(t)["input_ids"] for t in texts]
    rl = max(map(len, r_ids))
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor([p] * len(texts)),
                 "responses": torch.tensor([x + [tok.pad_token_id] * (rl - len(x)) for x in r_ids]),
                 "attention_mask": torch.tensor([[1] * len(p) + [1] * len(x) + [0] * (rl - len(x)) for x in r_ids])},
        non_tensors={"uid": np.array([f"g{k}" for k, g in enumerate(groups) for _ in g], dtype=object),
                     "extra_info": np.array([{"prompt": "Q"}] * len(texts), dtype=object)})


@pytest.mark.parametrize("strategy", ["circular", "round_robin", "knockout"])
def test_verl_reward_loop_rewards_do_not_depend_on_sample_order(strategy):
    """verl 0.9.1's RewardLoopWorker.compute_score_batch over BrrmGroupRewardManager: two groups of one prompt in
    different orders, in several batches; every response's score is the same, and equals TRL's."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from brrm.rlhf.recipe import JudgeSource
    from brrm.rlhf.verl_manager import BrrmGroupRewardManager
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 4}}, "data": {"train_batch_size": 2}, "trainer": {},
        "reward": {"num_workers": 1, "custom_reward_function": {"path": "x"}, "reward_model": {"enable": False},
                   "reward_kwargs": {"brrm_config": {"kind": "brrm", "strategy": strategy}}}})
    judge, _ = scripted_brrm()
    manager = BrrmGroupRewardManager(config, tok)
    manager.source = JudgeSource(judge)
    manager.buffer.judge = manager.source.get
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config, worker.reward_manager, worker.loop = config, manager, manager.loop
    want = by_text(GROUP, trl_reward(judge, mode="group", strategy=strategy, num_generations=4)(
        prompts=["Q"] * 4, completions=list(GROUP)))
    for a, b in two_by_two(FEW):
        groups = [permuted(GROUP, a), permuted(GROUP, b)]
        outs = worker.loop.run_until_complete(worker.compute_score_batch(_verl_batch(tok, groups)))
        scores = [o["reward_score"] for o in outs]
        assert all(o["reward_extra_info"]["ok"] for o in outs)
        assert by_text(groups[0], scores[:4]) == by_text(groups[1], scores[4:]) == want


# ------------------------------------------------------------------------------------------------- the server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``brrm serve`` (in this process, on a real socket) over the scripted BR-RM of tests.serve_helpers (turn 2:
    the response with "good" wins, else response 1: position decides between equals)."""
    tmp = tmp_path_factory.mktemp("serve-order")
    with serving_in_process(["--factory", "tests.serve_helpers:fake_brrm", "--max-wait-ms", "5"], tmp) as srv:
        yield srv


SERVED = ("good one", "good two", "plain", "other")
SERVED_COPIES = ("good one", "plain", "good one", "other")


@pytest.mark.parametrize("strategy", ["circular", "all_pairs"])
@pytest.mark.parametrize("group", [SERVED, SERVED_COPIES], ids=["distinct", "copies"])
def test_compare_rewards_and_comparisons_do_not_depend_on_response_order(server, strategy, group):
    seen, pairs_seen = set(), set()
    for perm in FEW:
        texts = permuted(group, perm)
        r = httpx.post(f"{server.url}/compare", json={**compare_body(texts), "strategy": strategy}, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["statuses"] == ["ok"] * 4
        seen.add(tuple(sorted(by_text(texts, body["rewards"]).items())))
        pairs_seen.add(tuple(sorted((texts[c["response_i"]], texts[c["response_j"]], c["winner"])
                                    for c in body["comparison_results"])))
    assert len(seen) == 1 and len(pairs_seen) == 1, (seen, pairs_seen)
    assert len(set(dict(next(iter(seen))).values())) > 1  # the rewards say something


@pytest.mark.parametrize("strategy", ["circular", "round_robin", "knockout"])
def test_v1_rank_rewards_do_not_depend_on_response_order(server, strategy):
    seen = set()
    for perm in FEW:
        texts = permuted(SERVED_COPIES, perm)
        r = httpx.post(f"{server.url}/v1/rank", json={"prompt": "Name a prime.", "responses": texts,
                                                       "strategy": strategy}, timeout=60)
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        rewards = [x["reward"] for x in result["rewards"]]
        assert [texts[k] for k in result["ranking"]] == sorted(texts, key=lambda t: (-by_text(texts, rewards)[t],
                                                                                      texts.index(t)))
        seen.add(tuple(sorted(by_text(texts, rewards).items())))
    assert len(seen) == 1, seen


# ------------------------------------------------------------------------------------------------- brrm rank
def _rank_file(tmp_path, capsys, group, argv):
    from brrm.cli import main

    src, out = tmp_path / "groups.jsonl", tmp_path / "ranks.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{k}", "prompt": "What is 2+2?", "responses": permuted(group, p)})
                           + "\n" for k, p in enumerate(FEW[:3])))
    assert main(["rank", "--input", str(src), "--output", str(out), "--no-progress", *argv]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [by_text(permuted(group, p), [r["reward"] for r in row["rewards"]])
            for p, row in zip(FEW[:3], rows, strict=True)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-order")))


@pytest.mark.parametrize("strategy", ["circular", "knockout"])
def test_brrm_rank_on_a_file_with_the_tiny_real_model(tiny_model, tmp_path, capsys, strategy):
    """Three records holding one group in three orders, ranked in one run by the tiny real Qwen3 BR-RM."""
    maps = _rank_file(tmp_path, capsys, ("4", "5", "four", "IV"),
                      ["--model", tiny_model, "--kind", "brrm", "--strategy", strategy, "--max-new-tokens", "420",
                       "--block-token-cap", "8", "--thinking", "off"])
    assert maps[0] == maps[1] == maps[2] and all(v is not None for v in maps[0].values())
