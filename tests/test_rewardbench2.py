"""``brrm bench rewardbench2``: the official best-of-4 and Ties scoring, replayed against rewardbench's own code,
and end-to-end runs on tiny real models (a scalar head scoring every completion; BR-RM ranking by knockout)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.rewardbench2 import best_of_n_credit, shuffled, ties_score
from brrm.cli import main
from brrm.errors import ConfigError

FIXTURE = Path(__file__).parent / "fixtures" / "rewardbench2"
TINY_BRRM = ("--kind", "brrm", "--temperature", "0", "--max-new-tokens", "450", "--block-token-cap", "8", "--thinking",
             "off")  # no thinking block: 4x fewer generated tokens (tests/audit_support.py TINY_FLAGS)


def official_utils() -> types.ModuleType:
    """rewardbench 0.1.4's ``rewardbench/utils.py`` as shipped (``pip install --no-deps rewardbench==0.1.4``).

    Its package ``__init__`` imports every model wrapper (which needs transformers 4.51), so the file is loaded on
    its own; only the imports its scoring functions never call (``REWARD_MODEL_CONFIG``, fastchat's Conversation
    type hint) are stubbed where absent.
    """
    spec = importlib.util.find_spec("rewardbench")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("rewardbench is not installed (pip install --no-deps rewardbench==0.1.4)")
    path = Path(next(iter(spec.submodule_search_locations))) / "utils.py"
    stubs = {"rewardbench": types.ModuleType("rewardbench"), "rewardbench.models": types.ModuleType("m")}
    stubs["rewardbench.models"].REWARD_MODEL_CONFIG = {}  # type: ignore[attr-defined]
    try:
        import fastchat.conversation  # noqa: F401
    except ImportError:
        stubs["fastchat"] = types.ModuleType("fastchat")
        stubs["fastchat.conversation"] = types.ModuleType("fastchat.conversation")
        stubs["fastchat.conversation"].Conversation = object  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        module_spec = importlib.util.spec_from_file_location("_official_rb_utils", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def official_scores(utils: types.ModuleType, rows: list[dict], scores: dict[str, list[float]]) -> dict[str, float]:
    """Per-subset scores the way ``scripts/run_v2.py`` computes them from per-completion scores."""
    from datasets import Dataset

    unrolled = [{"subset": r["subset"], "id": r["id"], "text": t, "scores": s}
                for r in rows for t, s in zip(r["chosen"] + r["rejected"], scores[r["id"]], strict=True)]
    out = utils.reroll_and_score_dataset(Dataset.from_list(unrolled), [r["total_completions"] for r in rows],
                                         cols_to_combine=["text", "scores"])
    out = out.add_column("num_correct", [r["num_correct"] for r in rows])
    grouped = {}
    for subset in sorted({r["subset"] for r in rows}):
        part = out.filter(lambda ex, s=subset: ex["subset"] == s)
        if subset.lower() == "ties":
            grouped[subset] = utils.process_single_model(part)[1]
        else:
            grouped[subset] = sum(part["results"]) / len(part["results"])
    return grouped


def _fixture_rows() -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / "test.jsonl").read_text().splitlines()]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_fixture_has_the_dataset_schema():
    for row in _fixture_rows():
        assert list(row) == ["id", "prompt", "chosen", "rejected", "num_correct", "num_incorrect",
                             "total_completions", "models", "subset", "additional_metadata"]
        assert row["total_completions"] == len(row["chosen"]) + len(row["rejected"]) == len(row["models"])


def test_replaying_per_item_scores_reproduces_the_official_aggregate_exactly(tmp_path, capsys):
    utils = official_utils()
    data = json.loads((FIXTURE / "scores.json").read_text())
    official = official_scores(utils, _fixture_rows(), dict(zip(data["id"], data["scores"], strict=True)))
    code, out, err = _cli(capsys, "bench", "rewardbench2", "--predictions", str(FIXTURE / "scores.json"),
                          "--output", str(tmp_path))
    assert code == 0, err
    result = json.loads((tmp_path / "result.json").read_text())
    fractions = {r["name"]: r["extra"]["fraction"] for r in result["rows"]}
    assert {k: v for k, v in fractions.items() if k != "Overall"} == official  # exact, float for float
    assert fractions["Overall"] == sum(official[s] for s in get_benchmark("rewardbench2").subsets) / 6
    assert 0 < official["Ties"] < 1 and official["Math"] == 0.5 and official["Factuality"] == 0.75
    assert "Ties" in out and "Overall" in out


def test_the_official_rules_on_known_values():
    assert best_of_n_credit([2.0, 1.0, 0.5, 0.1]) == 1.0
    assert best_of_n_credit([1.0, 1.0, 0.2, 0.3]) == 0.5  # a shared maximum splits the credit
    assert best_of_n_credit([3.0, 3.0, 3.0, 1.0]) == pytest.approx(1 / 3)
    assert best_of_n_credit([0.5, 1.5, 0.2, 0.1]) == 0.0
    perfect = ties_score([("ref:0", [2.0, 0.0], 1), ("tied:0", [2.0, 1.9, 0.0], 2)])
    assert perfect["accuracy_ref"] == perfect["accuracy_tied"] == perfect["correctness_preferred"] == 1.0
    assert perfect["score"] == pytest.approx(0.3 + 0.3 + 0.2 + 0.2 + 0.01 * __import__("math").tanh(1.9 / 0.1 - 1))
    with pytest.raises(ConfigError, match="is not 'ref:N' or 'tied:N'"):
        ties_score([("7", [1.0, 0.0], 1)])
    orders = [shuffled(0, str(k), 4) for k in range(40)]
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders) and len({o.index(0) for o in orders}) == 4
    assert shuffled(0, "5", 4) == shuffled(0, "5", 4)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> tuple[str, str]:
    from brrm.testing import save_tiny_qwen3

    base = tmp_path_factory.mktemp("tiny-rb2")
    return str(save_tiny_qwen3(base / "lm")), str(save_tiny_qwen3(base / "rm", sequence_classification=True))


def test_a_tiny_reward_model_scores_every_completion(tiny_models, tmp_path, capsys):
    code, out, err = _cli(capsys, "bench", "rewardbench2", "--data", str(FIXTURE / "test.jsonl"), "--model",
                          tiny_models[1], "--output", str(tmp_path), "--no-progress")
    assert code == 0, err
    total = sum(r["total_completions"] for r in _fixture_rows())
    assert f"every completion scored; {total} rewards to run" in out
    result = json.loads((tmp_path / "result.json").read_text())
    names = [r["name"] for r in result["rows"]]
    assert names == ["Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties", "Overall"]
    assert result["cost"]["rewards"] == total and all(0 <= r["score"] <= 101 for r in result["rows"])
    assert any("rows sha256" in n for n in result["notes"])
    # the run's own judgments.jsonl replays to the same figures
    code, out2, _ = _cli(capsys, "bench", "rewardbench2", "--predictions", str(tmp_path / "judgments.jsonl"))
    assert code == 0 and [ln for ln in out2.splitlines() if "Overall" in ln][0] in out


def test_a_tiny_brrm_judge_ranks_by_knockout_with_its_count_printed(tiny_models, tmp_path, capsys):
    code, out, err = _cli(capsys, "bench", "rewardbench2", "--data", str(FIXTURE / "test.jsonl"), "--subset", "Math",
                          "--limit", "1", "--model", tiny_models[0], *TINY_BRRM, "--output", str(tmp_path),
                          "--no-progress")
    assert code == 0, err
    assert "strategy knockout" in out and "3 judgments to run" in out
    (row,) = [json.loads(line) for line in (tmp_path / "judgments.jsonl").read_text().splitlines()]
    assert row["meta"]["judgments"] == 3 and sorted(row["meta"]["shown_order"]) == [0, 1, 2, 3]
    assert len(row["rewards"]) == 4
    assert json.loads((tmp_path / "result.json").read_text())["cost"]["judgments"] == 3


def test_round_robin_is_counted_before_it_runs(tiny_models):
    import brrm
    from brrm.bench import bestofn

    items = get_benchmark("rewardbench2").load(("Math", "Ties"), source=str(FIXTURE / "test.jsonl"))
    with brrm.load(tiny_models[0], kind="brrm") as judge:
        assert bestofn.planned(judge, items, "round_robin") == 2 * 12 + 3 * 2 + 5 * 4 + 4 * 3 + 5 * 4  # N(N-1)
        assert bestofn.planned(judge, items, "knockout") == 2 * 3 + 2 + 4 + 3 + 4  # N-1


@pytest.mark.parametrize(("argv", "message"), [
    (("bench", "llmbar", "--strategy", "round_robin"), "--strategy applies to rewardbench2 only, not llmbar"),
    (("bench", "rewardbench2", "--subset", "Chat"), "subset 'Chat' is not valid; expected one of Factuality"),
    (("bench", "rewardbench2"), "cannot load hub id 'allenai/reward-bench-2'"),
])
def test_mistakes_are_one_line(capsys, argv, message):
    code, _, err = _cli(capsys, *argv, "--model", "/nonexistent-model")
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_row_outside_the_schema_names_the_column(tmp_path):
    rows = _fixture_rows()
    del rows[0]["num_correct"]
    (tmp_path / "bad.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ConfigError, match="row 1: missing column"):
        get_benchmark("rewardbench2").load(("Math",), source=str(tmp_path / "bad.jsonl"))
