"""RemoteJudge: the RewardJudge contract over a real ``brrm serve`` (tiny models on 127.0.0.1), checked against
the same judge loaded locally — same results, same errors. The servers run in this process
(:func:`tests.serve_helpers.serving_in_process`: the CLI's flags and app on a real socket): the client is what is
tested."""

from __future__ import annotations

import httpx
import pytest

import brrm
from brrm.service import RemoteJudge
from tests.serve_helpers import free_port, serving_in_process

pytestmark = pytest.mark.timeout(240)
BRRM_OPTS = {"max_new_tokens": 420, "block_token_cap": 8, "thinking": "off"}
BRRM_ARGS = ["--kind", "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off"]
PROMPTS = ["What is 2+2?", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]]


def _without_provenance(d):
    """A result dict without provenance at any depth (the server names its model by folder, never by path)."""
    if isinstance(d, dict):
        return {k: _without_provenance(v) for k, v in d.items() if k != "provenance"}
    if isinstance(d, list):
        return [_without_provenance(v) for v in d]
    return d


def _same(remote, local):
    assert remote.provenance is not None and remote.provenance.seed == local.provenance.seed
    return _without_provenance(remote.to_dict()) == _without_provenance(local.to_dict())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("remote")
    return tmp, {"bt": str(save_tiny_qwen3(tmp / "rm", sequence_classification=True)),
                 "brrm": str(save_tiny_qwen3(tmp / "judge"))}


@pytest.fixture(scope="module")
def bt(models):
    tmp, paths = models
    with serving_in_process(["--model", paths["bt"]], tmp) as srv, RemoteJudge(srv.url) as remote:
        yield remote, brrm.load(paths["bt"])


@pytest.fixture(scope="module")
def pairwise(models):
    tmp, paths = models
    with serving_in_process(["--model", paths["brrm"], *BRRM_ARGS], tmp) as srv, RemoteJudge(srv.url) as remote:
        yield remote, brrm.load(paths["brrm"], kind="brrm", **BRRM_OPTS)


def test_remote_is_a_reward_judge_describing_the_served_model(bt):
    remote, local = bt
    assert isinstance(remote, brrm.RewardJudge)
    assert remote.info.kind == local.info.kind == "bt" and remote.info.template_hash == local.info.template_hash


def test_scalar_rewards_equal_the_local_judge(bt):
    remote, local = bt
    got = remote.score(PROMPTS, ["4", "Blue."], ids=["a", "b"])
    want = local.score(PROMPTS, ["4", "Blue."], ids=["a", "b"])
    assert [r.status for r in got] == [brrm.Status.OK] * 2
    assert [r.reward for r in got] == pytest.approx([r.reward for r in want], abs=1e-6)
    assert [r.id for r in got] == ["a", "b"]
    g, w = remote.rank("What is 2+2?", ["4", "5", "four"]), local.rank("What is 2+2?", ["4", "5", "four"])
    assert g.ranking == w.ranking and g.strategy == w.strategy == "scores"
    assert [r.reward for r in g.rewards] == pytest.approx([r.reward for r in w.rewards], abs=1e-6)


def test_pairwise_judgments_equal_the_local_judge(pairwise):
    remote, local = pairwise
    got = remote.judge_pairs(PROMPTS, ["4", "Blue."], ["5", "Seven."], ids=["p1", "p2"], swap=True)
    want = local.judge_pairs(PROMPTS, ["4", "Blue."], ["5", "Seven."], ids=["p1", "p2"], swap=True)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))
    assert len(got[0].sub_judgments) == 2
    (g,), (w,) = remote.score(["What is 2+2?"], ["4"], references=["5"]), local.score(["What is 2+2?"], ["4"],
                                                                                      references=["5"])
    assert g.status is w.status and _same(g, w)
    groups = [["4", "5", "four"], ["Red", "Blue"]]
    got_g = remote.rank_groups(["What is 2+2?", "Name a colour."], groups, strategy="circular")
    want_g = local.rank_groups(["What is 2+2?", "Name a colour."], groups, strategy="circular")
    assert [r.ranking for r in got_g] == [r.ranking for r in want_g]
    assert [r.n_judgments for r in got_g] == [r.n_judgments for r in want_g] == [3, 2]


def test_callers_mistakes_raise_like_a_local_judge(pairwise):
    remote, local = pairwise
    for judge in (remote, local):
        with pytest.raises(brrm.ConfigError, match="same length"):
            judge.judge_pairs(["q", "r"], ["a"], ["b"])
        with pytest.raises(brrm.ConfigError, match="reference"):
            judge.score(["q"], ["a"])
        with pytest.raises(brrm.ConfigError, match="end with a user or tool turn"):
            judge.judge_pairs([[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]], ["a"],
                              ["b"])


def test_an_unreachable_server_is_a_clear_error_and_a_dead_one_is_each_items_backend_error(models):
    with pytest.raises(brrm.ConfigError, match="cannot be reached"):
        RemoteJudge(f"http://127.0.0.1:{free_port()}")
    tmp, paths = models
    with serving_in_process(["--model", paths["bt"]], tmp) as srv:
        remote = RemoteJudge(srv.url, retries=0)
        srv.stop()
        out = remote.score(["q", "r"], ["a", "b"])
    assert [r.status for r in out] == [brrm.Status.BACKEND_ERROR] * 2 and "brrm serve" in out[0].reason


def test_cost_and_with_options_as_the_local_judge(pairwise, bt):
    for remote, local in (pairwise, bt):
        for shape, n, kw in (("pairs", 3, {"swap": True}), ("score", 4, {}), ("group", 5, {"strategy": "circular"})):
            assert remote.cost(shape, n, **kw) == local.cost(shape, n, **kw), (shape, remote.info.kind)
    remote, local = pairwise
    variant = remote.with_options(seed=7, max_new_tokens=420)
    got = variant.judge_pairs(["What is 2+2?"], ["4"], ["5"])
    want = local.with_options(seed=7).judge_pairs(["What is 2+2?"], ["4"], ["5"])
    assert _same(got[0], want[0]) and got[0].provenance.seed == want[0].provenance.seed
    with pytest.raises(brrm.ConfigError, match="cannot be varied over brrm serve"):
        remote.with_options(dtype="float16")
    variant.close()


class _LostReply(httpx.BaseTransport):
    """HTTP to the server, except that the first POST's reply is lost on the way back and the client is answered a
    bare ``500 Internal Server Error`` instead: what Ray Serve's HTTP proxy answers when the ingress replica that
    held the request dies, or what a load balancer does with an upstream it lost."""

    def __init__(self) -> None:
        self.inner, self.seen = httpx.HTTPTransport(), []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        reply = self.inner.handle_request(request)
        if request.method != "POST":
            return reply
        reply.read()
        self.seen.append((request.headers["idempotency-key"], reply.status_code,
                          reply.headers.get("idempotent-replayed")))
        if len(self.seen) > 1:
            return reply
        return httpx.Response(500, text="Internal Server Error", headers={"content-type": "text/plain"})


def test_a_reply_lost_at_a_gateway_is_retried_under_its_key_and_replayed_not_judged_again(bt, monkeypatch):
    from brrm.service import transport

    monkeypatch.setattr(transport, "SLEEP", lambda _s: None)
    remote, local = bt
    lost = _LostReply()
    with RemoteJudge(remote.url, transport=lost) as judge:
        got = judge.score(PROMPTS, ["4", "Blue."], ids=["a", "b"])
    want = local.score(PROMPTS, ["4", "Blue."], ids=["a", "b"])
    assert [r.status for r in got] == [brrm.Status.OK] * 2
    assert [r.reward for r in got] == pytest.approx([r.reward for r in want], abs=1e-6)
    (key1, code1, replayed1), (key2, code2, replayed2) = lost.seen  # the first run's reply, then its replay
    assert key1 == key2 and (code1, code2) == (200, 200) and (replayed1, replayed2) == (None, "true")

