"""verl's group manager on the service scheduler (issue 28): a stalled GRPO group costs only its own samples.

``BrrmGroupRewardManager`` runs through verl 0.9.1's own ``RewardLoopWorker.compute_score_batch`` (per-sample
concurrent ``run_single`` calls) over a ``DataProto`` of four groups of two, one of which stalls (a scripted backend
that takes concurrent calls: a real model cannot stall on demand). In two rounds, locally and via ``url=`` (``brrm
serve`` over the same scripted judge, in this process on a real socket), the three healthy groups get their real
rewards (the ``good`` answer wins: 1.0 / 0.0) within ``timeout_s``, and the stalled group's two samples are ``ok:
False`` with status ``timeout`` and a reason — never a plain 0.0 presented as a reward.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import pytest

from brrm.rlhf.verl import TIMEOUT
from tests.serve_helpers import serving_in_process

# verl is imported inside the tests: collecting this file (every xdist worker collects the whole suite) costs nothing
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                 reason="verl not installed (.ci/run installs verl==0.9.1 --no-deps)")]

TIMEOUT_S = 10.0
"""Each sample's deadline: the stalled group meets it (its stall is 600 s); the healthy groups' scripted calls
(0.05 s each) must end before it, which leaves a loaded machine a wide margin (3 s once failed at load 12-20)."""
GROUPS = 4
STALLED = 2
"""The stalled group's index in each round."""


def _config(brrm_config: dict[str, Any]) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 2}}, "data": {"train_batch_size": GROUPS}, "trainer": {},
        "reward": {"num_workers": 1, "custom_reward_function": {"path": "x"}, "reward_model": {"enable": False},
                   "reward_kwargs": {"brrm_config": {"kind": "brrm", "strategy": "circular", "timeout_s": TIMEOUT_S,
                                                     "cohort_timeout_s": 5.0, "fallback_score": -7.0,
                                                     "max_workers": 4, **brrm_config}}}})


def _round(worker: Any, tok: Any, tag: str) -> tuple[list[dict[str, Any]], float]:
    """One verl batch: group g holds ("answer", "good answer"), in an order that alternates; group STALLED stalls."""
    import numpy as np
    import torch
    from verl import DataProto

    texts, uids, prompts = [], [], []
    for g in range(GROUPS):
        pair = [f"answer {tag} {g}", f"good answer {tag} {g}" if g != STALLED else f"<<STALL>> {tag} {g}"]
        texts += pair if g % 2 == 0 else pair[::-1]
        uids += [f"{tag}-{g}"] * 2
        prompts += [f"Task {tag} {g}?"] * 2
    p_ids = [tok(p)["input_ids"] for p in prompts]
    r_ids = [tok(t)["input_ids"] for t in texts]
    pl, rl = max(map(len, p_ids)), max(map(len, r_ids))
    pad = tok.pad_token_id
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([[pad] * (pl - len(x)) + x for x in p_ids]),
                 "responses": torch.tensor([x + [pad] * (rl - len(x)) for x in r_ids]),
                 "attention_mask": torch.tensor([[0] * (pl - len(a)) + [1] * len(a) + [1] * len(b) + [0] * (rl - len(b))
                                                 for a, b in zip(p_ids, r_ids, strict=True)])},
        non_tensors={"uid": np.array(uids, dtype=object),
                     "extra_info": np.array([{"prompt": p} for p in prompts], dtype=object)})
    start = time.perf_counter()
    outs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    return [dict(o, text=t) for o, t in zip(outs, texts, strict=True)], time.perf_counter() - start


def _check(outs: list[dict[str, Any]], _seconds: float) -> None:
    # the stalled group's deadline, not its 600 s stall, ends it (its status and reason below say so); every other
    # group is ok (one held past the deadline would be a timeout too): statuses, not a measured time
    for k, out in enumerate(outs):
        info = out["reward_extra_info"]
        if k // 2 == STALLED:
            assert info["ok"] is False and info["status"] == TIMEOUT, info
            assert f"timeout_s={TIMEOUT_S:g}" in info["reason"] and out["reward_score"] == -7.0
        else:
            assert info["ok"] is True and info["status"] == "ok", (k, info)
            assert out["reward_score"] == (1.0 if out["text"].startswith("good") else 0.0), (k, out)


def _worker(brrm_config: dict[str, Any], judge: Any = None) -> Any:
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from brrm.rlhf.recipe import JudgeSource
    from brrm.rlhf.verl_manager import BrrmGroupRewardManager
    from brrm.testing import build_tiny_tokenizer

    config = _config(brrm_config)
    manager = BrrmGroupRewardManager(config, build_tiny_tokenizer())
    if judge is not None:
        manager.source = JudgeSource(judge)
        manager.buffer.judge = manager.source.get
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config, worker.reward_manager, worker.loop = config, manager, manager.loop
    return worker


def test_a_stalled_group_costs_only_its_own_samples_locally_two_rounds():
    from brrm.testing import build_tiny_tokenizer
    from tests.test_request_isolation import stalling_brrm

    worker = _worker({}, stalling_brrm())
    tok = build_tiny_tokenizer()
    try:
        for tag in ("first", "second"):
            _check(*_round(worker, tok, tag))
        assert worker.reward_manager.buffer.calls == 2 * GROUPS  # each group its own job of the scheduler
        scheduler = worker.reward_manager.buffer.service().scheduler
        for _ in range(100):  # the last stalled call is abandoned stall_timeout_s after its group left
            if scheduler.abandoned == 2:
                break
            time.sleep(0.05)
        assert scheduler.abandoned == 2 and scheduler.running == 0  # the two stalled calls, alone
    finally:
        worker.reward_manager.buffer.close()


@pytest.fixture(scope="module")
def stall_server(tmp_path_factory):
    args = ["--factory", "tests.test_request_isolation:stalling_brrm", "--concurrency", "auto", "--max-wait-ms",
            "100", "--stall-timeout", "0.5", "--deadline", "30", "--max-abandoned", "8"]
    with serving_in_process(args, tmp_path_factory.mktemp("verl-groups")) as srv:
        yield srv


def test_a_stalled_group_costs_only_its_own_samples_via_url_two_rounds(stall_server):
    from brrm.testing import build_tiny_tokenizer

    worker = _worker({"url": stall_server.url})
    tok = build_tiny_tokenizer()
    try:
        for tag in ("remote-first", "remote-second"):
            _check(*_round(worker, tok, tag))
    finally:
        worker.reward_manager.buffer.close()
