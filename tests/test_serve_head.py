"""HEAD on every GET resource of ``brrm serve`` answers as GET does: same status and headers, no body (RFC 9110
§9.3.2), through a real uvicorn server over a tiny real Bradley–Terry model, with an API key configured."""

from __future__ import annotations

import httpx
import pytest

from tests.serve_helpers import serving_in_process

pytestmark = pytest.mark.timeout(240)

KEY = "head-key-0123456789"
OUTSIDE_SCHEMA = ("/docs", "/openapi.json", "/redoc", "/docs/assets/swagger-ui.css")
"""GET resources the schema does not list (each GET route in it is found from the schema itself)."""

VARYING = {"date", "content-length"}
"""Headers that may differ between two requests for one resource (``/metrics`` grows as requests are counted)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("head-bt")
    model = save_tiny_qwen3(tmp / "rm", sequence_classification=True)
    with serving_in_process(["--model", str(model)], tmp, api_key=KEY) as srv:
        yield srv


def _get_paths(url: str) -> list[str]:
    schema = httpx.get(f"{url}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    listed = [path for path, operations in schema["paths"].items() if "get" in operations]
    assert not [path for path, operations in schema["paths"].items() if "head" in operations]  # implicit there
    assert {"/health", "/ready", "/v1/models", "/metrics"} <= set(listed), listed
    return [*listed, *OUTSIDE_SCHEMA]


def _same_headers(got: httpx.Headers, want: httpx.Headers) -> dict[str, tuple[str | None, str | None]]:
    """The headers (but :data:`VARYING`) that differ: name -> (HEAD's, GET's)."""
    names = {k.lower() for k in (*got.keys(), *want.keys())} - VARYING
    return {k: (got.get(k), want.get(k)) for k in sorted(names) if got.get(k) != want.get(k)}


def test_head_answers_as_get_on_every_get_route(server):
    auth = {"Authorization": f"Bearer {KEY}"}
    paths = _get_paths(server.url)
    with httpx.Client(base_url=server.url, headers=auth) as client:
        for path in paths:
            get, head = client.get(path), client.head(path)
            assert get.status_code == 200 and get.content, path
            assert head.status_code == 200 and head.content == b"", (path, head.status_code)
            assert head.headers["content-type"] == get.headers["content-type"], path
            assert _same_headers(head.headers, get.headers) == {}, path
            if path != "/metrics":
                assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))


def test_head_without_the_key_is_refused_as_get_is(server):
    for path in _get_paths(server.url):
        get, head = httpx.get(server.url + path), httpx.head(server.url + path)
        want = 200 if path == "/health" else 401  # /health is the one open path (liveness probes)
        assert get.status_code == head.status_code == want, (path, get.status_code, head.status_code)
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"], path
        if want == 401:
            assert head.headers["www-authenticate"] == get.headers["www-authenticate"] == "Bearer", path


def test_head_stays_405_where_get_is(server):
    auth = {"Authorization": f"Bearer {KEY}"}
    for path in ("/v1/score", "/v1/judge", "/get_reward"):
        get, head = httpx.get(server.url + path, headers=auth), httpx.head(server.url + path, headers=auth)
        assert get.status_code == head.status_code == 405 and head.content == b"", path
        assert head.headers["allow"] == get.headers["allow"] == "POST", path
