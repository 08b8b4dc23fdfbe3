"""``create_app`` in process (Starlette's TestClient, lifespan included): CORS only where configured."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from brrm.serve import ServerLimits, create_app


@pytest.fixture(scope="module")
def judge():
    from tests.serve_helpers import fake_bt

    return fake_bt()


@pytest.mark.parametrize("origins", [(), ("http://ok.example",)])
def test_cors_is_off_unless_configured(judge, origins):
    app = create_app(judge, limits=ServerLimits(cors_origins=origins, warmup=False), close_judge=False)
    with TestClient(app) as client:
        headers = {"Origin": "http://ok.example"}
        r = client.post("/v1/score", headers=headers, json={"items": [{"prompt": "p", "response": "q3"}]})
        assert r.status_code == 200 and r.json()["rewards"][0]["reward"] == 3.5
        allowed = r.headers.get("access-control-allow-origin")
        assert allowed == ("http://ok.example" if origins else None)
        other = client.get("/v1/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
