"""The judge's face is typed (issue 29 items 1, 2 and 5): ``JudgeInfo`` carries the kind's typed config and a
``Composition`` instead of a string-keyed options dict, with the same JSON record as before; costs are asked of the
judge (``judgment_cost``), never counted beside it; per-request options are marked once on their fields and the
HTTP schema, ``CallOptions`` and ``RemoteJudge`` derive from that one list. Real judges: BR-RM code over a scripted
backend, a tiny real Bradley–Terry model, and a tiny BR-RM served over HTTP."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import brrm
from brrm import ConfigError
from brrm.backends.fake import FakeBackend
from brrm.judges.brrm import BRRMConfig
from brrm.load_options import config_from_record, request_options
from brrm.reward_models.bradley_terry import BTConfig
from brrm.service.items import CallOptions
from brrm.testing import build_tiny_qwen3, build_tiny_tokenizer
from brrm.types.composition import Composition
from tests.audit_support import T1
from tests.conftest import REPO
from tests.serve_helpers import compare_body

VERDICT = "[The Begin of Ranking Score]\n\\boxed{1}\n[The End of Ranking Score]"


def _script(prompt, request):
    return VERDICT if "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1] else T1


@pytest.fixture(scope="module")
def pairwise():
    return brrm.load(kind="brrm", backend=FakeBackend(build_tiny_tokenizer(), _script), decoding="faithful",
                     temperature=0.5, max_new_tokens=64, samples=2, swap=True, seed=9)


@pytest.fixture(scope="module")
def bt():
    from brrm.backends.transformers import TransformersBackend

    model, tok = build_tiny_qwen3(seed=1, sequence_classification=True)
    return brrm.load(kind="bt", backend=TransformersBackend(model, tok), margin=0.25)


def test_info_carries_the_typed_config_and_the_composition(pairwise, bt):
    info = pairwise.info
    assert isinstance(info.config, BRRMConfig) and info.decoding == "faithful"
    assert info.sampling is not None and (info.sampling.temperature, info.sampling.max_new_tokens,
                                          info.sampling.seed) == (0.5, 64, 9)
    assert info.composition == Composition(swap=True, samples=2)
    assert isinstance(bt.info.config, BTConfig) and bt.info.config.recipe == "sequence_classification"
    assert bt.info.sampling is None and bt.info.decoding is None
    assert bt.info.composition == Composition(margin=0.25, on_tie="tie")
    assert not hasattr(info, "options")  # no string-keyed side door left


def test_the_json_record_is_the_one_stores_hash_and_replies_carry(pairwise, bt):
    options = pairwise.info.to_dict()["options"]
    assert set(options) == {"decoding", "swap", "sampling", "thinking", "block_token_cap", "max_retries", "policies",
                            "samples"}
    assert options["sampling"]["max_new_tokens_per_turn"] == 64 and options["swap"] is True
    assert options["samples"] == 2
    assert bt.info.to_dict()["options"]["margin"] == 0.25 and "swap" not in bt.info.to_dict()["options"]


def test_a_record_reads_back_as_a_config_that_judges_the_same_way(pairwise, bt):
    for judge in (pairwise, bt):
        data = judge.info.to_dict()
        back = brrm.JudgeInfo.from_dict(data, config=config_from_record(judge.info.kind, data["options"]))
        assert back.to_dict() == data and back.composition == judge.info.composition
        assert type(back.config) is type(judge.info.config)
        assert back.sampling == judge.info.sampling and back.decoding == judge.info.decoding
    assert config_from_record("brrm", {"sampling": {"temperature": -1}}) is None  # a record that does not read back
    assert config_from_record("custom", {}) is None


def test_costs_come_from_the_judge_and_say_what_they_count(pairwise, bt):
    cost = pairwise.judgment_cost("group", 4, strategy="circular")
    assert (cost.units, cost.samples, cost.total, cost.generations, cost.pairs) == (8, 2, 16, 32, 4)
    assert cost.describe() == "circular over 4 responses (8 judgments) x 2 samples = 16 judgments (32 generations)"
    assert pairwise.cost("group", 4, strategy="circular") == 16
    assert bt.judgment_cost("pairs", 5).describe() == "10 scored sequences"
    with pytest.raises(ConfigError, match="a pairwise judge has no scalar score"):
        pairwise.cost("group", 3, strategy="scores")


def test_per_request_options_are_one_marked_list_the_schema_and_calls_derive_from():
    names = [o.keyword for o in request_options()]
    assert names == ["max_new_tokens", "max_total_tokens", "seed", "decoding"]
    from brrm.serve.schemas import JudgeOptions

    assert list(JudgeOptions.model_fields) == names
    schema = JudgeOptions.model_json_schema()["properties"]
    assert schema["max_total_tokens"]["anyOf"][0]["minimum"] == 2  # the field's own rule (SamplingConfig: >= 2)
    assert schema["decoding"]["anyOf"][0]["enum"] == ["constrained", "faithful"]
    assert CallOptions.of({"seed": 3, "decoding": None}) == CallOptions((("seed", 3),))
    with pytest.raises(ConfigError, match="options.temperature is not a per-request option; valid: max_new_tokens"):
        CallOptions.of({"temperature": 0.5})


def test_the_server_admits_and_bounds_by_the_judges_own_count(tmp_path):
    from brrm.serve import create_app
    from brrm.serve.limits import ServerLimits
    from brrm.testing import save_tiny_qwen3

    judge = brrm.load(str(save_tiny_qwen3(tmp_path / "lm")), kind="brrm", thinking="off", max_new_tokens=24,
                      block_token_cap=8, swap=True)
    app = create_app(judge, limits=ServerLimits(max_judgments_per_request=10, warmup=False))
    with TestClient(app) as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert schema["JudgeOptions"]["properties"]["max_new_tokens"]["anyOf"][0]["maximum"] == 24  # the budget
        assert schema["JudgeOptions"]["properties"]["max_total_tokens"]["anyOf"][0]["minimum"] == 2
        pairs = [{"prompt": f"q{k}", "response_a": "a", "response_b": "b"} for k in range(6)]
        r = client.post("/v1/judge", json={"pairs": pairs})
        error = r.json()["error"]
        assert r.status_code == 413 and error["cost"] == judge.cost("pairs", 6) == 12
        assert "6 pairs x 2 orders x 1 sample = 12 judgments" in error["message"]
        r = client.post("/v1/judge", json={"pairs": pairs[:1], "options": {"max_new_tokens": 25}})
        assert r.status_code == 422 and "options.max_new_tokens 25 exceeds the server's limit of 24" in r.text


def test_score_admission_counts_the_principles_each_item_is_scored_on(tmp_path, pairwise):
    """A principle model with two default principles scores an item without its own principle twice (the mean of
    both) and an item that names one once: /v1/score admits and charges what runs, not the defaults for every
    item."""
    from brrm.serve import create_app
    from brrm.serve.limits import ServerLimits
    from brrm.testing import save_tiny_qwen3

    judge = brrm.load(str(save_tiny_qwen3(tmp_path / "lm", seed=3)), kind="principle", principle=["correct", "short"],
                      recipe="llama_reward", device="cpu")
    assert judge.cost("score", 6) == 12 and judge.cost("score", 6, principles=1) == 6
    with pytest.raises(ConfigError, match="principles: a pairwise judge"):
        pairwise.cost("pairs", 1, principles=1)
    bt = brrm.load(str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)), device="cpu")
    with pytest.raises(ConfigError, match="principles: only principle models"):
        bt.cost("score", 1, principles=1)
    app = create_app(judge, limits=ServerLimits(max_judgments_per_request=10, warmup=False))
    with TestClient(app) as client:
        own = [{"prompt": f"q{k}", "response": "a", "principle": "correct"} for k in range(6)]
        r = client.post("/v1/score", json={"items": own})
        assert r.status_code == 200 and [x["principle"] for x in r.json()["rewards"]] == ["correct"] * 6
        assert all(x["status"] == "ok" for x in r.json()["rewards"])
        r = client.post("/v1/score", json={"items": [{k: v for k, v in it.items() if k != "principle"}
                                                     for it in own]})
        error = r.json()["error"]
        assert r.status_code == 413 and error["cost"] == 12 and error["limit"] == 10, error
        from jsonschema import Draft202012Validator  # the served schema states the same bound

        doc = client.get("/openapi.json").json()
        valid = Draft202012Validator({"$ref": "#/components/schemas/ScoreRequest", **doc}).is_valid
        bare = [{"prompt": "q", "response": "a"}]
        assert valid({"items": (own * 2)[:10]}) and not valid({"items": (own * 2)[:11]})  # own: 1 each
        assert valid({"items": bare * 5}) and not valid({"items": bare * 6})  # 5 on both defaults: cost 10
        # /compare (NeMo Gym): 3 responses, circular = 3 pairs = 6 scored responses with the request's principle
        body = {**compare_body(["4", "5", "four"], "What is 2+2?"), "principle": "correct", "strategy": "circular"}
        r = client.post("/compare", json=body)
        assert r.status_code == 200 and len(r.json()["rewards"]) == 3, r.text
        r = client.post("/compare", json={**body, "principle": None})  # both defaults: 12 > 10
        assert r.status_code == 413 and r.json()["error"]["cost"] == 12, r.text
        valid = Draft202012Validator({"$ref": "#/components/schemas/CompareRequest", **doc}).is_valid
        assert valid(body) and not valid({**body, "principle": None})


@pytest.mark.parametrize("defaults", [[], ["correct"], ["correct", "short"]])
def test_the_served_schema_says_which_items_must_name_a_principle(tmp_path, defaults):
    """A principle model refuses an item without a principle when it has no default, and a request in which some
    items name one and others do not when it has several (their mean is scored apart); the served schema refuses
    exactly those requests, and each refusal names the field. Served without a default, it still warms up and
    becomes ready (its warm-up failed forever before: it scored without a principle)."""
    from jsonschema import Draft202012Validator

    from brrm.serve import create_app
    from brrm.serve.limits import ServerLimits
    from brrm.testing import save_tiny_qwen3

    judge = brrm.load(str(save_tiny_qwen3(tmp_path / "lm", seed=3)), kind="principle", recipe="llama_reward",
                      device="cpu", **({"principle": defaults} if defaults else {}))
    own, bare = {"prompt": "q", "response": "a", "principle": "correct"}, {"prompt": "q", "response": "b"}
    with TestClient(create_app(judge, limits=ServerLimits())) as client:  # with the warm-up
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:  # no default: the warm-up names its own principle
            assert time.monotonic() < deadline, client.get("/ready").text
            time.sleep(0.05)
        doc = client.get("/openapi.json").json()
        score_ok = Draft202012Validator({"$ref": "#/components/schemas/ScoreRequest", **doc}).is_valid
        compare_ok = Draft202012Validator({"$ref": "#/components/schemas/CompareRequest", **doc}).is_valid
        cases = {"named": [own, own], "bare": [bare, bare], "mixed": [own, bare]}
        accepted = {"named": True, "bare": bool(defaults), "mixed": len(defaults) == 1}
        for name, items in cases.items():
            r = client.post("/v1/score", json={"items": items})
            assert (r.status_code == 200) is accepted[name] is score_ok({"items": items}), (name, r.text)
            if not accepted[name]:
                assert r.status_code == 422 and r.json()["error"]["message"].startswith(
                    f"items[{items.index(bare)}].principle"), r.text
            else:
                want = ["correct", " | ".join(defaults) if len(defaults) > 1 else "correct"]
                assert [x["principle"] for x in r.json()["rewards"]] == [want[it is bare] for it in items], r.text
        blank = [own, own, {**own, "principle": "\x1f\t"}]  # Python strips U+001F; ECMA's \s does not match it
        r = client.post("/v1/score", json={"items": blank})
        assert r.status_code == 422 and not score_ok({"items": blank}), r.text
        assert r.json()["error"]["message"].startswith("items[2].principle must be a non-empty string"), r.text
        decoding = doc["components"]["schemas"]["JudgeOptions"]["properties"]["decoding"]
        assert [o.get("enum") for o in decoding["anyOf"] if "enum" in o] == [["constrained"]], decoding
        assert decoding["description"].endswith("This server's judge takes: constrained."), decoding
        offered = {"/v1/judge", "/v1/rank", "/get_reward"} <= doc["paths"].keys()
        r = client.post("/v1/rank", json={"prompt": "q", "responses": ["a", "b"], "strategy": "scores"})
        assert offered is bool(defaults) is (r.status_code == 200), r.text  # none names a principle
        if not defaults:
            assert r.status_code == 422 and "no default principle" in r.json()["error"]["message"], r.text
        body = compare_body(["4", "5"], "What is 2+2?")
        r = client.post("/compare", json={**compare_body(["4"]), "principle": " "})  # nothing compared: still 422
        assert r.status_code == 422 and not compare_ok({**compare_body(["4"]), "principle": " "}), r.text
        for principle in ("correct", None):
            r = client.post("/compare", json={**body, "principle": principle})
            ok = principle is not None or bool(defaults)
            assert (r.status_code == 200) is ok is compare_ok({**body, "principle": principle}), r.text
            if not ok:
                assert r.json()["error"]["message"].startswith("principle is required"), r.text


def test_no_surface_reads_settings_or_counts_costs_through_a_side_door():
    """Issue 29's "Done when" greps, held in the test command."""
    offenders = []
    for path in sorted((REPO / "brrm").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        text = path.read_text(encoding="utf-8")
        if re.search(r"info\.options\b", text):
            offenders.append(f"{rel}: info.options")
        if not rel.startswith("brrm/compose/"):
            if re.search(r"judge\.model *=(?!=)", text):
                offenders.append(f"{rel}: judge.model =")
            if re.search(r"(from brrm\.compose\.strategies import|import brrm\.compose\.strategies)", text):
                offenders.append(f"{rel}: compose.strategies")
    names = "|".join((*brrm.KINDS, *brrm.types.BACKENDS, "serve", "fake"))
    branch = re.compile(rf"\b(if|elif)\b.*\b(kind|backend(_name)?)\s*(==|!=|in)\s*\(?[\"'](?:{names})[\"']")
    for path in [*(REPO / "brrm").glob("load*.py"), *(REPO / "brrm" / "cli").glob("*.py")]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if branch.search(line):
                offenders.append(f"{path.relative_to(REPO).as_posix()}: {line.strip()}")
    assert not offenders, offenders


def test_backends_are_one_registry_entry_each_built_from_their_options():
    from brrm.backends.options import OPTION_CLASSES
    from brrm.backends.registry import BACKEND_REGISTRY

    assert tuple(BACKEND_REGISTRY) == brrm.types.BACKENDS == tuple(OPTION_CLASSES)
    for name, entry in BACKEND_REGISTRY.items():
        assert entry.options is OPTION_CLASSES[name]
        module, _, cls = entry.factory.partition(":")
        assert (REPO / (module.replace(".", "/") + "/__init__.py")).is_file() and cls.endswith("Backend")


def test_max_new_tokens_has_one_name(pairwise):
    config = pairwise.info.config
    assert isinstance(config, BRRMConfig) and config.sampling.max_new_tokens == 64
    assert "max_new_tokens_per_turn" not in Path(REPO / "brrm" / "load_options.py").read_text()
