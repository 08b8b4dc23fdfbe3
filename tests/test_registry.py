"""One registry for model kinds, backends and benchmarks (``brrm/registry.py``), and plugins through entry points.

The toy kind (``toylen``: a reward per token of the response), backend (``toytok``: the checkpoint's tokenizer) and
benchmark (``toybench``) live in a plugin package, ``tests/plugin_pkg/src/brrm_toy_plugin``, one module each.
ARCHITECTURE.md's "Where to add" steps are followed twice: as brrm's own (the module, and one line naming it in
its registry: here :meth:`Registry.register`, the same ``name -> "module:object"``), and as another installed
package (its ``*.dist-info/entry_points.txt`` on ``sys.path``, as pip writes it).
"""

from __future__ import annotations

import json
import sys

import pytest

import brrm
import brrm.bench
from brrm.registry import BACKEND_REGISTRY, BENCHMARK_REGISTRY, KIND_REGISTRY, forget_plugins, resolve

from .conftest import REPO

PLUGIN = REPO / "tests" / "plugin_pkg"
TOYS = {KIND_REGISTRY: ("toylen", "brrm_toy_plugin.kind:KIND"),
        BACKEND_REGISTRY: ("toytok", "brrm_toy_plugin.backend:BACKEND"),
        BENCHMARK_REGISTRY: ("toybench", "brrm_toy_plugin.bench:ToyBench")}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return save_tiny_qwen3(tmp_path_factory.mktemp("toy") / "tiny", seed=1)


def _on_path(monkeypatch, *folders):
    for folder in folders:
        monkeypatch.syspath_prepend(str(PLUGIN / folder))
    forget_plugins()


@pytest.fixture()
def registered(monkeypatch):
    """The documented steps for brrm's own: each toy module, and one line naming it in its registry."""
    _on_path(monkeypatch, "src")
    for registry, (name, ref) in TOYS.items():
        registry.register(name, ref)
    yield
    for registry, (name, _) in TOYS.items():
        registry.unregister(name)
    forget_plugins()


@pytest.fixture()
def installed(monkeypatch):
    """The plugin as an installed package: its code and its dist-info (entry points) on ``sys.path``."""
    _on_path(monkeypatch, "src", "installed")
    yield
    forget_plugins()


def _tokens(model_dir, text):
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(model_dir))(text, add_special_tokens=False)["input_ids"])


def _judged_end_to_end(model_dir):
    """brrm.load builds the toy kind over the toy backend; its rewards, traits, options and spec are the toys'."""
    judge = brrm.load(str(model_dir), kind="toylen", backend="toytok", toy_scale=0.5, toy_rows=1)
    long, short = "Blue, like a clear sky at noon.", "Red."
    rewards = judge.score(["Name a colour."] * 2, [long, short])
    assert [r.reward for r in rewards] == [0.5 * _tokens(model_dir, long), 0.5 * _tokens(model_dir, short)]
    assert judge.info.kind == "toylen" and judge.info.backend == "toytok" and judge.info.pairwise is False
    assert judge.info.spec is not None and judge.info.spec.options == {"toy_rows": 1, "toy_scale": 0.5}
    assert judge.judge("Name a colour.", long, short).winner is brrm.Verdict.A
    result = brrm.bench.evaluate(brrm.bench.get_benchmark("toybench"), judge)
    assert result.rows[0].score == 100.0 and result.rows[0].n == 2
    with pytest.raises(brrm.ConfigError, match="unknown option 'dtype' for kind 'toylen' with the toytok backend; "
                                               "valid options: toy_rows, toy_scale"):
        brrm.load(str(model_dir), kind="toylen", backend="toytok", dtype="float32")
    with pytest.raises(brrm.ConfigError, match="toy_scale must be"):
        brrm.load(str(model_dir), kind="toylen", backend="toytok", toy_scale=-1)


def test_the_documented_steps_add_a_kind_a_backend_and_a_benchmark(registered, model_dir):
    assert ("toylen" in brrm.KINDS and "toytok" in brrm.types.BACKENDS and "toybench" in brrm.bench.names())
    assert brrm.KINDS[:3] == ("brrm", "bt", "principle")  # built-ins first, in their table's order
    _judged_end_to_end(model_dir)


def test_an_installed_plugin_is_seen_by_load_the_cli_and_serve(installed, model_dir, tmp_path, capsys):
    from brrm.cli import build_parser, main

    assert {"toylen", "toytok", "toybench"} <= {*brrm.KINDS, *brrm.types.BACKENDS, *brrm.bench.names()}
    _judged_end_to_end(model_dir)
    help_text = build_parser()._subparsers._group_actions[0].choices["score"].format_help()
    assert "toy kind (toylen):" in help_text and "--toy-scale" in help_text and "--toy-rows" in help_text
    assert "{auto,brrm,bt,principle,toylen}" in help_text and "transformers,vllm,openai,toytok" in help_text
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"id": "x", "prompt": "Say hi.", "response": "Hello there"}) + "\n")
    flags = ["-m", str(model_dir), "--kind", "toylen", "--backend", "toytok", "--toy-rows", "2"]
    assert main(["score", "-i", str(src), "-o", str(out), *flags, "--toy-scale", "2", "--no-progress"]) == 0
    row = json.loads(out.read_text())
    assert row["reward"] == 2.0 * _tokens(model_dir, "Hello there") and row["status"] == "ok"
    assert main(["score", "-i", str(src), "-o", str(out), *flags, "--toy-scale", "-1", "--overwrite"]) == 2
    assert "--toy-scale must be" in capsys.readouterr().err
    _served(model_dir, flags)


def _served(model_dir, flags):
    """``brrm serve``'s own checks and app over the plugin's judge (in process: no port is bound)."""
    from fastapi.testclient import TestClient

    from brrm.cli import build_parser
    from brrm.cli import serve as serve_cli

    args = build_parser().parse_args(["serve", *flags])
    limits, factory = serve_cli.check(args)
    import io

    app = serve_cli._build_app(args, limits, factory, out=io.StringIO(), freeze=False)
    with TestClient(app) as client:
        reply = client.post("/v1/score", json={"items": [{"prompt": "Say hi.", "response": "Hello there"}]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["rewards"][0]["reward"] == _tokens(model_dir, "Hello there")


def test_unknown_names_name_the_valid_ones_and_plugins_cannot_replace_built_ins():
    with pytest.raises(brrm.ConfigError, match="kind 'nope' is not valid; expected one of brrm, bt, principle"):
        KIND_REGISTRY.entry("nope")
    with pytest.raises(brrm.ConfigError, match="built in"):
        BACKEND_REGISTRY.register("transformers", "brrm_toy_plugin.backend:BACKEND")
    with pytest.raises(brrm.ConfigError, match="is not MODULE:OBJECT"):
        resolve("brrm.registry")
    assert resolve("brrm.registry:KIND_REGISTRY.entry") == KIND_REGISTRY.entry


def test_import_brrm_reads_no_entry_points_and_imports_no_kind_or_backend():
    import subprocess

    code = ("import sys, brrm, brrm.registry as r; "
            "print(bool(r._PLUGINS), any(m.startswith(('brrm.judges', 'brrm.reward_models', 'brrm.bench', "
            "'importlib.metadata')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False"]
