"""RMB (Zhou et al., ICLR 2025): reward models on helpfulness and harmlessness, pairwise and best-of-N.

Data (Zhou-Zoey/RMB-Reward-Model-Benchmark @ ``2be3180``, pinned in ``sources.json``): ``Pairwise_set/
{Helpfulness,Harmlessness}/**.json`` (``conversation_input``, ``chosen``, ``reject``) and ``BoN_set/…`` (``bon_best``,
``loser_list``). The developers' offline copy lacks three pairwise files (≥ 4 MiB upstream); a download has them.

Official metric: pairwise accuracy = share of pairs whose chosen response wins, strictly
(``eval/scripts/my_run_rm.py``: ``1 if score(chosen) > score(reject) else 0``; a tie is wrong); best-of-N
accuracy = share of lists whose best response beats **every** response of its ``loser_list`` (the paper's rule; the
BR-RM evaluation scores a list correct only when all its comparisons are). Each of the four parts is the mean over
its pairs / lists; Overall is the mean of the four parts (BR-RM's ``print_evaluation_results.py``; the paper's
Overall averages the same four columns).

Protocol for pairwise judges (RMB's repository has no generative-judge script): each comparison is judged once in
one random order (the BR-RM evaluation's ``format_rmb_example``); a tie or a failed judgment is not correct and is
reported apart. The official orders cannot be reproduced, so even ``--protocol released`` draws them per pair from
the order seed (:func:`brrm.bench.core.random_swap`): ``format_rmb_example`` (``nemo_rl/data/hf_datasets/
reward_benchmarks.py``, YzjiaoNvd/BR-RM @ ``d20a4e0``) draws ``np.random.choice([0, 1])`` from numpy's global
generator. That generator is seeded in the released run (``set_seed(42)`` in ``examples/run_eval_brrm.py``
``main()`` seeds ``np.random`` too), but the draws run over one list of every file that
``glob.glob(os.path.join(data_folder, "**", "*.json"), recursive=True)`` returns, unsorted: the file order, hence
each pair's place in the sequence, is the file system's, not recorded anywhere; and whatever ``init_ray()`` and
``get_tokenizer()`` draw from numpy between the seed and the data is unknown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brrm.bench.base import Benchmark, take
from brrm.bench.core import (
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Row,
    group,
    mean,
    pair_row,
    percent,
    shown_from_rewards,
)
from brrm.bench.data import locate, read_files, require
from brrm.errors import ConfigError
from brrm.types import Conversation, ScalarReward, Status, Verdict

PARTS = {
    "pairwise-helpfulness": "Pairwise_set/Helpfulness",
    "pairwise-harmlessness": "Pairwise_set/Harmlessness",
    "bon-helpfulness": "BoN_set/Helpfulness",
    "bon-harmlessness": "BoN_set/Harmlessness",
}
"""Subset -> folder under ``<root>/RMB/`` (every ``*.json`` below it, sorted by path)."""


def _conversation(rec: dict[str, Any], where: str) -> Conversation:
    turns = rec.get("conversation_input")
    if not isinstance(turns, list):
        raise ConfigError(f"{where}: conversation_input must be a list of turns")
    return Conversation.coerce([{"role": t.get("role"), "content": t.get("content")} for t in turns], where=where)


def _answer(value: object, where: str) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("answer"), str):
        raise ConfigError(f"{where}: expected an object with an 'answer' string")
    return value["answer"]


def correct(result: ItemResult) -> bool:
    """Pairwise: the chosen response won; best-of-N: the best response won every comparison."""
    return all(result.verdict(k) is Verdict.A for k in range(len(result.item.pairs)))


class RMB(Benchmark):
    """RMB: pairwise and best-of-N, helpfulness and harmlessness; Overall = mean of the four parts."""

    name = "rmb"
    title = "RMB"
    subsets = tuple(PARTS)
    order_policy = "random"
    data_folder = "RMB"
    published_key = "RMB"

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"pairwise": self.subsets[:2], "bon": self.subsets[2:], "best-of-n": self.subsets[2:],
                "helpfulness": (self.subsets[0], self.subsets[2]), "harmlessness": (self.subsets[1], self.subsets[3])}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        items: list[BenchItem] = []
        for subset in subsets:
            folder = locate(f"RMB/{PARTS[subset]}", root, f"RMB {subset}")
            files = sorted(folder.rglob("*.json"))
            items += [self.item(subset, rec) for rec in take(read_files(files), limit)]
        return items

    @staticmethod
    def item(subset: str, rec: dict[str, Any]) -> BenchItem:
        """A pairwise item (chosen, reject) or a best-of-N item (best, *losers; pair k asks best vs loser k).

        Raises:
            ConfigError: for a record without the part's fields.
        """
        uid = rec.get("pair_uid") if subset.startswith("pairwise") else rec.get("bon_uid")
        where = f"RMB {subset} {uid!r}"
        conv = _conversation(rec, where)
        responses: tuple[str, ...]
        if subset.startswith("pairwise"):
            responses = (_answer(rec.get("chosen"), where), _answer(rec.get("reject"), where))
        else:
            losers = rec.get("loser_list")
            if not isinstance(losers, list) or not losers:
                raise ConfigError(f"{where}: loser_list must be a non-empty list")
            responses = (_answer(rec.get("bon_best"), where), *(_answer(x, where) for x in losers))
        pairs = tuple(Pair(0, k, Verdict.A) for k in range(1, len(responses)))
        return BenchItem(f"{subset}/{uid}", subset, conv, responses, pairs,
                         {"category_path": rec.get("category_path", "")})

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        parts = group(results, lambda r: r.item.subset)
        rows: list[Row] = []
        for subset in [s for s in self.subsets if s in parts]:
            part = parts[subset]
            scenarios = group(part, lambda r: r.item.meta_str("category_path"))
            rows.append(pair_row(subset, percent(sum(map(correct, part)), len(part)), part,
                            correct=sum(map(correct, part)),
                            scenarios={k: percent(sum(map(correct, v)), len(v)) for k, v in scenarios.items()}))
        rows.append(pair_row("Overall", mean([r.score for r in rows]), results, rule="mean of the parts present"))
        notes = ["a tie or a failed judgment counts as not correct (strict, as RMB's scorer); best-of-N needs the "
                 "best response to win every comparison"]
        if len(parts) < len(self.subsets):
            notes.append(f"parts not run: {', '.join(s for s in self.subsets if s not in parts)}; Overall averages "
                         "the parts present")
        return BenchResult(self.name, "accuracy (%); Overall = mean of the four parts", tuple(rows), "Overall",
                           tuple(notes))

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over official reward-model result files (``eval/result/<model>_result.json``: per pair
        ``chosen_reward``, ``reject_reward`` and the script's ``is_correct``).

        Raises:
            ConfigError: for a file in another format, or a stored ``is_correct`` that disagrees with the strict
                rule over the stored rewards.
        """
        results = []
        for path in paths:
            rows = json.loads(require(Path(path), "RMB result file").read_text(encoding="utf-8"))
            if not isinstance(rows, list) or not all(isinstance(r, dict) and "chosen_reward" in r for r in rows):
                raise ConfigError(f"{path}: not an RMB result file (records with chosen_reward / reject_reward)")
            results += [self._replayed(rec, path) for rec in rows]
        return self.score(results)

    def _replayed(self, rec: dict[str, Any], path: Path) -> ItemResult:
        cat = str(rec.get("category_path", ""))
        subset = next((s for s, folder in PARTS.items() if cat.startswith(folder)), None)
        if subset is None or not subset.startswith("pairwise"):
            raise ConfigError(f"{path}: category_path {cat!r} is not an RMB pairwise part")
        item = BenchItem(f"{subset}/{rec.get('pair_uid')}", subset, "", ("", ""), (Pair(0, 1, Verdict.A),),
                         {"category_path": cat})
        rewards = tuple(ScalarReward(float(rec[k]), Status.OK) for k in ("chosen_reward", "reject_reward"))
        result = ItemResult(item, shown_from_rewards(item, rewards, [(0, False)]), rewards)
        if "is_correct" in rec and bool(rec["is_correct"]) != correct(result):
            raise ConfigError(f"{path}: pair {rec.get('pair_uid')!r} stores is_correct={rec['is_correct']} but its "
                              "rewards say otherwise under the strict rule")
        return result
