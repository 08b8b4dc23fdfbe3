"""Labelled observations (z, y) for a calibration fit, from judged pairs.

A judged pair is a ``brrm judge`` output line (``PairwiseJudgment.to_dict()`` plus ``line``) or any mapping
with ``label``, ``status``, ``p_a`` and optionally ``logit_1``/``logit_2`` and ``sub_judgments``; a ``brrm bench``
``judgments.jsonl`` line gives one observation per presentation (the benchmark's gold as the label). Each ok judgment
with a probability and a label ``A`` or ``B`` is one observation: y = 1 for A, 0 for B, and z its logit: the
digit-logit difference ``logit_1 − logit_2`` when it agrees with ``p_a`` (an ordered judgment), else
``logit(p_a)`` (a mirrored order or a scalar model's σ(r_A − r_B)). A swap judgment contributes its two
orders (each in the A/B frame), not their average. Each observation is keyed by its pair's content group (the
row's ``content_key``, or the conversation and responses it holds; a bench line's ``pair_keys``), which the
held-out split keeps on one side (:mod:`brrm.calibration.split`). Ties, unlabelled pairs and failures are
counted, not used. The kind is ``pairwise`` when the judgments carry digit logits, else ``scalar``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from brrm.errors import ConfigError
from brrm.numerics import sigmoid
from brrm.types import Conversation, ConversationLike, Verdict, parse_label
from brrm.types.calibration import logit
from brrm.types.codec import stored_semantics
from brrm.types.jsonread import as_list, as_number, as_object
from brrm.types.summary import check_logprob_semantics


@dataclass(frozen=True)
class Observation:
    """One labelled probability.

    Attributes:
        key: the pair's content group (:func:`content_key`: conversation and both
            responses, order-free): both orders of a pair, and the same pair under another id, share it and the
            split.
        z: the logit of P(A ≻ B) (finite).
        y: 1 when the label is A, 0 when B.
        digit_logits: whether z came from the verdict-digit logits (a pairwise judge).
        p: P(A ≻ B) as judged (``p_a``, in [0, 1]; σ(z) up to rounding): the raw figures bin this value itself.
        logprob_semantics: its judgment's ``provenance.logprob_semantics`` (:func:`brrm.types.codec.stored_semantics`).
    """

    key: str
    z: float
    y: int
    digit_logits: bool
    p: float
    logprob_semantics: str = "raw"


@dataclass(frozen=True)
class Observations:
    """Observations and what was left out (counts)."""

    items: tuple[Observation, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``pairwise`` when every observation has digit logits, ``scalar`` when none has.

        Raises:
            ConfigError: for a mix, or no observation at all.
        """
        flags = {o.digit_logits for o in self.items}
        if not flags:
            raise ConfigError("no labelled pair with a probability to fit on (" + ", ".join(
                f"{k} {v}" for k, v in self.skipped.items() if v) + ")")
        if len(flags) > 1:
            raise ConfigError("the judgments mix verdict-digit logits (a pairwise judge) and reward differences "
                              "(a scalar model); calibrate one judge at a time")
        return "pairwise" if flags.pop() else "scalar"


def _p(d: Mapping[str, object]) -> float:
    """``p_a`` of a judged row.

    Raises:
        ConfigError: when it lies outside [0, 1].
    """
    p = float(as_number(d["p_a"], "p_a"))
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"p_a {p} lies outside [0, 1]")
    return p


def _z(d: Mapping[str, object]) -> tuple[float, bool]:
    p = float(as_number(d["p_a"], "p_a"))
    l1, l2 = d.get("logit_1"), d.get("logit_2")
    if isinstance(l1, int | float) and isinstance(l2, int | float) and math.isfinite(l1 - l2):
        z = float(l1) - float(l2)
        return (z, True) if abs(sigmoid(z) - p) < 1e-6 else (logit(p), True)
    return logit(p), False


def _semantics(d: Mapping[str, object]) -> str:
    prov = d.get("provenance")
    return stored_semantics(prov if isinstance(prov, dict) else None)


def observations(rows: Iterable[Mapping[str, object]]) -> Observations:
    """Every usable observation of judged rows, in order.

    Raises:
        ConfigError: naming the row of a label that is not A, B, tie or none; when the observations mix unknown
            and known logprob semantics (:func:`brrm.types.summary.check_logprob_semantics`).
    """
    result = _observations(rows)
    check_logprob_semantics(Counter(o.logprob_semantics for o in result.items), "the calibration fit")
    return result


def _observations(rows: Iterable[Mapping[str, object]]) -> Observations:
    out: list[Observation] = []
    skipped = {"unlabelled": 0, "ties": 0, "failed": 0}
    for k, row in enumerate(rows, start=1):
        if "presentations" in row:
            _bench_row(row, out, skipped)
            continue
        raw = row.get("label", "none")
        if raw in (None, "none", ""):
            skipped["unlabelled"] += 1
            continue
        label = parse_label(raw, where=f"row {k} label")
        if label is Verdict.TIE:
            skipped["ties"] += 1
            continue
        key = row_content_key(row, k)
        subs = row.get("sub_judgments")
        parts = [as_object(sub) for sub in as_list(subs)] if subs else [row]
        for part in parts:
            if part.get("status") != "ok" or part.get("p_a") is None:
                skipped["failed"] += 1
                continue
            z, digits = _z(part)
            out.append(Observation(key, z, 1 if label is Verdict.A else 0, digits, _p(part), _semantics(part)))
    return Observations(tuple(out), skipped)


def _bench_row(row: Mapping[str, object], out: list[Observation], skipped: dict[str, int]) -> None:
    """A ``brrm bench`` ``judgments.jsonl`` line: each presentation in its presented frame (A = shown first), its
    label the pair's gold mirrored when the pair was shown swapped."""
    pairs = as_list(row["pairs"])
    keys = row.get("pair_keys")
    if not isinstance(keys, list) or len(keys) != len(pairs) or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"benchmark item {row.get('id')!r} carries no pair_keys (the pairs' content groups): "
                          "its judgments.jsonl predates them; run `brrm bench … --output` again to write them")
    for pres in map(as_object, as_list(row["presentations"])):
        index = pres["pair"]
        if not isinstance(index, int):
            raise TypeError(f"a presentation's pair must be an index, got {index!r}")
        label = as_list(pairs[index])[2]
        if not isinstance(label, str):
            raise ValueError(f"{label!r} is not a valid Verdict")
        gold = Verdict(label)
        if gold is Verdict.TIE:
            skipped["ties"] += 1
            continue
        j = as_object(pres["judgment"])
        if j.get("status") != "ok" or j.get("p_a") is None:
            skipped["failed"] += 1
            continue
        first_better = (gold is Verdict.A) != bool(pres["swapped"])
        z, digits = _z(j)
        out.append(Observation(str(keys[index]), z, 1 if first_better else 0, digits, _p(j), _semantics(j)))


def content_key(conversation: ConversationLike, response_a: str, response_b: str) -> str:
    """The order-free content group of a pair: sha256 (64 hex) of the conversation's messages and the two
    responses, sorted, as canonical JSON.

    Args:
        conversation: a prompt string or messages (as :meth:`brrm.types.Conversation.coerce` reads them).
        response_a, response_b: the two responses (their order does not change the key).

    Raises:
        ConfigError: for a conversation that is not a prompt or a list of messages.
    """
    messages = Conversation.coerce(conversation).to_list()
    text = json.dumps({"conversation": messages, "responses": sorted((response_a, response_b))},
                      ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def row_content_key(row: Mapping[str, object], k: int) -> str:
    """The content group of a judged row: its ``content_key`` (``brrm judge`` writes one), else the key of the
    conversation and responses the row itself holds (record fields, as ``brrm judge --input`` reads them).

    Raises:
        ConfigError: naming the row when it has neither.
    """
    key = row.get("content_key")
    if isinstance(key, str) and key:
        return key
    from brrm.records import RecordError, parse_pair_record

    rec = parse_pair_record(row, line=k)
    if isinstance(rec, RecordError):
        raise ConfigError(f"row {k}: no content_key and no conversation with two responses to group it by "
                          f"({rec.reason}); judge with `brrm judge`, whose output lines carry content_key")
    return content_key(rec.conversation, rec.response_a, rec.response_b)


def is_judged(row: Mapping[str, object]) -> bool:
    """Whether a row is judged — a judged pair (``winner`` and ``status``) or a ``brrm bench`` judgments line
    (``presentations``) — rather than a record to judge."""
    return ("winner" in row and "status" in row) or "presentations" in row
