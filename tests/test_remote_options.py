"""Options a served Bradley–Terry model cannot take are refused, never silently dropped: RemoteJudge's per-request
options (``decoding``, ``seed``, budgets) and a principle, over a real ``brrm serve`` of a tiny BT model on
127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

import brrm
from brrm.service import RemoteJudge
from tests import test_service_load_remote

pytestmark = pytest.mark.timeout(300)
served = test_service_load_remote.served  # its module's tiny Bradley–Terry ``brrm serve`` (url, model path)


@pytest.fixture(scope="module")
def served_bt(served):
    """The URL of a ``brrm serve`` of a tiny Bradley–Terry model (``tests.test_service_load_remote``'s server)."""
    return served[0]


def test_a_bt_server_varies_no_request_option_and_says_so(served_bt):
    with RemoteJudge(served_bt) as remote:
        assert remote.info.kind == "bt" and remote.request_options() == ()
        for name, value in (("decoding", "faithful"), ("seed", 7), ("max_new_tokens", 16), ("max_total_tokens", 64)):
            with pytest.raises(brrm.ConfigError) as err:
                remote.with_options(**{name: value})
            message = str(err.value)
            assert f"option {name!r} cannot be varied over brrm serve" in message and "kind bt" in message
            assert message.endswith("valid: swap")
        with pytest.raises(brrm.ConfigError, match="option 'seed' cannot be varied .* valid: swap$"):
            brrm.load(served_bt, backend="serve", seed=7)
        with remote.with_options(swap=True) as variant:  # swap is accepted (it changes nothing for a scalar model)
            got, want = variant.score(["What is 2+2?"], ["4"]), remote.score(["What is 2+2?"], ["4"])
            assert got[0].status is brrm.Status.OK and got[0].reward == pytest.approx(want[0].reward, abs=1e-6)


def test_score_refuses_request_options_it_cannot_send(served_bt):
    with RemoteJudge(served_bt) as remote:
        remote.options = {"seed": 7}  # as with_options sets them for a judge that can vary them
        with pytest.raises(brrm.ConfigError, match=r"options seed: brrm serve's /v1/score takes no per-request"):
            remote.score(["What is 2+2?"], ["4"])


def test_a_principle_for_a_served_bt_model_is_refused_naming_the_field(served_bt):
    reply = httpx.post(f"{served_bt}/v1/score", json={"items": [
        {"prompt": "What is 2+2?", "response": "4"},
        {"prompt": "What is 2+2?", "response": "4", "principle": "The answer is correct."}]}, timeout=30)
    assert reply.status_code in (400, 422)
    message = reply.json()["error"]["message"]
    assert message.startswith("items[1].principle: only principle models (kind principle) take a principle")
    with RemoteJudge(served_bt) as remote, pytest.raises(brrm.ConfigError, match=r"items\[0\]\.principle"):
        remote.score(["What is 2+2?"], ["4"], principles="The answer is correct.")
