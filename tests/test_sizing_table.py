"""benchmarks/sizing_table.py (docs/performance.md's sizing table) on one item of a real benchmark: the prompts it
measures are the ones the judge sends, the step shape's arithmetic is as stated, and a stored run re-renders."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "sizing_table.py"


def _module():
    spec = importlib.util.spec_from_file_location("sizing_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_imports_nothing_heavy():
    code = f"import runpy, sys; runpy.run_path({str(SCRIPT)!r}, run_name='x'); print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "torch" not in loaded and "transformers" not in loaded and "brrm" not in loaded


def test_sizing_table_on_one_item_per_subset(shared, qwen3_tokenizer, tmp_path, capsys):
    sizing = _module()
    out = tmp_path / "sizing.json"
    argv = ["--data-dir", str(shared / "data"), "--benchmark", "evalbiasbench", "--limit", "1", "--step-seconds",
            "64", "--json", str(out)]
    assert sizing.main(argv) == 0
    data = json.loads(out.read_text())
    (row,) = data["benchmarks"]
    (counts,) = data["counts"]
    assert row["pairs"] == len(counts["p1"]) == 6  # EvalBiasBench: 6 bias types, one item each
    # turn 1's prompt is what the judge sends: the Qwen3 chat template over the released turn-1 message
    from brrm.bench.registry import get_benchmark
    from brrm.judges.brrm import BRRMConfig
    from brrm.templates import brrm_turn1_content
    from brrm.types import Conversation

    bench = get_benchmark("evalbiasbench")
    item = bench.load(bench.subsets, root=shared / "data", limit=1)[0]
    pair = item.pairs[0]
    text = brrm_turn1_content(Conversation.coerce(item.conversation), item.responses[pair.i],
                              item.responses[pair.j], BRRMConfig(decoding="faithful").context)
    if not isinstance(text, str):  # the faithful policy hands record text as pieces (no <think> tags here)
        assert all(isinstance(piece, str) for piece in text)
        text = "".join(text)
    ids = qwen3_tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True, return_dict=False)
    assert counts["p1"][0] == len(ids)
    assert len(set(counts["seam"])) == 1 and counts["seam"][0] > 50  # the turn-2 message, the same for every pair
    demand = data["demand"]
    assert demand["judgments_per_step"] == 8 * 2 * 128 and demand["judgments_per_second"] == 32.0
    budget = next(d for d in demand["by_benchmark"] if d["generated"] == "budget")
    assert budget["t1"] == 8192 and budget["t2"] == round(row["turn2_budget_generated"]["mean"])
    assert budget["t2"] == round(16384 - 8192 - row["turn1_prompt"]["mean"] - counts["seam"][0])
    printed = capsys.readouterr().out
    assert "| evalbiasbench | 6 |" in printed and "**2,048 judgments per step, 32.0 judgments/s**" in printed
    assert sizing.main(["--measured", str(out), "--step-seconds", "64"]) == 0  # re-rendered, not re-measured
    assert capsys.readouterr().out == printed
