"""verl: the async compute_score (local judge, brrm serve URL), its per-sample timeout (N04), the cohort buffer, and
the group-aware reward manager run through verl's own reward-loop code where verl imports (see the last section).

The URL mode is tested against a small in-test HTTP stub of ``brrm serve``'s documented ``POST /v1/score``
contract (backed by the tiny real BT model), because the real server lands separately.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import brrm
from brrm.backends.fake import FakeBackend
from brrm.rlhf.cohorts import CohortBuffer
from brrm.rlhf.verl import TIMEOUT, VerlRewardConfig, VerlScorer, close_all, compute_score
from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3
from tests.test_rlhf_groups import T1, scripted_brrm

pytestmark = pytest.mark.timeout(90)
KEYS = {"score", "ok", "status", "reason", "judge_seconds"}


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("verl_rm"), sequence_classification=True))


def _stalling_judge(release: threading.Event):
    """A scripted BR-RM whose turn 1 stalls (up to 120 s, until ``release``) on a response containing <<STALL>>; its
    backend declares concurrent calls (a judge that does not is called one at a time, so a stall holds it)."""
    tok = build_tiny_tokenizer()

    def script(prompt, request):
        if "<<STALL>>" in prompt:
            release.wait(120)
        if "[The Begin of Analysis on Response 1]" not in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return T1
        return "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"

    return brrm.load(kind="brrm", backend=FakeBackend(tok, script, concurrent=True), decoding="faithful")


def _brrm_threads():
    """The scorer's threads: its scheduler's loop and the judge calls' workers."""
    return sum(t.name in ("brrm-service", "brrm-judge") for t in threading.enumerate())


def _threads_back_to(baseline, timeout_s=5.0):
    end = time.monotonic() + timeout_s
    while _brrm_threads() > baseline and time.monotonic() < end:
        time.sleep(0.02)
    return _brrm_threads()


def test_n04_stalled_sample_times_out_without_blocking_others_or_leaking_threads():
    release = threading.Event()
    scorer = VerlScorer(VerlRewardConfig(timeout_s=3.0, reference_key="reference"), judge=_stalling_judge(release))
    extra = {"prompt": "What is 17*6?", "reference": "17*6 = 102"}
    baseline = _brrm_threads()

    async def one(text):
        t = time.perf_counter()
        return await scorer.score(text, "102", dict(extra)), time.perf_counter() - t

    try:
        alone = asyncio.run(one("17*6=102"))[1]

        async def both():
            return await asyncio.gather(one("<<STALL>> 17*6=102"), one("17*6=102"))

        (r1, t1), (r2, t2) = asyncio.run(both())
        assert t1 <= 3.0 + 1.0 and r1["status"] == TIMEOUT and r1["ok"] is False and r1["score"] == 0.0
        assert set(r1) == set(r2) == KEYS and r2["ok"] is True and r2["status"] == "ok"
        assert t2 <= alone + 1.0
        assert baseline < _brrm_threads() <= baseline + 1 + scorer.config.max_workers
    finally:
        release.set()
        scorer.close()
    assert _threads_back_to(baseline) == baseline


def test_compute_score_from_config_file_and_env(rm_path, tmp_path, monkeypatch):
    cfg = tmp_path / "brrm_verl.json"
    cfg.write_text(json.dumps({"model": rm_path, "kind": "bt", "timeout_s": 30}))
    judge = brrm.load(rm_path)
    want = judge.score(["Say hello."], ["Hello there!"])[0].reward
    try:
        out = asyncio.run(compute_score("demo", "Hello there!", None, {"prompt": "Say hello."}, brrm_config=str(cfg)))
        assert set(out) == KEYS and out["ok"] and out["score"] == pytest.approx(want, abs=1e-5)
        monkeypatch.setenv("BRRM_VERL_CONFIG", str(cfg))
        again = asyncio.run(compute_score(data_source="demo", solution_str="Hello there!", ground_truth=None,
                                          extra_info={"prompt": "Say hello."}))
        assert again["score"] == pytest.approx(want, abs=1e-5)
        empty = asyncio.run(compute_score("demo", "", None, {"prompt": "Say hello."}))  # C19: explicit outcome
        assert empty["ok"] is False and empty["status"] == "empty" and set(empty) == KEYS
        with pytest.raises(brrm.ConfigError, match="extra_info has no 'prompt'"):
            asyncio.run(compute_score("demo", "x", None, {"question": "Say hello."}))
    finally:
        close_all()
    with pytest.raises(brrm.ConfigError, match="unknown brrm verl config key 'modle'"):
        VerlRewardConfig.from_mapping({"modle": "x"})
    with pytest.raises(brrm.ConfigError, match="timeout_s"):
        VerlRewardConfig(timeout_s=0)


class _Stub(BaseHTTPRequestHandler):
    """brrm serve's GET /v1/models and POST /v1/score contract over a real tiny BT judge; stalls on <<STALL>>,
    miscounts on <<N19>>."""

    judge = None
    release = threading.Event()

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        items = body["items"]
        if any("<<STALL>>" in it["response"] for it in items):
            self.release.wait(30)
        rewards = [r.to_dict() for r in self.judge.score([it.get("prompt") or it["conversation"] for it in items],
                                                          [it["response"] for it in items])]
        if any("<<N19>>" in it["response"] for it in items):
            rewards = rewards + rewards
        data = json.dumps({"model": "tiny", "rewards": rewards}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - GET /v1/models: the served judge, as brrm serve describes it
        info = {k: v for k, v in self.judge.info.to_dict().items() if k != "spec"}
        data = json.dumps({"object": "list", "data": [{**info, "limits": {"item_limit": 64}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_url_mode_against_a_serve_stub(rm_path):
    _Stub.judge = brrm.load(rm_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    baseline = _brrm_threads()
    scorer = VerlScorer(VerlRewardConfig(url=url, timeout_s=2.0))
    try:
        ok = asyncio.run(scorer.score("Hello there!", None, {"prompt": "Say hello."}))
        assert ok["ok"] and ok["score"] == pytest.approx(_Stub.judge.score(["Say hello."], ["Hello there!"])[0].reward)
        # the deadline ends it (its status says so): the stub holds it until the test ends, a hang meets the
        # module's pytest timeout
        stalled = asyncio.run(scorer.score("<<STALL>>", None, {"prompt": "Say hello."}))
        assert stalled["status"] == TIMEOUT
        bad = asyncio.run(scorer.score("<<N19>>", None, {"prompt": "Say hello."}))
        assert bad["ok"] is False and "2 rewards for 1 item" in bad["reason"]
        assert asyncio.run(scorer.score("", None, {"prompt": "Say hello."}))["status"] == "empty"
        # the remote mode runs through the scorer's scheduler: its loop and at most 2 * max_workers call workers
        assert baseline < _brrm_threads() <= baseline + 1 + 2 * scorer.config.max_workers
    finally:
        _Stub.release.set()
        scorer.close()
        server.shutdown()
        server.server_close()
    assert _threads_back_to(baseline) == baseline


def test_cohort_buffer_groups_per_sample_calls_and_times_out_incomplete_groups():
    """With judge_partial=True (an opt-in since issue 18: by default an incomplete group is not judged, below)."""
    judge, backend = scripted_brrm()
    buf = CohortBuffer(lambda: judge, group_size=3, strategy="circular", cohort_timeout_s=0.5, judge_partial=True)

    async def run():
        calls = [buf.submit("u1", "Q1", t) for t in ("a", "bbb", "cc")]
        calls += [buf.submit("u2", "Q2", t) for t in ("x", "yyyy")]  # one member never arrives: judged at deadline
        calls += [buf.submit("u3", "Q3", "lonely")]  # a lone member: failed, not hung
        return await asyncio.gather(*calls)

    out = asyncio.run(run())  # ends: the incomplete groups are answered at their deadline, not waited for
    assert [r.reward for r in out[:3]] == [0.0, 1.0, 0.5]  # longer wins around the ring
    assert [r.reward for r in out[3:5]] == [0.0, 1.0]
    assert all("incomplete group: 2 of 3" in r.reason for r in out[3:5])  # the partial judging is recorded
    assert out[5].status is brrm.Status.INCOMPLETE_GROUP and "incomplete group: 1 of 3" in out[5].reason
    assert buf.calls == 2  # the complete group in one call, the partial one at its deadline


def test_incomplete_cohort_is_not_judged_by_default():
    """Issue 18: a group missing a member after its deadline is never returned as plain ok rewards."""
    judge, backend = scripted_brrm()
    buf = CohortBuffer(lambda: judge, group_size=3, strategy="circular", cohort_timeout_s=0.3)

    async def run():
        return await asyncio.gather(*[buf.submit("u2", "Q2", t) for t in ("x", "yyyy")])

    out = asyncio.run(run())
    assert [r.status for r in out] == [brrm.Status.INCOMPLETE_GROUP] * 2
    assert all("incomplete group: 2 of 3" in r.reason for r in out) and buf.calls == 0


@pytest.mark.parametrize("strategy", ["circular", "knockout"])
def test_cohort_rewards_do_not_depend_on_arrival_order(strategy):
    """Issue 18: the same four completions, arriving in every rotation and reversed, get the same rewards."""
    import itertools

    texts = ["a", "bbbb", "cc", "ddd"]
    seen = set()
    for order in itertools.islice(itertools.permutations(range(4)), 0, 24, 5):
        judge, _ = scripted_brrm()
        buf = CohortBuffer(lambda judge=judge: judge, group_size=4, strategy=strategy, cohort_timeout_s=5)

        async def run(order=order, buf=buf):
            return await asyncio.gather(*[buf.submit("g", "Q", texts[i]) for i in order])

        out = asyncio.run(run())
        seen.add(tuple(sorted((texts[i], r.reward) for i, r in zip(order, out, strict=True))))
    assert len(seen) == 1, seen


# ------------------------------------------------------------------- verl's own reward-loop code (if installed)
def test_group_manager_in_verls_reward_loop(rm_path, tmp_path):
    """Runs BrrmGroupRewardManager through verl's RewardLoopWorker.compute_score_batch (per-sample concurrent
    run_single calls) on a DataProto batch, then verl's rm_scores assembly. Needs verl (``pip install --no-deps
    verl==0.9.1`` plus its light imports, see README); skipped where verl does not import."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from brrm.rlhf.verl_manager import BrrmGroupRewardManager

    judge_dir = str(save_tiny_qwen3(tmp_path / "judge"))
    tok = brrm.testing.build_tiny_tokenizer()
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 2}, "model": {"path": judge_dir, "tokenizer_path": judge_dir}},
        "data": {"train_batch_size": 2},
        "trainer": {"experiment_name": "t"},
        "reward": {"num_workers": 1, "custom_reward_function": {"path": None},
                   "reward_model": {"enable": False},
                   "reward_manager": {"source": "importlib", "name": "BrrmGroupRewardManager",
                                      "module": {"path": "pkg://brrm.rlhf.verl_manager"}},
                   "reward_kwargs": {"brrm_config": {"model": judge_dir, "kind": "brrm", "strategy": "circular",
                                                     "options": {"temperature": 0, "max_new_tokens": 450,
                                                                 "block_token_cap": 8}}}}})
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    manager_cls = resolve_reward_manager_cls(config)  # verl's importlib path to our class
    assert manager_cls.__name__ == "BrrmGroupRewardManager"
    worker.config, worker.reward_manager = config, manager_cls(config, tok)
    worker.loop = worker.reward_manager.loop  # verl's get_event_loop(), shared as in RewardLoopWorker
    prompts = ["What is 2+2?", "Name a colour."]
    responses = ["4", "", "Blue", "Red"]  # response 1 is empty (C19): it loses and gets no reward position
    p_ids = [tok(p)["input_ids"] for p in prompts for _ in range(2)]
    r_ids = [tok(r)["input_ids"] for r in responses]
    pl, rl = max(map(len, p_ids)), max(max(map(len, r_ids)), 1)
    pad = tok.pad_token_id
    prompts_t = torch.tensor([[pad] * (pl - len(x)) + x for x in p_ids])
    resp_t = torch.tensor([x + [pad] * (rl - len(x)) for x in r_ids])
    mask = torch.tensor([[0] * (pl - len(a)) + [1] * len(a) + [1] * len(b) + [0] * (rl - len(b))
                         for a, b in zip(p_ids, r_ids, strict=True)])
    data = DataProto.from_dict(tensors={"prompts": prompts_t, "responses": resp_t, "attention_mask": mask},
                               non_tensors={"uid": np.array(["g0", "g0", "g1", "g1"], dtype=object),
                                            "extra_info": np.array([{"prompt": p} for p in prompts for _ in range(2)],
                                                                   dtype=object)})
    outs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    scores = [o["reward_score"] for o in outs]
    assert len(outs) == 4 and all(set(o["reward_extra_info"]) == {"score", "ok", "status", "reason"} for o in outs)
    assert scores[0] == 1.0 and scores[1] == 0.0  # the empty response loses in both orders
    assert 0.0 <= scores[2] <= 1.0 and scores[2] + scores[3] == pytest.approx(1.0)
    assert worker.reward_manager.buffer.calls == 2  # each group its own job of the service scheduler
    rm = BrrmGroupRewardManager.assemble_rm_scores(data, scores)
    assert rm.shape == resp_t.shape and rm[1].abs().sum() == 0 and rm[0, len(r_ids[0]) - 1] == 1.0
    bad = OmegaConf.merge(config, {"reward": {"num_workers": 4}, "data": {"train_batch_size": 2}})
    with pytest.raises(brrm.ConfigError, match="cut GRPO groups"):
        BrrmGroupRewardManager(bad, tok)


def test_compute_score_through_verls_naive_reward_manager(rm_path, tmp_path):
    """verl loads brrm.rlhf.verl (``path: pkg://brrm.rlhf.verl``, get_custom_reward_fn), sees a coroutine
    function, and awaits it per sample in its NaiveRewardManager; the extra info keys are the same for every
    sample."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://brrm.rlhf.verl", "name": "compute_score",
        "reward_kwargs": {"brrm_config": {"model": rm_path, "kind": "bt", "timeout_s": 30}}}}})
    fn = get_custom_reward_fn(config)
    tok = build_tiny_tokenizer()
    manager = NaiveRewardManager(config, tok, fn)
    assert manager.is_async_reward_score
    p, r = tok("Say hello.")["input_ids"], tok("Hello there!")["input_ids"]
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([p]), "responses": torch.tensor([r]),
                 "attention_mask": torch.ones(1, len(p) + len(r), dtype=torch.long)},
        non_tensors={"data_source": np.array(["demo"], dtype=object),
                     "reward_model": np.array([{"ground_truth": None}], dtype=object),
                     "extra_info": np.array([{"prompt": "Say hello."}], dtype=object)})
    try:
        out = manager.loop.run_until_complete(manager.run_single(data))
    finally:
        close_all()
    want = brrm.load(rm_path).score(["Say hello."], ["Hello there!"])[0].reward
    assert out["reward_score"] == pytest.approx(want, abs=1e-5)
    assert KEYS <= set(out["reward_extra_info"]) and out["reward_extra_info"]["status"] == "ok"


def test_compute_score_without_extra_info_is_that_samples_invalid_input(rm_path):
    """Issue 18: compute_score returns a result for any input; extra_info=None is invalid_input, not a raise."""
    cfg = {"model": rm_path, "kind": "bt", "timeout_s": 30}
    try:
        out = asyncio.run(compute_score("demo", "Hello", None, None, brrm_config=cfg))
    finally:
        close_all()
    assert set(out) == KEYS and out["ok"] is False and out["status"] == "invalid_input"
    assert "extra_info" in out["reason"]


def _verl_assembly(outputs):
    """verl's own RewardLoopManager.compute_rm_score assembly over per-sample outputs (Ray calls short-cut)."""
    import types

    from verl.experimental.reward_loop import reward_loop

    class _Worker:
        class compute_score_batch:  # noqa: N801 - mimics a Ray actor method
            @staticmethod
            def remote(chunk):
                return outputs

    manager = types.SimpleNamespace(reward_model_manager=None, reward_loop_workers=[_Worker()],
                                    reward_manager_cls=types.SimpleNamespace(
                                        assemble_rm_scores=lambda data, scores: __import__("torch").tensor(scores)))
    real_get = reward_loop.ray.get
    reward_loop.ray.get = lambda refs: refs
    try:
        import torch
        from verl import DataProto

        batch = DataProto.from_dict(tensors={"row": torch.arange(len(outputs))})
        return reward_loop.RewardLoopManager.compute_rm_score(manager, batch)
    finally:
        reward_loop.ray.get = real_get


def test_brrm_beside_a_float_reward_in_verls_own_manager_and_assembly(rm_path):
    """Mixing brrm's dict with a plain float crashes verl's assembly (keys from the first sample);
    route_by_data_source / with_brrm_keys give every sample brrm's keys."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    from brrm.rlhf.verl import RESULT_KEYS, route_by_data_source

    def exact_match(data_source, solution_str, ground_truth, extra_info, **kwargs):
        return float(solution_str.strip() == str(ground_truth))

    async def plain(data_source, *args, **kwargs):  # what a user writes without the wrapper
        if data_source == "chat":
            return await compute_score(data_source, *args, **kwargs)
        return exact_match(data_source, *args, **kwargs)

    tok = build_tiny_tokenizer()
    kw = {"brrm_config": {"model": rm_path, "kind": "bt", "timeout_s": 30}}
    config = OmegaConf.create({"reward": {"custom_reward_function": {"reward_kwargs": kw}}})
    rows = [("chat", "Say hello.", "Hello there!", None), ("math", "2+2?", "4", "4")]

    def run(fn):
        manager = NaiveRewardManager(config, tok, functools.partial(fn, **kw))  # as get_custom_reward_fn binds
        outs = []
        for source, prompt, response, truth in rows:
            p, r = tok(prompt)["input_ids"], tok(response)["input_ids"]
            data = DataProto.from_dict(
                tensors={"prompts": torch.tensor([p]), "responses": torch.tensor([r]),
                         "attention_mask": torch.ones(1, len(p) + len(r), dtype=torch.long)},
                non_tensors={"data_source": np.array([source], dtype=object),
                             "reward_model": np.array([{"ground_truth": truth}], dtype=object),
                             "extra_info": np.array([{"prompt": prompt}], dtype=object)})
            outs.append(manager.loop.run_until_complete(manager.run_single(data)))
        return outs

    try:
        with pytest.raises(KeyError):  # the failure kind: verl's own assembly of mixed results
            _verl_assembly(run(plain))
        outs = run(route_by_data_source({"chat": compute_score, "math": exact_match}))
    finally:
        close_all()
    assembled = _verl_assembly(outs)
    assert set(RESULT_KEYS) <= set(assembled.meta_info["reward_extra_keys"])
    assert list(assembled.non_tensor_batch["status"]) == ["ok", "ok"]
    assert outs[1]["reward_score"] == 1.0 and outs[0]["reward_extra_info"]["ok"]


@pytest.mark.parametrize("failed_reward,want", [("group_mean", 0.5), (-1.0, -1.0)])
def test_group_manager_gives_a_failed_sample_a_group_neutral_reward(tmp_path, failed_reward, want):
    """Issue 18: verl needs a number; a failed sample gets its group's ok mean (neutral for the GRPO advantage)
    by default, a constant on request, and is marked failed in reward_extra_info."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from brrm.rlhf.recipe import JudgeSource
    from brrm.rlhf.verl_manager import BrrmGroupRewardManager

    tok = build_tiny_tokenizer()
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 3}}, "data": {"train_batch_size": 1}, "trainer": {},
        "reward": {"num_workers": 1, "custom_reward_function": {"path": "x"}, "reward_model": {"enable": False},
                   "reward_kwargs": {"brrm_config": {"kind": "brrm", "strategy": "round_robin",
                                                     "failed_reward": failed_reward}}}})
    manager = BrrmGroupRewardManager(config, tok)
    judge, _ = scripted_brrm()
    manager.source = JudgeSource(judge)
    manager.buffer.judge = manager.source.get
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config, worker.reward_manager, worker.loop = config, manager, manager.loop
    responses = ["short", "a much longer answer", "<<FAIL>>"]
    p = tok("Q")["input_ids"]
    r_ids = [tok(r)["input_ids"] for r in responses]
    rl = max(map(len, r_ids))
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([p] * 3),
                 "responses": torch.tensor([x + [tok.pad_token_id] * (rl - len(x)) for x in r_ids]),
                 "attention_mask": torch.tensor([[1] * len(p) + [1] * len(x) + [0] * (rl - len(x)) for x in r_ids])},
        non_tensors={"uid": np.array(["g"] * 3, dtype=object),
                     "extra_info": np.array([{"prompt": "Q"}] * 3, dtype=object)})
    outs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    scores = [o["reward_score"] for o in outs]
    assert scores[:2] == [0.0, 1.0] and scores[2] == pytest.approx(want)
    info = outs[2]["reward_extra_info"]
    assert info["ok"] is False and info["status"] == "backend_error" and "503" in info["reason"]
    with pytest.raises(brrm.ConfigError, match="failed_reward='none' cannot be used with verl"):
        BrrmGroupRewardManager(OmegaConf.merge(config, {"reward": {"reward_kwargs": {"brrm_config": {
            "failed_reward": "none"}}}}), tok)


def test_two_stalled_of_eight_leave_the_six_healthy_ok_in_that_batch_and_the_next():
    """Issue 18: with timeout_s=2, two samples that stall never make healthy samples time out — not in their batch,
    and not in the next one, while the stalled calls are still running in the background."""
    release = threading.Event()
    scorer = VerlScorer(VerlRewardConfig(timeout_s=2.0, reference_key="reference", max_workers=4),
                        judge=_stalling_judge(release))
    extra = {"prompt": "What is 17*6?", "reference": "17*6 = 102"}
    texts = ["<<STALL>> a", "b 102", "c 102", "<<STALL>> d", "e 102", "f 102", "g 102", "h 102"]

    async def batch(tag):
        return await asyncio.gather(*[scorer.score(f"{t} {tag}", "102", dict(extra)) for t in texts])

    try:
        for tag in ("first", "second"):
            out = asyncio.run(batch(tag))
            statuses = [r["status"] for r in out]
            assert statuses.count(TIMEOUT) == 2 and statuses.count("ok") == 6, (tag, statuses)
            assert [r["ok"] for r in out] == ["STALL" not in t for t in texts]
    finally:
        release.set()
        scorer.close()


def test_group_manager_honours_timeout_s(tmp_path):
    """Issue 18: BrrmGroupRewardManager took 32 s for a 2 s deadline; a stalled group judgment now answers
    ``timeout`` after cohort_timeout_s + timeout_s, with the fallback score, marked failed."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from brrm.rlhf.recipe import JudgeSource
    from brrm.rlhf.verl_manager import BrrmGroupRewardManager

    tok = build_tiny_tokenizer()
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 2}}, "data": {"train_batch_size": 1}, "trainer": {},
        "reward": {"num_workers": 1, "custom_reward_function": {"path": "x"}, "reward_model": {"enable": False},
                   "reward_kwargs": {"brrm_config": {"kind": "brrm", "timeout_s": 1.0, "cohort_timeout_s": 0.5,
                                                     "strategy": "circular", "fallback_score": -1.0}}}})
    release = threading.Event()
    manager = BrrmGroupRewardManager(config, tok)
    manager.source = JudgeSource(_stalling_judge(release))
    manager.buffer.judge = manager.source.get
    worker = RewardLoopWorker.__new__(RewardLoopWorker)
    worker.config, worker.reward_manager, worker.loop = config, manager, manager.loop
    p = tok("Q")["input_ids"]
    r_ids = [tok(r)["input_ids"] for r in ("<<STALL>> a", "<<STALL>> b")]
    rl = max(map(len, r_ids))
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([p] * 2),
                 "responses": torch.tensor([x + [tok.pad_token_id] * (rl - len(x)) for x in r_ids]),
                 "attention_mask": torch.tensor([[1] * len(p) + [1] * len(x) + [0] * (rl - len(x)) for x in r_ids])},
        non_tensors={"uid": np.array(["g"] * 2, dtype=object), "extra_info": np.array([{"prompt": "Q"}] * 2,
                                                                                        dtype=object)})
    try:  # ends by the 1 s deadline (the statuses below): the stalling judge is released only afterwards
        outs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    finally:
        release.set()
    assert [o["reward_extra_info"]["status"] for o in outs] == [TIMEOUT] * 2
    assert [o["reward_score"] for o in outs] == [-1.0, -1.0] and not any(o["reward_extra_info"]["ok"] for o in outs)
