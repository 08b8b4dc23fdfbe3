"""``--protocol released`` shows every pair in the order the released BR-RM evaluation drew for it (issue 32,
item 1), replayed against the official draw logic run on the same file.

The official logic is re-stated here from YzjiaoNvd/BR-RM @ d20a4e0 (Apache-2.0), only to check brrm against it:

* ``examples/run_eval_brrm.py`` ``main()``: ``set_seed(config["eval"]["seed"])`` (``seed: 42`` in
  ``examples/configs/evals/brrm_eval.yaml``; ``nemo_rl/algorithms/utils.py``: ``random.seed(seed)``,
  ``np.random.seed(seed)``, …) before ``setup_data``; ``nemo_rl/data/hf_datasets/reward_benchmarks.py`` also runs
  ``random.seed(42)`` at import.
* ``RewardBenchDataset``: ``for example in ds:`` over ``load_dataset("allenai/reward-bench", split="filtered")``,
  ``format_rewardbench_example``: ``preference = random.choice([0, 1])`` /
  ``if preference == 0: # First response (chosen) is better`` / ``else: response1 = rejected_resp``.
* ``RMBenchDataset``: ``for example in ds:`` over ``load_dataset("THU-KEG/RM-Bench", split="train")``,
  ``format_rmbench_example``: ``for i, chosen_resp in enumerate(chosen_responses):`` /
  ``for j, rejected_resp in enumerate(rejected_responses):`` / ``preference = random.choice([0, 1])``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from brrm.bench import get_benchmark
from brrm.bench.core import presentations
from brrm.bench.protocol import resolve

REWARDBENCH = Path(__file__).parent / "fixtures" / "reward-bench"


def _official_rewardbench(ds) -> list[int]:
    random.seed(42)  # set_seed(42) in main(), after the module's own random.seed(42)
    out = []
    for _example in ds:  # RewardBenchDataset: for example in ds
        preference = random.choice([0, 1])  # format_rewardbench_example
        out.append(preference)  # 0: response1 = chosen; 1: response1 = rejected
    return out


def _official_rmbench(ds) -> list[list[int]]:
    random.seed(42)
    out = []
    for example in ds:  # RMBenchDataset: for example in ds
        draws = []
        for _i, _chosen in enumerate(example["chosen"]):
            for _j, _rejected in enumerate(example["rejected"]):
                preference = random.choice([0, 1])  # format_rmbench_example
                draws.append(preference)
        out.append(draws)
    return out


def _swaps(bench, items) -> dict[str, list[int]]:
    (released,) = resolve("released", bench, model=None, user={}, orders=None)
    assert released.orders == "sequence"
    return {it.id: [int(swapped) for _, swapped in presentations(released.orders, it)] for it in items}


def test_rewardbench_orders_are_the_official_runs_pair_for_pair():
    import datasets

    ds = datasets.load_dataset(str(REWARDBENCH), split="filtered")  # what the official script iterates
    official = _official_rewardbench(ds)
    bench = get_benchmark("rewardbench")
    items = bench.load(bench.subsets, source=str(REWARDBENCH))
    ids = [str(row["id"]) for row in ds]
    assert len(items) == len(ds) == 46 and [it.id for it in items] == ids
    mine = _swaps(bench, items)
    assert [mine[i][0] for i in ids] == official
    assert 0 < sum(official) < len(official)  # both orders occur: the check can fail
    # a selection keeps each item's place in the one sequence
    some = bench.load(("hep-go", "donotanswer"), source=str(REWARDBENCH), limit=1)
    assert {it.id: _swaps(bench, [it])[it.id][0] for it in some} == {it.id: official[ids.index(it.id)] for it in some}


def test_rmbench_orders_are_the_official_runs_on_a_file_in_the_hub_layout(shared, tmp_path):
    """A file in the hub split's schema (a ``domain`` column), domains interleaved so that the file order is not
    brrm's own: the draws follow the file."""
    base = shared / "data" / "RM-Bench"
    parts = {d: json.loads((base / f"{d}_filtered.json").read_text())[:4]
             for d in ("chat", "code", "safety-refuse", "safety-response")}
    rows = [{**rec, "domain": d} for k in range(4) for d, recs in parts.items() for rec in recs[k:k + 1]]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    official = _official_rmbench(rows)
    bench = get_benchmark("rm-bench")
    items = bench.load(bench.subsets, source=str(tmp_path / "train.json"))
    assert [it.id for it in items] == [f"{r['domain']}/{r['id']}" for r in rows]
    mine = _swaps(bench, items)
    assert [mine[it.id] for it in items] == official
    assert {tuple(x) for x in official} != {tuple(official[0])}


def test_rmbench_orders_over_the_per_domain_files_follow_their_order(shared):
    base = shared / "data" / "RM-Bench"
    rows = [rec for d in ("chat", "code", "safety-refuse", "safety-response")
            for rec in json.loads((base / f"{d}_filtered.json").read_text())]
    official = _official_rmbench(rows)
    bench = get_benchmark("rm-bench")
    items = bench.load(("code",), root=shared / "data", limit=3)  # prompts 130-132 of the sequence
    assert [_swaps(bench, [it])[it.id] for it in items] == official[129:132]


def test_the_released_run_writes_the_official_orders(tmp_path, capsys):
    """Through ``brrm bench``: each judged presentation in judgments.jsonl has the official order."""
    import datasets

    from brrm.cli import main
    from brrm.testing import save_tiny_qwen3

    ds = datasets.load_dataset(str(REWARDBENCH), split="filtered")
    official = dict(zip((str(r["id"]) for r in ds), _official_rewardbench(ds), strict=True))
    model = save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)
    code = main(["bench", "rewardbench", "--model", str(model), "--data", str(REWARDBENCH), "--protocol", "released",
                 "--output", str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "orders sequence (the official evaluation's draws: one random.choice([0, 1]) per row" in out.out
    lines = [json.loads(x) for x in (tmp_path / "out" / "judgments.jsonl").read_text().splitlines()]
    assert len(lines) == 46
    assert {r["id"]: int(r["presentations"][0]["swapped"]) for r in lines} == official
