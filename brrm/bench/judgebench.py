"""JudgeBench (Tan et al., 2024, arXiv 2410.12784): official outputs and the official two-game metric.

Source: github.com/ScalerLab/JudgeBench @ e2c52c2 (pinned in ``sources.json``; the
layout in ``docs/benchmarks.md``). An output file holds, per response pair, the data record plus
``judgments``: two games, the first on (A, B), the second on the swapped order (B, A) with its decision in
the swapped frame. Reward-model judges also store ``scores`` = [score of the first-shown, second-shown].

Official metric (``utils/metrics.py``, ``reverse_order=True``): flip the second decision back to the
original frame, count +1 for each decision equal to the label and −1 for each equal to the opposite; a pair
is correct iff the sum > 0. Score = 100 · correct / pairs, per category (by ``source`` prefix) and overall
(micro-average over pairs). A tie (``A=B``) or a missing decision (API failure, parse failure: ``None``)
counts 0 in the sum, as officially; they are reported apart.

Two response sets: GPT-4o (350 pairs; the paper's headline leaderboard) and Claude-3.5-Sonnet (270).
:class:`JudgeBench` runs any judge with this protocol (both games) and replays official output files and brrm
outputs through the same metric.

:func:`replay_reward_model` turns the stored reward-model scores back into decisions through
:func:`brrm.compose.pairwise_from_rewards`. The official reward-model judges decide
``A>B if score_first > score_second else B>A`` — ``margin=0, on_tie=Verdict.B`` in our terms.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brrm.bench.base import Benchmark, take
from brrm.bench.core import (
    BenchItem,
    BenchResult,
    ItemResult,
    Pair,
    Row,
    Shown,
    failed_judgment,
    group,
    ok_judgment,
    row,
)
from brrm.bench.data import locate, read_files, read_source
from brrm.compose import pairwise_from_rewards
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, Provenance, SamplingConfig, ScalarReward, Status, Verdict
from brrm.types.jsonvalue import JSONValue

CATEGORIES = {
    "mmlu-pro": "Knowledge",
    "livebench-reasoning": "Reasoning",
    "livebench-math": "Math",
    "livecodebench": "Coding",
}
"""``source`` prefix → category, as in the official ``run_judge.py``."""

DECISIONS = {Verdict.A: "A>B", Verdict.B: "B>A", Verdict.TIE: "A=B"}
"""Our verdicts as JudgeBench decision strings (a judgment without a verdict is ``None``)."""


def category(source: str) -> str:
    """The JudgeBench category of a record's ``source``.

    Raises:
        ConfigError: for a source outside the four categories.
    """
    for prefix, name in CATEGORIES.items():
        if source.startswith(prefix):
            return name
    raise ConfigError(
        f"source {source!r} is not a JudgeBench source; expected a prefix in {', '.join(CATEGORIES)}"
    )


def flip(decision: str | None) -> str | None:
    """``A>B`` ↔ ``B>A``; anything else (``A=B``, None) unchanged — the official ``flip_judgment``."""
    return {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision) if decision is not None else None


def decision(judgment: PairwiseJudgment) -> str | None:
    """The JudgeBench decision string of a judgment; None when it has no verdict."""
    return DECISIONS.get(judgment.winner) if judgment.ok else None


def read_outputs(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read an official JudgeBench output file (JSON Lines).

    Raises:
        ConfigError: when the file is missing or a line is not a JSON object with ``judgments``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"JudgeBench output file {str(path)!r} does not exist")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            row = json.loads(text)
            if not isinstance(row, dict) or not isinstance(row.get("judgments"), list):
                raise ConfigError(f"{path.name} line {line}: expected an object with a 'judgments' list")
            rows.append(row)
    return rows


@dataclass(frozen=True)
class ReplayedPair:
    """One response pair replayed from stored reward-model scores.

    Attributes:
        pair_id, source, label: from the record (``label`` is ``A>B`` or ``B>A``).
        games: the two judgments, each in its own frame: (A, B), then (B, A).
        decisions: their JudgeBench decision strings (each in its own frame, as stored officially).
    """

    pair_id: str
    source: str
    label: str
    games: tuple[PairwiseJudgment, PairwiseJudgment]

    @property
    def decisions(self) -> tuple[str | None, str | None]:
        return decision(self.games[0]), decision(self.games[1])


def _reward(value: Any, judge_model: str) -> ScalarReward:
    prov = Provenance(
        model=judge_model,
        backend="replay",
        template_hash="",
        sampling=SamplingConfig(temperature=0.0),
        seed=0,
        decoding="score",
        seeded=False,  # a stored score: the seed recorded did not produce it
    )
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ScalarReward.failed(
            Status.BACKEND_ERROR, f"stored score {value!r} is not a number", provenance=prov
        )
    return ScalarReward(float(value), Status.OK, provenance=prov)


def replay_reward_model(
    rows: Iterable[Mapping[str, Any]], *, margin: float = 0.0, on_tie: Verdict = Verdict.B
) -> list[ReplayedPair]:
    """Re-decide each game of reward-model outputs from its stored ``scores`` (scalar → pairwise adapter).

    Args:
        rows: records of an official ``judge_name=reward_model`` output file.
        margin, on_tie: see :func:`brrm.compose.pairwise_from_rewards`; the defaults reproduce the official
            decisions (``A>B if s_first > s_second else B>A``); ``on_tie=Verdict.TIE`` keeps ties as ties.

    Raises:
        ConfigError: when a game has no ``scores`` pair.
    """
    out = []
    for rec in rows:
        games = []
        for k, game in enumerate(rec["judgments"][:2]):
            inner = (game or {}).get("judgment") or {}
            scores = inner.get("scores")
            if not isinstance(scores, list) or len(scores) != 2:
                raise ConfigError(f"pair {rec.get('pair_id')!r} game {k + 1} has no [first, second] scores")
            model = str(inner.get("judge_model", ""))
            first, second = (_reward(s, model) for s in scores)
            games.append(
                pairwise_from_rewards(first, second, margin=margin, on_tie=on_tie, id=str(rec["pair_id"]))
            )
        out.append(
            ReplayedPair(str(rec["pair_id"]), str(rec["source"]), str(rec["label"]), (games[0], games[1]))
        )
    return out


def pair_correct(label: str, first: str | None, second: str | None) -> bool:
    """The official two-game rule: flip the second decision, +1 per match of the label, −1 per opposite."""
    total = 0
    for d in (first, flip(second)):
        if d == label:
            total += 1
        elif d == flip(label):
            total -= 1
    return total > 0


def scores(items: Sequence[tuple[str, str, str | None, str | None]]) -> dict[str, float]:
    """Official JudgeBench scores (percent) per category and ``Overall`` (micro-average over pairs).

    Args:
        items: ``(source, label, decision of game 1, decision of game 2)`` per pair; game 2 is in the
            swapped frame, as stored.

    Returns:
        ``{"Knowledge": …, "Reasoning": …, "Math": …, "Coding": …, "Overall": …}`` (categories with pairs
        only), unrounded percentages.
    """
    correct: dict[str, int] = {}
    total: dict[str, int] = {}
    for source, label, first, second in items:
        for name in (category(source), "Overall"):
            total[name] = total.get(name, 0) + 1
            correct[name] = correct.get(name, 0) + int(pair_correct(label, first, second))
    order = [*CATEGORIES.values(), "Overall"]
    return {name: 100.0 * correct[name] / total[name] for name in order if name in total}


def official_scores(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Scores from the decisions stored in an official output file (a null judgment counts as no decision)."""
    items = []
    for rec in rows:
        games = [(g or {}).get("decision") if g is not None else None for g in rec["judgments"][:2]]
        items.append((str(rec["source"]), str(rec["label"]), games[0], games[1]))
    return scores(items)


def replay_scores(pairs: Sequence[ReplayedPair]) -> dict[str, float]:
    """Scores of replayed pairs (see :func:`scores`)."""
    return scores([(p.source, p.label, *p.decisions) for p in pairs])


RESPONSE_SETS = {
    "gpt-4o": "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
    "claude": "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl",
}
"""Response set -> data file under ``<root>/JudgeBench/`` (SOURCE.md)."""

HUB_SPLITS = {"gpt-4o": "gpt", "claude": "claude"}
"""Response set -> split of the hub copy ``ScalerLab/JudgeBench`` (its dataset card: ``split="gpt"`` / ``"claude"``)."""

_SET_OF_MODEL = {"gpt-4o-2024-05-13": "gpt-4o", "claude-3-5-sonnet-20240620": "claude"}
_VERDICTS = {"A>B": Verdict.A, "B>A": Verdict.B, "A=B": Verdict.TIE}


def _game(shown: Shown | None) -> str | None:
    """A presentation's decision string in its own frame (None without a verdict)."""
    return decision(shown.judgment) if shown is not None else None


class JudgeBench(Benchmark):
    """JudgeBench: two games per pair ((A, B), then (B, A)), the official two-game rule, per category and overall
    (micro-average), for each response set; the headline is the GPT-4o set's Overall."""

    name = "judgebench"
    title = "JudgeBench"
    subsets = tuple(RESPONSE_SETS)
    order_policy = "both"
    data_folder = "JudgeBench"
    metric_needs_orders = True
    published_key = "JudgeBench"

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"gpt4o": ("gpt-4o",), "claude-3.5-sonnet": ("claude",)}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        """The pairs of each response set: from the pinned GitHub files under ``<root>/JudgeBench/``, or from
        ``source`` (``--data``): the hub copy ``ScalerLab/JudgeBench`` or a local folder in its layout, whose
        splits ``gpt`` and ``claude`` (:data:`HUB_SPLITS`) hold the same records.

        Raises:
            ConfigError: for missing data or a record outside the schema.
        """
        items = []
        for subset in subsets:
            if source is not None:
                rows = read_source(source, split=HUB_SPLITS[subset])
            else:
                rows = read_files([locate(f"JudgeBench/{RESPONSE_SETS[subset]}", root, f"JudgeBench {subset} set")])
            items += [self.item(subset, rec) for rec in take(rows, limit)]
        return items

    @staticmethod
    def item(subset: str, rec: Mapping[str, Any]) -> BenchItem:
        """A pair item from a JudgeBench record (response A first, label ``A>B`` / ``B>A``).

        Raises:
            ConfigError: for a label outside ``A>B`` / ``B>A`` or an unknown source.
        """
        label = str(rec.get("label"))
        if label not in ("A>B", "B>A"):
            raise ConfigError(f"JudgeBench pair {rec.get('pair_id')!r}: label {label!r} is not A>B or B>A")
        category(str(rec["source"]))
        return BenchItem(str(rec["pair_id"]), subset, rec["question"], (rec["response_A"], rec["response_B"]),
                         (Pair(0, 1, _VERDICTS[label]),), {"source": str(rec["source"]), "label": label})

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        rows: list[Row] = []
        by_set = group(results, lambda r: r.item.subset)
        for subset in [s for s in self.subsets if s in by_set]:
            part = by_set[subset]
            games = [(r.item.meta_str("source"), r.item.meta_str("label"), *self._games(r)) for r in part]
            got = scores(games)
            by_cat = group(part, lambda r: category(r.item.meta_str("source")))
            rows += [row(f"{subset}/{name}", value, by_cat[name] if name != "Overall" else part)
                     for name, value in got.items()]
        headline = "gpt-4o/Overall" if "gpt-4o" in by_set else f"{next(iter(by_set))}/Overall"
        return BenchResult(self.name, "pairs correct under the two-game rule (%)", tuple(rows), headline)

    @staticmethod
    def _games(result: ItemResult) -> tuple[str | None, str | None]:
        shown = {s.swapped: s for s in result.presentations(0)}
        if len(shown) != 2:
            raise ConfigError("JudgeBench's metric needs both games (both presentation orders) of every pair")
        return _game(shown[False]), _game(shown[True])

    def replay(self, paths: Sequence[Path], *, root: str | os.PathLike[str] | None = None) -> BenchResult:
        """The metric over official output files (``outputs/dataset=judgebench,…jsonl``): stored decisions, a null
        judgment or decision counting as no verdict; the set comes from each record's ``response_model``."""
        results = []
        for path in paths:
            for rec in read_outputs(path):
                subset = _SET_OF_MODEL.get(str(rec.get("response_model")))
                if subset is None:
                    raise ConfigError(f"{path}: response_model {rec.get('response_model')!r} is not a JudgeBench set")
                item = self.item(subset, rec)
                games = list(rec["judgments"][:2]) + [None] * (2 - len(rec["judgments"][:2]))
                shown = tuple(Shown(0, swapped, self._stored(g, item.id)) for swapped, g in zip(
                    (False, True), games, strict=True))
                results.append(ItemResult(item, shown))
        return self.score(results)

    @staticmethod
    def _stored(game: JSONValue, item_id: str) -> PairwiseJudgment:
        value = (game or {}).get("decision") if isinstance(game, dict) or game is None else None
        if isinstance(value, str) and value in _VERDICTS:
            return ok_judgment(_VERDICTS[value], item_id)
        return failed_judgment(Status.BACKEND_ERROR if game is None else Status.PARSE_FAILURE,
                               f"stored decision {value!r}", item_id)
