"""NeMo Gym's ``/compare`` contract, parsed by NeMo Gym's own request and response models.

NeMo Gym is not on PyPI (no ``nemo-gym`` distribution installs here), so its two pydantic models are re-declared
below verbatim in their fields from ``resources_servers/genrm_compare/app.py`` of NVIDIA-NeMo/Gym (commit
0033425), with the behaviours brrm matches from ``app.py`` and ``utils.py`` (commit 0880a8d): fewer than two
responses answer ``[default_score]`` with ``comparison_results`` and ``metrics`` null; each comparison row has a
``ranking``; rewards are ``List[float]`` (never null).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from brrm.service.order import CanonicalGroup
from tests.serve_helpers import compare_body, serving_in_process

pytestmark = pytest.mark.timeout(180)


class GenRMCompareRequest(BaseModel):  # NeMo Gym, resources_servers/genrm_compare/app.py
    conversation_history: list[dict[str, str]]
    response_objs: list[dict[str, Any]]
    principle: str | None = None


class GenRMCompareResponse(BaseModel):  # NeMo Gym, resources_servers/genrm_compare/app.py
    rewards: list[float]
    comparison_results: list[dict[str, Any]] | None = None
    metrics: dict[str, float] | None = None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("serve-nemo")
    model = save_tiny_qwen3(tmp / "rm", sequence_classification=True)
    with serving_in_process(["--model", str(model)], tmp) as srv:
        yield srv


def _compare(server, body: dict[str, Any]) -> tuple[GenRMCompareResponse, dict[str, Any]]:
    GenRMCompareRequest.model_validate(body)  # what NeMo Gym sends is what NeMo's own model accepts
    r = httpx.post(f"{server.url}/compare", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return GenRMCompareResponse.model_validate(r.json()), r.json()


def test_rewards_and_rankings_as_nemo_gives_them(server):
    reply, raw = _compare(server, compare_body(["4", "5", "four"], "What is 2+2?"))
    assert len(reply.rewards) == 3 and raw["statuses"] == ["ok"] * 3
    assert reply.comparison_results is not None and len(reply.comparison_results) == 3  # circular: N pairs
    for row in reply.comparison_results:
        assert 1.0 <= row["ranking"] <= 6.0
        assert row["ranking"] == pytest.approx(1 + 5 * (1 - row["score_1"]))  # < 3.5: response_1 better
    assert reply.metrics is not None and reply.metrics["n_comparisons"] == 3.0


def test_one_malformed_rollout_fails_only_that_response(server):
    body = compare_body(["4", "5", "four", "IV"], "What is 2+2?")
    body["response_objs"][1] = {"output": "not a list"}
    reply, raw = _compare(server, body)
    assert raw["statuses"] == ["ok", "invalid_input", "ok", "ok"]
    assert "response_objs[1]" in raw["reasons"][1] and "'output' list" in raw["reasons"][1]
    assert reply.comparison_results is not None and len(reply.comparison_results) == 2  # the ring's pairs without 1
    ring = CanonicalGroup.of(["4", None, "four", "IV"]).caller_pairs([(0, 1), (1, 2), (2, 3), (3, 0)])  # its order
    assert {(c["response_i"], c["response_j"]) for c in reply.comparison_results} == {p for p in ring if 1 not in p}


def test_a_single_response_gets_the_neutral_reward_and_no_comparisons(server):
    reply, raw = _compare(server, compare_body(["4"], "What is 2+2?"))
    assert reply.rewards == [0.5] and reply.comparison_results is None and reply.metrics is None


def test_null_failed_reward_is_refused_at_start_with_the_reason(capsys):
    """The CLI's own entry point, in this process (``brrm``'s exit code is what ``main`` returns; an exception would
    fail the test instead of printing a traceback). A real ``brrm serve`` process refusing at start, with its exit
    code and one error line: tests/test_service_http.py's port-in-use test."""
    from brrm.cli import main

    code = main(["serve", "--failed-reward", "null", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--failed-reward null" in err and "torch.tensor([[None]])" in err


def test_a_response_whose_every_opponent_is_malformed_gets_the_neutral_reward(server):
    """Like a single response: nothing to compare with is not a backend error (no backend call failed)."""
    body = compare_body(["4", "5"], "What is 2+2?")
    body["response_objs"][1] = {"output": "bad"}
    reply, raw = _compare(server, body)
    assert raw["statuses"] == ["ok", "invalid_input"] and reply.comparison_results == []
    assert reply.rewards[0] == 0.5 and "no other valid response to compare response 0 with" in raw["reasons"][0]
