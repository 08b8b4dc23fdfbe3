"""``brrm bench NAME --model <tiny>``: every benchmark runs end to end on tiny real models, writes its outputs,
resumes, and refuses bad input with one clear line before any model loads.

The tiny models are random-weight Qwen3s (``brrm.testing``): a one-label Bradley–Terry head (every benchmark,
fast) and the causal LM as a BR-RM judge under constrained decoding (a few judgments).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.report import published_figure, table_lines
from brrm.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
TINY_BRRM = ("--kind", "brrm", "--temperature", "0", "--max-new-tokens", "450", "--block-token-cap", "8", "--thinking",
             "off")  # no thinking block: 4x fewer generated tokens (tests/audit_support.py TINY_FLAGS)
ITEMS = {"llmbar": 5, "judgebench": 2, "rm-bench": 4, "rmb": 4, "autoj": 8, "mt-bench": 1, "pandalm": 1,
         "rewardbench": 23}
"""Items with --limit 1: one per subset (RM-Bench without its absent math file)."""


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> tuple[str, str]:
    from brrm.testing import save_tiny_qwen3

    base = tmp_path_factory.mktemp("tiny")
    return str(save_tiny_qwen3(base / "lm")), str(save_tiny_qwen3(base / "rm", sequence_classification=True))


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _items(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "judgments.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(ITEMS))
def test_every_benchmark_runs_on_a_tiny_reward_model(shared, tiny_models, tmp_path, capsys, name):
    extra = ("--data", str(FIXTURES / "reward-bench")) if name == "rewardbench" else ()
    code, out, err = _cli(capsys, "bench", name, "--model", tiny_models[1], "--limit", "1", "--output",
                          str(tmp_path), "--data-dir", str(shared / "data"), "--no-progress", *extra)
    assert code == 0, err
    rows = _items(tmp_path)
    assert len(rows) == ITEMS[name]
    for row in rows:  # every presentation has a verdict or an explicit status; every response a reward
        assert row["presentations"] and all(p["judgment"]["status"] in ("ok", "empty", "truncated")
                                            for p in row["presentations"])
        assert len(row["rewards"]) == row["n_responses"]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["benchmark"] == name and result["rows"] and result["judge"]["kind"] == "bt"
    assert result["cost"]["rewards"] == sum(r["n_responses"] for r in rows)
    assert "cost:" in out and "rewards" in out and (tmp_path / "result.md").read_text().startswith(f"# {name}")


@pytest.mark.parametrize(("name", "subset", "judgments"), [("llmbar", "Natural", 2), ("rmb", "bon-harmlessness", 2)])
def test_a_tiny_brrm_judge_runs_the_protocol(shared, tiny_models, tmp_path, capsys, name, subset, judgments):
    code, out, err = _cli(capsys, "bench", name, "--subset", subset, "--limit", "1", "--model", tiny_models[0],
                          *TINY_BRRM, "--output", str(tmp_path), "--data-dir", str(shared / "data"), "--no-progress")
    assert code == 0, err
    (row,) = _items(tmp_path)
    assert len(row["presentations"]) == judgments and not row["rewards"]
    assert all(p["judgment"]["status"] == "ok" and p["judgment"]["turn1_text"] for p in row["presentations"])
    cost = json.loads((tmp_path / "result.json").read_text())["cost"]
    assert cost["judgments"] == judgments and cost["generated_tokens"] > 0 and "generated tokens" in out
    # run.json and the cost line: tokens per judgment by turn (the transformers backend reports its cache use)
    tokens = json.loads((tmp_path / "run.json").read_text())["cost"]["tokens"]
    per = tokens["tokens_per_judgment"]
    assert tokens["results"] == judgments and per["cached"] is not None and len(tokens["by_turn"]) == 2
    assert per["total"]["mean"] == (cost["prompt_tokens"] + cost["generated_tokens"]) / judgments
    assert tokens["judgments_per_second"] > 0 and "tokens per judgment: mean" in out


def test_an_interrupted_run_resumes_and_other_settings_are_refused(shared, tiny_models, tmp_path, capsys):
    args = ("bench", "judgebench", "--subset", "gpt-4o", "--model", tiny_models[1], "--output", str(tmp_path),
            "--data-dir", str(shared / "data"), "--no-progress")
    assert _cli(capsys, *args, "--limit", "2")[0] == 0
    first = _items(tmp_path)
    code, out, _ = _cli(capsys, *args, "--limit", "3")
    assert code == 0 and "resuming: 2 items already judged" in out and "2 rewards to run" in out
    rows = _items(tmp_path)
    assert len(rows) == 3 and rows[:2] == first
    code, _, err = _cli(capsys, *args, "--limit", "3", "--margin", "0.5")
    assert code == 2 and "holds a run with other settings (judge)" in err


@pytest.mark.parametrize(("argv", "message"), [
    (("bench", "helm"), "benchmark 'helm' is not known; expected one of llmbar, judgebench"),
    (("bench", "llmbar", "--subset", "Hard"), "subset 'Hard' is not valid; expected one of Natural"),
    (("bench", "llmbar", "--limit", "0"), "--limit must be >= 1"),
    (("bench", "mt-bench", "--subset", "human"), "cannot load hub id 'lmsys/mt_bench_human_judgments'"),
    (("bench", "llmbar", "--swap"), "--swap does not apply to brrm bench"),
    (("bench", "llmbar", "--weighting", "unweighted"), "--weighting applies to rewardbench only"),
    (("bench", "rewardbench"), "cannot load hub id 'allenai/reward-bench'"),
    (("bench", "pandalm", "--data-dir", "/nonexistent"), "PandaLM test set not found at /nonexistent/PandaLM"),
])
def test_mistakes_are_one_line_before_any_model_loads(capsys, argv, message):
    code, _, err = _cli(capsys, *argv, "--model", "/nonexistent-model")
    assert code == 2 and message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_known_checkpoints_show_the_model_card_figure():
    rm_bench, judgebench = get_benchmark("rm-bench"), get_benchmark("judgebench")
    assert published_figure(rm_bench, "nvidia/Qwen3-Nemotron-14B-BRRM") == 85.9
    assert published_figure(get_benchmark("rmb"), "/models/Qwen3-Nemotron-8B-BRRM") == 71.8  # a local copy
    assert published_figure(judgebench, "nvidia/Qwen-3-Nemotron-32B-Reward") == 72.3
    assert published_figure(judgebench, "nvidia/Qwen3-Nemotron-14B-BRRM") is None  # not on its card
    assert published_figure(get_benchmark("llmbar"), "nvidia/Qwen3-Nemotron-14B-BRRM") is None
    from brrm.bench.core import BenchResult, Row

    result = BenchResult("rm-bench", "accuracy", (Row("chat", 80.0, 3), Row("Overall", 81.25, 3)), "Overall")
    lines = table_lines(result, 85.9)
    assert lines[0].endswith("published (model card)") and lines[-1].endswith("85.90") and "85.90" not in lines[1]
