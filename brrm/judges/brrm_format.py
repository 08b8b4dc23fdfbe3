"""The BR-RM output format: the 8 dimensions, parsers for both turns, grammars, and marker neutralisation.

Source of every marker and of the verdict regex: github.com/YzjiaoNvd/BR-RM @ 34a58b2,
``nemo_rl/environments/brrm_environment.py`` (copies and the evaluation protocol in
``../shared/reference/``).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from brrm.constraints import Choice, Literal, Pattern, Program, Think, literal
from brrm.templates import neutralize_markers

__all__ = ["DIMENSIONS", "VERDICT_REGEX", "neutralize_markers", "parse_turn1", "parse_verdict", "plan_program"]

DIMENSIONS = (
    "Information Accuracy",
    "Computational Precision",
    "Logical Reasoning",
    "Implementation Capability",
    "Safety Awareness",
    "Response Completeness",
    "Instruction Adherence",
    "Communication Clarity",
)
"""The 8 quality dimensions turn 1 chooses from (1–3 of them), in the order of the released prompt."""

VERDICT_REGEX = re.compile(
    r"\[The Begin of Ranking Score\]\s*\n\s*\\boxed\{([^}]+)\}\s*\n\s*\[The End of Ranking Score\]"
)
"""The released strict verdict regex (reference README); group 1 must be "1" or "2"."""

_FOCUS = re.compile(r"\[Quality Assessment Focus\]\s*\n(.*?)\n\s*\[End of Quality Assessment Focus\]", re.DOTALL)
_ANALYSIS = "\\[Quality Analysis for Response {k}\\]\\s*\\n(.*?)\\n\\s*\\[End of Quality Analysis for Response {k}\\]"

def after_thinking(text: str) -> str:
    """The part of a turn after its last ``</think>``; the whole text when there is none."""
    return text.rsplit("</think>", 1)[-1]


def thinking_closed(text: str) -> bool:
    """False when the turn opened ``<think>`` and never closed it (nothing after it may be parsed)."""
    return "<think>" not in text or "</think>" in text


@dataclass(frozen=True)
class Turn1Parse:
    """Turn-1 fields: chosen dimensions (valid ones in order), unknown names, analyses of positions 1/2."""

    dimensions: tuple[str, ...]
    unknown: tuple[str, ...]
    analysis_1: str
    analysis_2: str


def parse_turn1(text: str) -> Turn1Parse:
    """Parse the focus block and both analysis blocks of T1 (last occurrence of each, after thinking).

    Dimension names match case-insensitively and are returned in canonical spelling; names outside the
    8 dimensions are kept in ``unknown`` (never silently dropped). Missing blocks give empty values.
    """
    body = after_thinking(text) if thinking_closed(text) else ""
    focus = _FOCUS.findall(body)
    dims: list[str] = []
    unknown: list[str] = []
    canon = {d.lower(): d for d in DIMENSIONS}
    if focus:
        raw = focus[-1].strip()
        raw = re.sub(r"^choose 1-3 abilities:\s*", "", raw, flags=re.IGNORECASE)
        for name in re.split(r"[,\n;]+", raw):
            name = name.strip().strip("-*•. ").strip()
            if not name:
                continue
            key = name.lower()
            if key in canon:
                if canon[key] not in dims:
                    dims.append(canon[key])
            elif name not in unknown:
                unknown.append(name)
    blocks = [re.findall(_ANALYSIS.format(k=k), body, flags=re.DOTALL) for k in (1, 2)]  # each response's, last one
    analysis_1, analysis_2 = (re.sub(r"^- Critical Issues:\s*", "", found[-1].strip() if found else "")
                              for found in blocks)
    return Turn1Parse(tuple(dims), tuple(unknown), analysis_1, analysis_2)


VERDICT_SELECTIONS = ("last_after_thinking", "first", "official")
"""How the verdict is picked from T2: ``first`` — the first regex match anywhere in T2 (``re.search``), its value
1 or 2; ``official`` — the released evaluation's parser and rule end to end (:func:`official_ranking`);
``last_after_thinking`` — the last match after the thinking block (a ranking block quoted while reasoning cannot
override the final one)."""


def official_ranking(text: str) -> tuple[int | None, str]:
    """The ranking the released evaluation reads from T2: ``(int, "")``, or ``(None, reason)`` where it has none.

    The official code (YzjiaoNvd/BR-RM @ ``d20a4e0``): ``parse_scoring_response`` in
    ``nemo_rl/environments/brrm_environment.py`` takes the first :data:`VERDICT_REGEX` match (``re.search``) and
    ``group(1).strip()``, refusing a value with a comma ("Preference ranking should be a single value"); then
    ``examples/run_eval_brrm.py`` keeps ``int(ranking)`` when the value is non-empty. So ``\\boxed{3}`` parses
    (to 3: scored as a parsed, wrong answer, since it is neither gold 1 nor 2); a value ``int`` refuses
    (``\\boxed{1 or 2}``) raises there and fails that whole batch in the official run, here only this judgment.
    """
    found = VERDICT_REGEX.search(text)
    if found is None:
        return None, "no [The Begin of Ranking Score] \\boxed{…} [The End of Ranking Score] block in turn 2"
    value = found.group(1).strip()
    if "," in value:
        return None, f"ranking block holds \\boxed{{{value}}}: a comma, refused by the official parser"
    if not value:
        return None, "ranking block holds an empty \\boxed{}, which the official evaluation does not rank"
    try:
        return int(value), ""
    except ValueError:
        return None, f"ranking block holds \\boxed{{{value}}}, not an integer (int() fails in the official script)"


def parse_verdict(text: str, selection: str = "last_after_thinking") -> tuple[int, str]:
    """The verdict position (1 or 2) from T2, or (0, reason).

    Only the judge's generated turn-2 text is read (never the prompt). ``selection`` is one of
    :data:`VERDICT_SELECTIONS`.
    """
    if selection == "first":
        found = VERDICT_REGEX.search(text)
        matches = [found.group(1)] if found else []
    else:
        if not thinking_closed(text):
            return 0, "turn 2 never closed its <think> block, so it has no verdict"
        matches = VERDICT_REGEX.findall(after_thinking(text))[-1:]
    if not matches:
        return 0, "no [The Begin of Ranking Score] \\boxed{…} [The End of Ranking Score] block in turn 2"
    value = matches[-1].strip()
    if value not in ("1", "2"):
        return 0, f"ranking block holds \\boxed{{{value}}}, expected 1 or 2"
    return int(value), ""


_FREE = r"[^\[]+"


@functools.cache
def _dims_regex(max_dims: int = 3) -> str:
    """1–max_dims distinct dimension names, comma separated, in any order (built once: 10,000+ escaped options)."""
    options = [
        ", ".join(p) for k in range(1, max_dims + 1) for p in itertools.permutations(DIMENSIONS, k)
    ]
    return "(" + "|".join(literal(o) for o in options) + ")"


_CLOSE = r"\n\["


def _issues_block(cap: int) -> Pattern:
    """A turn-1 critical-issues block: it starts with the space after "- Critical Issues:" (so the model writes
    " None" as the one token its tokenizer makes of it, not a forced lone space and then "None")."""
    return Pattern(" " + _FREE + _CLOSE, cap=cap, force="\n[", max_len=3)


def _block(cap: int) -> Pattern:
    """Free text ended by ``\n[`` (the start of the next marker); forced closed after ``cap`` tokens."""
    return Pattern(_FREE + _CLOSE, cap=cap, force="\n[", max_len=2)


def turn1_program(think_budget: int, block_cap: int, seam: str = "") -> Program:
    """Turn 1 after the optional thinking block: focus (1–3 distinct dimensions) and two analyses.

    Markers are Literal segments (emitted without consulting the model); the dimension list is a
    pattern over the 1–3 distinct names; each analysis is free text ended by the model with ``\n[``.
    ``seam`` is written after the last marker, in the same literal: ``"\n"`` (the released protocol's text
    between T1 and ``<|im_end|>``) makes turn 1 end on the canonical ``"]\n"`` token, so turn 2 can extend
    turn 1's ids exactly (``turn2_tokens="concat"``).
    """
    segments: list = [Think(think_budget)] if think_budget > 0 else []
    dims_max = 3 * max(len(d) for d in DIMENSIONS) + 4
    segments += [
        Literal("[Quality Assessment Focus]\n"),
        Pattern(_dims_regex() + _CLOSE, max_len=dims_max + 2),
        Literal("End of Quality Assessment Focus]\n\n[Quality Analysis for Response 1]\n- Critical Issues:"),
        _issues_block(block_cap),
        Literal("End of Quality Analysis for Response 1]\n\n[Quality Analysis for Response 2]\n"
                "- Critical Issues:"),
        _issues_block(block_cap),
        Literal("End of Quality Analysis for Response 2]" + seam),
    ]
    return Program(tuple(segments))


def turn2_program(think_budget: int, block_cap: int) -> Program:
    """Turn 2 after the optional thinking block: two analyses, then the ranking with digit 1 or 2."""
    segments: list = [Think(think_budget)] if think_budget > 0 else []
    segments += [
        Literal("[The Begin of Analysis on Response 1]\n"),
        _block(block_cap),
        Literal("The End of Analysis on Response 1]\n\n[The Begin of Analysis on Response 2]\n"),
        _block(block_cap),
        Literal("The End of Analysis on Response 2]\n\n[The Begin of Ranking Score]\n\\boxed{"),
        Choice(("1", "2"), after="\\boxed{"),
        Literal("}\n[The End of Ranking Score]"),
    ]
    return Program(tuple(segments))


MIN_BLOCK_CAP = 8
"""Smallest token cap of a free-text block; a turn budget that cannot afford it is ``truncated``."""


def _builder(turn: int, seam: str) -> Callable[[int, int], Program]:
    if turn == 1:
        return lambda think, cap: turn1_program(think, cap, seam)
    return turn2_program


def min_budget(turn: int, *, thinking: bool, seam: str = "") -> int:
    """The smallest per-turn token budget :func:`plan_program` accepts."""
    build = _builder(turn, seam)
    fixed = build(0, 0).max_tokens() + (len(Think(0).close) if thinking else 0)
    return fixed + MIN_BLOCK_CAP * (4 if thinking else 2)


def plan_program(turn: int, budget: int, *, thinking: bool, block_cap: int, seam: str = "") -> Program | None:
    """The constrained program of ``turn`` (1 or 2) that fits in ``budget`` new tokens, or None.

    The fixed markers are reserved first; the rest goes to the two free-text blocks (each at most
    ``block_cap`` tokens) and, when ``thinking``, to the thinking block (at least half of what is left).
    ``seam``: see :func:`turn1_program` (turn 1 only).
    """
    build = _builder(turn, seam)
    fixed = build(0, 0).max_tokens() + (len(Think(0).close) if thinking else 0)
    free = budget - fixed
    cap = min(block_cap, free // (4 if thinking else 2))
    if cap < MIN_BLOCK_CAP:
        return None
    program = build(free - 2 * cap if thinking else 0, cap)
    return program if program.max_tokens() <= budget else None
