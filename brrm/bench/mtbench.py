"""MT-Bench human pairs (Zheng et al., NeurIPS 2023 D&B): two ways to score a judge against human votes.

* Subset ``MT-Bench`` (default): LLMBar's processed set (``<data-dir>/LLMBar/Processed/MT-Bench/dataset.json``,
  from princeton-nlp/LLMBar's ``Dataset/Processed/MT-Bench/``; 200 turn-1 pairs sampled from the MT-Bench expert
  judgments by the LLMBar authors, gold = the experts' majority, ties removed), run and scored with LLMBar's
  protocol and metric (both orders; ``correct_average`` %), see :mod:`brrm.bench.llmbar`. It is the set on GitHub
  (the raw human votes are on the Hugging Face Hub only).
* Subset ``human``: FastChat's own agreement study over the raw votes (``lmsys/mt_bench_human_judgments``, split
  ``human``, through ``datasets``: a hub id, or ``--data`` with a local copy in its schema: ``question_id``,
  ``model_a``, ``model_b``, ``winner``, ``judge``, ``turn``, ``conversation_a``, ``conversation_b``). Each
  (question, model pair) is judged in both orders and scored as ``fastchat/llm_judge/compute_agreement.py`` does
  (:func:`agreement`). Turn-1 votes only: a turn-2 vote compares two conversations whose first answers differ,
  which a pairwise judge over one shared context cannot be shown; those rows are skipped and counted in a note.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from brrm.bench.base import take
from brrm.bench.core import BenchItem, BenchResult, ItemResult, Pair, Row, group, percent, row
from brrm.bench.data import read_source
from brrm.bench.llmbar import LLMBarFormat, subset_row
from brrm.errors import ConfigError
from brrm.types import Verdict

HUMAN_SOURCE = "lmsys/mt_bench_human_judgments"
"""Hub id of the MT-Bench expert votes (CC-BY-4.0), read with ``datasets`` (split ``human``)."""

_VOTE = {Verdict.A: "model_a", Verdict.B: "model_b", Verdict.TIE: "tie"}


def revert(vote: str) -> str:
    """``model_a`` ↔ ``model_b``; any other vote unchanged (FastChat's ``revert``)."""
    return {"model_a": "model_b", "model_b": "model_a"}.get(vote, vote)


def is_tie(vote: str) -> bool:
    """A vote counts as a tie when it contains "tie" (``tie``, ``tie (inconsistent)``), as FastChat's
    ``convertvote`` / ``equalvote``."""
    return "tie" in vote


def same_vote(a: str, b: str) -> bool:
    """FastChat's ``equalvote``: any two tie votes are equal; otherwise string equality."""
    return (is_tie(a) and is_tie(b)) or a == b


def judge_vote(first: Verdict, second: Verdict) -> str:
    """The judge's vote on a normalised pair from its two orders, both mapped back to the pair frame (A = the
    model that sorts first): agreement gives that vote; disagreement is ``tie (inconsistent)``; both orders
    without a verdict is ``error`` (it matches no human vote)."""
    votes = [_VOTE.get(v, "error") for v in (first, second)]
    return votes[0] if votes[0] == votes[1] else "tie (inconsistent)"


def agreement(pairs: Iterable[tuple[str, Sequence[str]]], *, with_tie: bool) -> tuple[int, int]:
    """(agreeing, total) vote pairs between a judge and the human votes, as ``compute_agreement.py`` counts.

    Args:
        pairs: per (question, sorted model pair, turn): the judge's one vote and the human votes, all normalised
            to the sorted model order.
        with_tie: False drops every pair where either vote is a tie (the "without tie" figure).
    """
    agree = total = 0
    for judge, humans in pairs:
        if not with_tie and is_tie(judge):
            continue
        for vote in humans:
            if not with_tie and is_tie(vote):
                continue
            total += 1
            agree += same_vote(judge, vote)
    return agree, total


def human_items(rows: Iterable[Mapping[str, Any]], limit: int | None = None) -> tuple[list[BenchItem], int]:
    """Turn-1 items from expert-vote rows: one per (question, sorted model pair), votes normalised to that
    order (``get_mt_bench_votes_data``); returns the items and the number of skipped turn-2 rows.

    Raises:
        ConfigError: for a row without the schema's fields.
    """
    keyed: dict[tuple[Any, str, str], dict[str, Any]] = {}
    skipped = 0
    for k, r in enumerate(rows, start=1):
        try:
            qid, a, b, winner, turn = r["question_id"], r["model_a"], r["model_b"], r["winner"], int(r["turn"])
            conv_a, conv_b = r["conversation_a"], r["conversation_b"]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"MT-Bench human row {k}: expected question_id, model_a, model_b, winner, turn, "
                              "conversation_a, conversation_b") from None
        if turn != 1:
            skipped += 1
            continue
        lo, hi = sorted((a, b))
        entry = keyed.setdefault((qid, lo, hi), {"votes": []})
        entry["votes"].append(winner if a == lo else revert(winner))
        answers = {a: conv_a[1]["content"], b: conv_b[1]["content"]}
        entry.update(prompt=conv_a[0]["content"], lo=answers[lo], hi=answers[hi], models=(lo, hi), qid=qid)
    items = []
    for (qid, lo, hi), e in keyed.items():
        votes = e["votes"]
        gold = Verdict.A if votes.count("model_a") > votes.count("model_b") else (
            Verdict.B if votes.count("model_b") > votes.count("model_a") else Verdict.TIE)
        items.append(BenchItem(f"human/{qid}/{lo}/{hi}", "human", e["prompt"], (e["lo"], e["hi"]),
                               (Pair(0, 1, gold),), {"question_id": qid, "models": [lo, hi], "votes": votes,
                                                      "turn": 1}))
    return take(items, limit), skipped


class MTBench(LLMBarFormat):
    """MT-Bench human pairs: LLMBar's processed set (default) or FastChat's expert votes (``human``)."""

    name = "mt-bench"
    title = "MT-Bench"
    data_folder = "LLMBar"  # the default subset is LLMBar's processed copy; ``human`` is read from the hub
    subsets = ("MT-Bench", "human")
    folders = {"MT-Bench": "LLMBar/Processed/MT-Bench"}
    source_split = "human"

    def __init__(self) -> None:
        self.skipped_turn2 = 0

    def resolve_subsets(self, names: Sequence[str] | None) -> tuple[str, ...]:
        return super().resolve_subsets(names) if names else ("MT-Bench",)

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {"llmbar": ("MT-Bench",), "processed": ("MT-Bench",), "fastchat": ("human",)}

    def load(self, subsets: Sequence[str], *, root: str | os.PathLike[str] | None = None, limit: int | None = None,
             source: str | None = None) -> list[BenchItem]:
        items = super().load([s for s in subsets if s != "human"], root=root, limit=limit)
        if "human" in subsets:
            human, self.skipped_turn2 = human_items(read_source(source or HUMAN_SOURCE, split="human"), limit)
            items += human
        return items

    def score(self, results: Sequence[ItemResult]) -> BenchResult:
        parts = group(results, lambda r: r.item.subset)
        rows: list[Row] = []
        if "MT-Bench" in parts:
            rows.append(subset_row("MT-Bench", parts["MT-Bench"]))
        notes = []
        if "human" in parts:
            rows += self._human_rows(parts["human"])
            if self.skipped_turn2:
                notes.append(f"{self.skipped_turn2} turn-2 vote rows skipped (see brrm.bench.mtbench)")
        metric = "; ".join(m for s, m in (("MT-Bench", "LLMBar correct_average (%)"),
                                          ("human", "agreement with expert votes (%), FastChat")) if s in parts)
        return BenchResult(self.name, metric, tuple(rows), rows[0].name, tuple(notes))

    @staticmethod
    def _human_rows(results: Sequence[ItemResult]) -> list[Row]:
        pairs = []
        for r in results:
            shown = {s.swapped: s.verdict for s in r.presentations(0)}
            if len(shown) != 2:
                raise ConfigError("MT-Bench human agreement needs both presentation orders of every pair")
            pairs.append((judge_vote(shown[False], shown[True]), r.item.meta_strs("votes")))
        out = []
        for with_tie in (True, False):
            agree, total = agreement(pairs, with_tie=with_tie)
            out.append(row(f"human turn 1 ({'with' if with_tie else 'without'} tie)", percent(agree, total), results,
                           agree=agree, total=total))
        return out
