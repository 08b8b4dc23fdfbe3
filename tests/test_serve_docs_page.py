"""The server's docs pages render offline (issue 29, item 9): headless Chromium, with every host but 127.0.0.1
unreachable, opens ``/docs`` of a real ``brrm serve`` and finds its operations listed by Swagger UI (which must
read the OpenAPI 3.1 document), and ``/redoc`` renders them too."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

from tests.serve_helpers import serving_in_process

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving_in_process(["--factory", "tests.serve_helpers:fake_bt"], tmp_path_factory.mktemp("docs")) as srv:
        yield srv


def rendered(url: str, tmp_path) -> str:
    """The DOM of ``url`` after its scripts ran, in headless Chromium that can reach nothing but 127.0.0.1."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    res = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND, "
                          "EXCLUDE 127.0.0.1", "--virtual-time-budget=15000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_the_pages_use_no_cdn(server):
    for path in ("/docs", "/redoc"):
        page = httpx.get(server.url + path)
        assert page.status_code == 200 and "cdn" not in page.text and "fonts.googleapis" not in page.text, path
    assert httpx.get(server.url + "/openapi.json").json()["openapi"].startswith("3.1")
    assert "SwaggerUIBundle" in httpx.get(server.url + "/docs/assets/swagger-ui-bundle.js").text


def test_swagger_ui_lists_the_operations_offline(server, tmp_path):
    dom = rendered(server.url + "/docs", tmp_path)
    assert "Unable to render this definition" not in dom and "does not specify a valid version" not in dom
    for path in ("/v1/score", "/v1/judge", "/health", "/ready"):
        assert f'data-path="{path}"' in dom, path
    assert "opblock-summary-method" in dom  # Swagger UI's operation rows


def test_redoc_lists_the_operations_offline(server, tmp_path):
    dom = rendered(server.url + "/redoc", tmp_path)
    assert "/v1/score" in dom and "redoc-wrap" in dom
