"""The complete RewardJudge: declared traits, cost(shape, n) counted against the model calls really made, and
with_options variants on the same backend (real BR-RM code over a scripted backend; a tiny real BT model)."""

from __future__ import annotations

import pytest

import brrm
from brrm import ConfigError
from brrm.backends.fake import FakeBackend
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer
from tests.audit_support import T1

VERDICT = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"


def _script(prompt, request):
    return VERDICT if "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1] else T1


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture
def pair(tok):
    backend = FakeBackend(tok, _script)
    return brrm.load(kind="brrm", backend=backend, decoding="faithful"), backend


@pytest.fixture(scope="module")
def bt():
    from brrm.backends.transformers import TransformersBackend

    model, tok = build_tiny_qwen3(seed=1, sequence_classification=True)
    return brrm.load(kind="bt", backend=TransformersBackend(model, tok))


def test_traits_are_declared_per_kind(pair, bt):
    info = pair[0].info
    assert (info.pairwise, info.takes_principle, info.needs_reference) == (True, False, True)
    assert (bt.info.pairwise, bt.info.takes_principle, bt.info.needs_reference) == (False, False, False)
    assert brrm.JudgeInfo.from_dict({**bt.info.to_dict(), "kind": "custom", "pairwise": False, "takes_principle": True,
                             "needs_reference": False}).takes_principle is True
    with pytest.raises(ConfigError, match="JudgeInfo.pairwise must be given for kind 'custom'"):
        brrm.JudgeInfo.from_dict({**bt.info.to_dict(), "kind": "custom", "pairwise": None})


@pytest.mark.parametrize(("strategy", "swap"), [("round_robin", False), ("circular", True), ("knockout", False)])
def test_cost_of_a_group_is_the_judgments_it_runs(pair, strategy, swap):
    judge, backend = pair
    group = [f"answer {k} " + "x" * k for k in range(5)]
    before = backend.stats["requests"]
    judge.rank("q", group, strategy=strategy, swap=swap)
    turns = backend.stats["requests"] - before
    assert turns == 2 * judge.cost("group", 5, strategy=strategy, swap=swap)  # two turns per judgment
    assert judge.cost("group", 5, strategy=strategy, swap=swap) == {"round_robin": 20, "circular": 10,
                                                                    "knockout": 4}[strategy]


def test_cost_of_pairs_and_scores(pair, bt):
    judge, backend = pair
    before = backend.stats["requests"]
    judge.judge_pairs(["q"] * 3, ["a1", "a2", "a3"], ["b1", "b2", "b3"], swap=True)
    assert backend.stats["requests"] - before == 2 * judge.cost("pairs", 3, swap=True) == 2 * 6
    assert judge.cost("score", 4) == 4 and judge.cost("pairs", 0) == 0
    assert bt.cost("pairs", 3) == 6 and bt.cost("score", 3) == 3 and bt.cost("group", 4) == 4
    assert bt.cost("group", 4, strategy="reference") == 5
    with pytest.raises(ConfigError, match="shape 'triples' is not valid; expected one of pairs, score, group"):
        judge.cost("triples", 2)
    with pytest.raises(ConfigError, match="scalar score"):
        judge.cost("group", 3, strategy="scores")


def test_with_options_is_a_variant_on_the_same_backend(pair, bt):
    judge, backend = pair
    variant = judge.with_options(max_new_tokens=64, seed=7, swap=True)
    assert variant.info.sampling is not None and variant.info.sampling.max_new_tokens == 64
    assert variant.info.sampling.seed == 7 and variant.info.composition.swap is True
    assert judge.info.sampling is not None and judge.info.sampling.seed == 0 and judge.info.composition.swap is False
    assert variant.info.to_dict()["options"]["sampling"]["max_new_tokens_per_turn"] == 64  # the record's key
    before = backend.stats["requests"]
    out = variant.judge("q", "a", "b")
    # swap: both orders, two turns each; the script always answers 1, so the two orders disagree (a tie)
    assert out.winner is brrm.Verdict.TIE and out.consistent is False and backend.stats["requests"] - before == 4
    assert out.provenance.seed != judge.judge("q", "a", "b").provenance.seed
    with pytest.raises(ConfigError, match="option 'margin' cannot be varied on this judge; valid: .*decoding"):
        judge.with_options(margin=0.1)
    with pytest.raises(ConfigError, match="max_new_tokens must be an integer >= 1"):
        judge.with_options(max_new_tokens=0)
    wide = bt.with_options(margin=100.0)
    assert wide.judge("q", "short", "a much longer answer").winner is brrm.Verdict.TIE
    with pytest.raises(ConfigError, match="cannot be varied on a Bradley–Terry model"):
        bt.with_options(temperature=0.5)


def test_a_loaded_variant_keeps_the_spec_and_the_weights(tmp_path, monkeypatch):
    from brrm.testing import save_tiny_qwen3

    monkeypatch.setenv("BRRM_CACHE_DIR", str(tmp_path / "cache"))
    path = str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True))
    judge = brrm.load(path, kind="bt")
    variant = judge.with_options(margin=0.5)
    assert variant.info.spec == brrm.JudgeSpec(path, kind="bt", options={"margin": 0.5})
    assert variant.info.fingerprint == judge.info.fingerprint != ""
    assert variant.score_one("q", "a").provenance.fingerprint == judge.info.fingerprint
