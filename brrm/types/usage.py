"""Tokens by turn: what a judgment cost in prompt, cached and generated tokens, and what a batch of them cost.

Every two-turn judgment records, per turn, the prompt tokens the backend was sent, how many of them it served from
a prefix/KV cache (reuse between turns, between swap orders, between samples) and the tokens it generated
(:attr:`brrm.types.PairwiseJudgment.turns`). A backend that cannot tell what it served from cache says so: the
cached count is ``None`` ("not reported"), never a 0 that would read as "nothing reused". :func:`token_report`
turns a batch of results and its wall time into the figures the CLI, audits, arena, bench and the server show:
tokens per judgment (mean and p95), judgments per second, and for a cascade the share each stage decided.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict, JSONValue


@dataclass(frozen=True)
class TurnTokens:
    """The tokens of one turn of a judgment (summed over the ordered judgments and attempts behind it).

    Attributes:
        prompt: prompt tokens sent to the backend for this turn, >= 0 (the whole prompt, cached part included; turn
            2's prompt holds turn 1's prompt, its generated text and the end-of-turn token that closed it).
        generated: tokens generated in this turn, >= 0, without the end-of-turn token that stopped it (that token
            is counted in turn 2's prompt).
        cached: prompt tokens the backend served from its prefix/KV cache instead of computing them, in
            [0, prompt]; ``None`` when the backend does not report it (a scripted backend, an OpenAI-compatible
            server whose answer has no ``usage.prompt_tokens_details.cached_tokens``), and for a sum over turns
            where any part did not report it.

    Raises:
        ConfigError: on a negative count or ``cached`` above ``prompt``.
    """

    prompt: int
    generated: int
    cached: int | None = None

    def __post_init__(self) -> None:
        for name in ("prompt", "generated"):
            if getattr(self, name) < 0:
                raise ConfigError(f"turn tokens: {name} must be >= 0, got {getattr(self, name)}")
        if self.cached is not None and not 0 <= self.cached <= self.prompt:
            raise ConfigError(f"turn tokens: cached must be in [0, prompt={self.prompt}], got {self.cached}")

    def __add__(self, other: TurnTokens) -> TurnTokens:
        cached = None if self.cached is None or other.cached is None else self.cached + other.cached
        return TurnTokens(self.prompt + other.prompt, self.generated + other.generated, cached)

    def to_dict(self) -> JSONDict:
        """``{"prompt", "cached", "generated"}``; ``cached`` is ``null`` when not reported."""
        return {"prompt": self.prompt, "cached": self.cached, "generated": self.generated}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TurnTokens:
        """The inverse of :meth:`to_dict`."""
        cached = d.get("cached")
        return cls(prompt=int(d["prompt"]), generated=int(d["generated"]),
                   cached=None if cached is None else int(cached))


def merge_turns(*parts: Sequence[TurnTokens]) -> tuple[TurnTokens, ...]:
    """Turn-by-turn sums of several judgments' turns (swap orders, voting samples, cascade stages, retries): turn
    ``i`` of the result is the sum of every part's turn ``i``; a part that stopped after turn 1 adds to turn 1
    only."""
    columns = itertools.zip_longest(*parts)  # turn i of every part, None where a part has no turn i
    return tuple(functools.reduce(operator.add, (t for t in column if t is not None)) for column in columns)


def turns_from_dict(value: object) -> tuple[TurnTokens, ...]:
    """A judgment's ``turns`` from its stored list; a record written before turns were recorded has none (``()``)."""
    if not isinstance(value, list):
        return ()
    return tuple(TurnTokens.from_dict(t) for t in value)


@dataclass(frozen=True)
class Tokens:
    """One result's tokens, all turns together: ``prompt``, ``cached`` (None: not reported), ``generated``."""

    prompt: int
    generated: int
    cached: int | None

    @property
    def total(self) -> int:
        """Prompt plus generated tokens: what the backend read and wrote for the result."""
        return self.prompt + self.generated

    def to_dict(self) -> JSONDict:
        """``{"prompt", "cached", "generated"}`` (``cached`` null when not reported)."""
        return {"prompt": self.prompt, "cached": self.cached, "generated": self.generated}

    @classmethod
    def from_dict(cls, d: object) -> Tokens | None:
        """The inverse of :meth:`to_dict`; None for anything else (a row written before tokens were recorded)."""
        if not isinstance(d, Mapping) or not isinstance(d.get("prompt"), int):
            return None
        cached = d.get("cached")
        return cls(int(d["prompt"]), int(d.get("generated") or 0), cached if isinstance(cached, int) else None)


def tokens_of(result: object) -> Tokens | None:
    """A result's tokens, read from its attributes (a :class:`~brrm.types.PairwiseJudgment`, a
    :class:`~brrm.types.ScalarReward` or an arena battle: the values layer names none of them): a judgment's turns
    summed (its ``prompt_tokens``/``generated_tokens`` when it was recorded before turns were), a scalar reward's
    input tokens (one forward pass: nothing generated, cache not reported); an arena battle's recorded tokens; None
    for a result that made no model call."""
    if isinstance(recorded := getattr(result, "tokens", None), Tokens):
        return recorded
    turns = getattr(result, "turns", None)
    if turns:
        whole = functools.reduce(operator.add, turns)
        return Tokens(whole.prompt, whole.generated, whole.cached)
    if turns is not None:  # a judgment without turns: replayed, short-circuited, or from an older record
        j: Any = result
        return Tokens(j.prompt_tokens, j.generated_tokens, None) if j.prompt_tokens or j.generated_tokens else None
    n = getattr(result, "input_tokens", 0)
    return Tokens(n, 0, None) if n else None


def _spread(values: Sequence[float]) -> JSONDict:
    """``{"mean", "p95"}`` of ``values`` (p95 by linear interpolation, as ``numpy.percentile``'s default)."""
    if len(values) == 1:
        return {"mean": float(values[0]), "p95": float(values[0])}
    p95 = statistics.quantiles(values, n=20, method="inclusive")[18]
    return {"mean": round(statistics.fmean(values), 3), "p95": round(p95, 3)}


def _stage_shares(results: Sequence[object]) -> JSONDict | None:
    """The share of a cascade's results each stage decided, or None when no result came from a cascade."""
    stages = [d.stage.value if (d := getattr(r, "cascade", None)) is not None else getattr(r, "cascade_stage", "")
              for r in results]
    stages = [s for s in stages if s]
    if not stages:
        return None
    return {"results": len(stages), "first": round(stages.count("first") / len(stages), 6),
            "second": round(stages.count("second") / len(stages), 6)}


def token_report(results: Iterable[object],
                 seconds: float | None = None) -> JSONDict:
    """What a batch of results cost: tokens per result (mean and p95 of prompt, cached, generated and total),
    results per second over ``seconds`` of wall time, and a cascade's stage shares.

    Args:
        results: judgments or rewards (composites count once, their ordered judgments included).
        seconds: the wall time that produced them, > 0, or None when not timed.

    Returns:
        ``{"results", "with_tokens", "tokens_per_judgment": {"prompt", "cached", "generated", "total"} each
        {"mean", "p95"} (``cached`` is ``None`` when some result's backend did not report it), "by_turn": [{"prompt",
        "cached", "generated"} means per turn], "judgments_per_second", "cascade"}`` (``cascade`` only for a cascade's
        results: ``{"results", "first", "second"}`` shares).
    """
    rows = list(results)
    toks = [t for r in rows if (t := tokens_of(r)) is not None]
    per: JSONDict = {}
    if toks:
        cached = [t.cached for t in toks]
        per = {"prompt": _spread([t.prompt for t in toks]), "generated": _spread([t.generated for t in toks]),
               "total": _spread([t.total for t in toks]),
               "cached": None if any(c is None for c in cached) else _spread([c or 0 for c in cached])}
    turned = [t for r in rows if (t := getattr(r, "turns", None))]
    depth = max(map(len, turned), default=0)
    by_turn: list[JSONValue] = [_turn_means([ts[i] for ts in turned if len(ts) > i]) for i in range(depth)]
    rate = len(rows) / seconds if seconds and seconds > 0 and rows else None
    out: JSONDict = {"results": len(rows), "with_tokens": len(toks), "tokens_per_judgment": per or None,
                     "by_turn": by_turn, "judgments_per_second": None if rate is None else round(rate, 4)}
    shares = _stage_shares(rows)
    if shares is not None:
        out["cascade"] = shares
    return out


def _turn_means(turns: Sequence[TurnTokens]) -> JSONDict:
    cached = None if any(t.cached is None for t in turns) else statistics.fmean([t.cached or 0 for t in turns])
    return {"results": len(turns), "prompt": round(statistics.fmean([t.prompt for t in turns]), 3),
            "cached": None if cached is None else round(cached, 3),
            "generated": round(statistics.fmean([t.generated for t in turns]), 3)}


def token_line(report: Mapping[str, Any]) -> str:
    """One line for people from :func:`token_report`'s dict, e.g. ``tokens per judgment: mean 1,234 (p95 2,000;
    prompt 1,000, cached 400, generated 234); 3.2 judgments/s; cascade: first stage decided 70%``."""
    per = report.get("tokens_per_judgment")
    parts: list[str] = []
    if per:
        cached = per["cached"]
        cached_text = "not reported" if cached is None else f"{cached['mean']:,.0f}"
        parts.append(f"tokens per judgment: mean {per['total']['mean']:,.0f} (p95 {per['total']['p95']:,.0f}; "
                     f"prompt {per['prompt']['mean']:,.0f}, cached {cached_text}, "
                     f"generated {per['generated']['mean']:,.0f})")
    else:
        parts.append("tokens per judgment: not measured")
    rate = report.get("judgments_per_second")
    if rate is not None:
        parts.append(f"{rate:.3g} judgments/s" if math.isfinite(rate) else "judgments/s: not measured")
    shares = report.get("cascade")
    if shares:
        parts.append(f"cascade: first stage decided {shares['first']:.0%}, second {shares['second']:.0%}")
    return "; ".join(parts)
