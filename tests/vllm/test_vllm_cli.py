"""``brrm judge --backend vllm`` on examples/pairs.jsonl gives the verdicts of ``--backend transformers``."""

from __future__ import annotations

import gc
import json

import pytest

pytest.importorskip("vllm")

from brrm.cli import main  # noqa: E402
from tests.conftest import REPO  # noqa: E402

pytestmark = pytest.mark.vllm


def test_cli_vllm_gives_the_transformers_verdicts(tiny_lm_dir, tmp_path, capsys):
    args = ["--input", str(REPO / "examples/pairs.jsonl"), "--model", tiny_lm_dir, "--kind", "brrm",
            "--temperature", "0", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off",
            "--no-progress", "--swap"]
    rows = {}
    for backend in ("vllm", "transformers"):
        out = tmp_path / f"{backend}.jsonl"
        assert main(["judge", *args, "--backend", backend, "--output", str(out)]) == 0
        rows[backend] = [json.loads(line) for line in out.read_text().splitlines()]
        gc.collect()  # the CLI's engine is unreferenced now: free it before anything else starts
    stdout = capsys.readouterr().out
    assert "parse failures 0" in stdout
    assert len(rows["vllm"]) == 8
    for v, t in zip(rows["vllm"], rows["transformers"], strict=True):
        assert (v["winner"], v["status"], v["consistent"]) == (t["winner"], t["status"], t["consistent"])
        assert [s["turn2_text"] for s in v["sub_judgments"]] == [s["turn2_text"] for s in t["sub_judgments"]]
        assert abs(v["p_a"] - t["p_a"]) <= 1e-4 and v["provenance"]["backend"] == "vllm"
