"""``brrm bench NAME --predictions``: official output files reproduce the published figures to the last digit, and
brrm's own outputs replay to the scores of the run that wrote them.

Expected figures: ``../shared/data/*/SOURCE.md`` and the official READMEs named there (LLMBar: every copied
``result.json`` against its sibling ``statistics.json``; JudgeBench: the SOURCE table; Auto-J:
``codes/leaderboard/README.md``; PandaLM: the SOURCE recomputation; RMB: the official result file's accuracy).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.report import ITEMS_FILE, check_resume, item_row, read_items, write_items
from brrm.bench.runner import run
from brrm.cli import main
from brrm.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _llmbar_results(shared: Path) -> list[Path]:
    return sorted((shared / "data" / "LLMBar" / "official_results").rglob("result.json"))


def test_llmbar_every_official_result_reproduces_its_statistics_json(shared):
    """All 25 copied result.json (5 LLMs x 5 subsets, Vanilla): every statistics.json field, byte for byte."""
    files = _llmbar_results(shared)
    assert len(files) == 25
    result = get_benchmark("llmbar").replay(files)
    for path, row in zip(files, result.rows, strict=True):
        published = json.loads((path.parent / "statistics.json").read_text())
        assert row.extra["statistics"] == published, path
        assert f"{row.score}%" == published["correct_average"]
    natural = {r.name: r.score for r in result.rows if r.name.startswith("Natural")}
    assert natural["Natural ChatGPT/Vanilla"] == 81.5  # SOURCE.md


def test_llmbar_replay_through_the_cli_writes_the_result(shared, capsys, tmp_path):
    path = shared / "data/LLMBar/official_results/LLMBar/Adversarial/Neighbor/ChatGPT/Vanilla/result.json"
    code, out, _ = _cli(capsys, "bench", "llmbar", "--predictions", str(path), "--output", str(tmp_path / "r"))
    assert code == 0 and "Adversarial/Neighbor ChatGPT/Vanilla" in out and "19.40" in out  # SOURCE.md: 19.40
    saved = json.loads((tmp_path / "r" / "result.json").read_text())
    assert saved["rows"][0]["score"] == pytest.approx(19.402985074626866) and saved["cost"] is None


JUDGEBENCH = {  # judge_model file suffix -> (Knowledge, Reasoning, Math, Coding, Overall), SOURCE.md
    "reward_model,judge_model=Skywork_Skywork-Reward-Llama-3.1-8B": ("gpt-4o", (59.09, 64.29, 76.79, 50.00, 62.29)),
    "reward_model,judge_model=internlm_internlm2-20b-reward": ("gpt-4o", (62.34, 69.39, 66.07, 50.00, 63.43)),
    "reward_model,judge_model=Ray2333_GRM-Gemma-2B-rewardmodel-ft": ("gpt-4o", (62.99, 53.06, 64.29, 54.76, 59.43)),
    "arena_hard,judge_model=claude-3-haiku-20240307": ("claude", (37.66, 29.41, 32.35, 9.68, 32.22)),
}


@pytest.mark.parametrize("judge", sorted(JUDGEBENCH))
def test_judgebench_official_outputs_reproduce_every_category(shared, judge):
    subset, expected = JUDGEBENCH[judge]
    model = "gpt-4o-2024-05-13" if subset == "gpt-4o" else "claude-3-5-sonnet-20240620"
    name = f"dataset=judgebench,response_model={model},judge_name={judge}.jsonl"
    path = shared / "data/JudgeBench/official_results" / name
    result = get_benchmark("judgebench").replay([path])
    names = [f"{subset}/{c}" for c in ("Knowledge", "Reasoning", "Math", "Coding", "Overall")]
    assert tuple(round(result.row(n).score, 2) for n in names) == expected
    assert result.headline == f"{subset}/Overall"
    if judge.startswith("arena_hard"):  # 13 null decisions and the judge's ties, counted apart
        assert result.row("claude/Overall").failures == 13 and result.row("claude/Overall").ties > 0


AUTOJ_PAIRWISE = {"Summarization": (45.83, 73.61), "Exam Questions": (38.89, 69.44), "Code": (47.5, 75.83),
                  "Rewriting": (49.17, 74.17), "Creative Writing": (59.72, 87.04),
                  "Functional Writing": (61.67, 81.67), "General Communication": (55.21, 92.36),
                  "NLP Tasks": (57.58, 86.36), "Overall": (54.96, 83.41)}
AUTOJ_SINGLE = {"Summarization": 56.94, "Exam Questions": 41.67, "Code": 54.17, "Rewriting": 57.5,
                "Creative Writing": 63.43, "Functional Writing": 68.33, "General Communication": 57.29,
                "NLP Tasks": 62.12, "Overall": 59.99}
"""GAIR-NLP/auto-j codes/leaderboard/README.md, for Auto-J-13B's pairwise_example_output.jsonl (+ exchange)."""


def test_autoj_official_outputs_reproduce_the_readme(shared, capsys):
    files = [FIXTURES / "autoj" / "pairwise_example_output.jsonl",
             FIXTURES / "autoj" / "pairwise_exchange_example_output.jsonl"]
    bench = get_benchmark("autoj")
    pairwise = bench.replay(files, root=shared / "data")
    assert {r.name: (r.extra["official"]["agreement"], r.extra["official"]["consistency"])
            for r in pairwise.rows} == AUTOJ_PAIRWISE
    single = bench.replay(files[:1], root=shared / "data")
    assert {r.name: r.extra["official"]["agreement"] for r in single.rows} == AUTOJ_SINGLE
    code, out, _ = _cli(capsys, "bench", "autoj", "--predictions", str(files[0]), "--predictions", str(files[1]),
                        "--data-dir", str(shared / "data"))
    assert code == 0 and "54.96" in out and "consistency 83.41" in out


@pytest.mark.parametrize(("name", "figures"), [
    ("gpt-3.5-turbo-testset-v1.json", (0.6977, 0.5365, 0.5324, 0.5274)),
    ("pandalm-7b-testset-v1.json", (0.6677, 0.5738, 0.5750, 0.5743))])
def test_pandalm_result_files_reproduce_the_recomputed_figures(shared, name, figures):
    """SOURCE.md's recomputation (the README's F1 ratio is not reproducible from these files; see pandalm.py)."""
    result = get_benchmark("pandalm").replay([shared / "data/PandaLM/official_results" / name], root=shared / "data")
    row = result.row("Overall")
    got = (row.score, row.extra["macro_precision"], row.extra["macro_recall"], row.extra["macro_f1"])
    assert tuple(round(x / 100, 4) for x in got) == figures
    assert row.failures == (25 if name.startswith("gpt") else 0)  # GPT-3.5's "garbage" outputs


def test_rmb_official_result_file_reproduces_its_accuracy(shared):
    path = shared / "data/RMB/official_results/ArmoRM-Llama3-8B-v0.1_result.json"
    result = get_benchmark("rmb").replay([path])
    row = result.row("pairwise-helpfulness")
    assert (row.n, row.extra["correct"], round(row.score, 2), row.ties) == (849, 675, 79.51, 12)
    assert row.extra["scenarios"] == {"Pairwise_set/Helpfulness/Brainstorming/Idea Development": row.score}


def test_replay_errors_are_clear(shared, tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not an LLMBar result.json"):
        get_benchmark("llmbar").replay([bad])
    with pytest.raises(ConfigError, match="no official per-item output format"):
        get_benchmark("rm-bench").replay([bad])
    code, _, err = _cli(capsys, "bench", "autoj", "--predictions", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "--predictions" in err and "does not exist" in err


def test_brrm_outputs_replay_to_the_same_scores(shared, tmp_path, capsys):
    """A brrm judgments.jsonl (here from a synthetic judge) replays through --predictions to the run's scores,
    and an interrupted file (a truncated last line) resumes with the items it holds."""
    from tests.test_bench_protocols import synthetic

    for name, subsets, limit in (("rm-bench", ["chat"], 4), ("autoj", ["Code"], 3), ("llmbar", ["Natural"], 5)):
        bench = get_benchmark(name)
        items = bench.load(bench.resolve_subsets(subsets), root=shared / "data", limit=limit)
        results, _ = run(synthetic("always-1", items), items, orders=bench.orders(None), seed=0)
        path = tmp_path / f"{name}.jsonl"
        with path.open("w") as handle:
            write_items(handle, results)
        code, out, _ = _cli(capsys, "bench", name, "--predictions", str(path), "--output", str(tmp_path / name))
        saved = json.loads((tmp_path / name / "result.json").read_text())
        assert code == 0 and saved["overall"] == pytest.approx(bench.score(results).overall)
    rows = path.read_text().splitlines()
    path.write_text("\n".join(rows[:-1]) + "\n" + rows[-1][:40])
    assert [r.item.id for r in read_items(path)] == [json.loads(r)["id"] for r in rows[:-1]]
    assert item_row(read_items(path)[0])["pairs"] == json.loads(rows[0])["pairs"]
    folder = tmp_path / "resume"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"benchmark": "llmbar", "orders": "both"}))
    (folder / ITEMS_FILE).write_text(path.read_text())
    assert len(check_resume(folder, {"benchmark": "llmbar", "orders": "both"})) == 4
    with pytest.raises(ConfigError, match="holds a run with other settings"):
        check_resume(folder, {"benchmark": "llmbar", "orders": "given"})
