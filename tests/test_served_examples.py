"""The served OpenAPI examples tell the truth (issue 47 item 4): on a Bradley–Terry, a BR-RM and principle servers
(no default principle, two defaults), the request example of every judging route the server offers is valid
against that server's own schema and answers 200 (a BR-RM server's ``/v1/score`` example had no ``reference``: it
failed its own schema and got 422). In-process apps on tiny real models; what a server process adds is tested in
``tests/test_serve_schema.py``."""

from __future__ import annotations

import time

import pytest

import brrm
from brrm.serve.app import judging_paths
from brrm.testing import save_tiny_qwen3

pytest.importorskip("fastapi")
jsonschema = pytest.importorskip("jsonschema")

BRRM_OPTIONS = {"kind": "brrm", "max_new_tokens": 24, "block_token_cap": 8, "thinking": "off"}
PRINCIPLE_OPTIONS = {"kind": "principle", "recipe": "llama_reward", "max_new_tokens": 8}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("examples")
    return {"bt": str(save_tiny_qwen3(tmp / "rm", sequence_classification=True)),
            "lm": str(save_tiny_qwen3(tmp / "lm", seed=3))}


SERVERS = {"bt": ("bt", {}), "brrm": ("lm", BRRM_OPTIONS), "principle": ("lm", PRINCIPLE_OPTIONS),
           "principle2": ("lm", {**PRINCIPLE_OPTIONS, "principle": ["correct", "short"]})}


@pytest.mark.parametrize("name", list(SERVERS))
def test_every_offered_routes_example_is_valid_and_answers_200(models, name):
    from fastapi.testclient import TestClient

    from brrm.serve import create_app
    from brrm.serve.limits import ServerLimits

    model, options = SERVERS[name]
    judge = brrm.load(models[model], device="cpu", **options)
    with TestClient(create_app(judge, limits=ServerLimits())) as client:
        deadline = time.monotonic() + 120  # a bound on a hang only: readiness is an event the server reports
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, client.get("/ready").text
            time.sleep(0.05)
        doc = client.get("/openapi.json").json()
        offered = [path for path in judging_paths() if path in doc["paths"]]
        assert offered == (["/v1/score", "/compare"] if name == "principle" else list(judging_paths())), offered
        for path in offered:
            ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            component = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
            (example,) = component["examples"]
            errors = [e.message for e in jsonschema.Draft202012Validator({"$ref": ref, **doc}).iter_errors(example)]
            assert not errors, (name, path, example, errors)
            reply = client.post(path, json=example)
            assert reply.status_code == 200, (name, path, example, reply.text)
