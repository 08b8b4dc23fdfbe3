"""Swap-order debiasing: judge both presentation orders and combine them (ties are values, not errors).

LLM judges prefer a position (FastChat issue #3911: the first-shown answer won 52.6% of GPT-4's pairwise
verdicts, and 12.9% flipped when swapped). With swap, every pair is judged as (A, B) and (B, A) in one
backend call; agreement gives that winner, disagreement a tie marked ``consistent=False``, and P(A ≻ B) is
the mean of the two orientation-corrected probabilities. The logic works on the :class:`Verdict` enum, never
on integer arithmetic (TRL's old judges turned a −1 failure into "2" that way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from brrm.types import PairwiseJudgment, Verdict
from brrm.types.conversation import ConversationLike
from brrm.types.usage import merge_turns

OrderedFn = Callable[..., list[PairwiseJudgment]]


def mirror(j: PairwiseJudgment) -> PairwiseJudgment:
    """A (B, A) judgment seen in the (A, B) frame: winner, P(A ≻ B), digit logits and analyses swapped."""
    p_a = 1.0 - j.p_a if j.p_a == j.p_a else j.p_a
    p_raw = 1.0 - j.p_a_raw if j.p_a_raw == j.p_a_raw else j.p_a_raw
    return replace(j, winner=j.winner.mirrored(), p_a=p_a, p_a_raw=p_raw, analysis_a=j.analysis_b,
                   analysis_b=j.analysis_a)


def combine(fwd: PairwiseJudgment, rev: PairwiseJudgment) -> PairwiseJudgment:
    """Combine the (A, B) judgment and the (B, A) judgment already mirrored into the (A, B) frame.

    Agree -> that winner; disagree -> ``tie`` with ``consistent=False``; P(A ≻ B) = mean of both (NaN if
    either is NaN). If an order failed, the result carries that failure (the first failing order's status and
    reason) and ``consistent`` is None. ``attempts`` = 1 + the retries of both orders (0 when neither ran).
    """
    attempts = 0 if fwd.attempts == rev.attempts == 0 else 1 + max(fwd.attempts - 1, 0) + max(rev.attempts - 1, 0)
    prompt_tokens = fwd.prompt_tokens + rev.prompt_tokens
    generated_tokens = fwd.generated_tokens + rev.generated_tokens
    turns = merge_turns(fwd.turns, rev.turns)
    failed = next((j for j in (fwd, rev) if not j.ok), None)
    if failed is not None:
        where = "reversed" if failed is rev else "forward"
        return replace(failed, reason=f"{where} order: {failed.reason}", sub_judgments=(fwd, rev), consistent=None,
                       attempts=attempts, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens, turns=turns)
    consistent = fwd.winner is rev.winner
    winner = fwd.winner if consistent else Verdict.TIE
    reason = "" if consistent else (f"position inconsistent: forward says {fwd.winner.value}, reversed says "
                                    f"{rev.winner.value}")
    if consistent and fwd.reason:
        reason = fwd.reason
    return replace(fwd, winner=winner, reason=reason, p_a=(fwd.p_a + rev.p_a) / 2,
                   p_a_raw=(fwd.p_a_raw + rev.p_a_raw) / 2, sub_judgments=(fwd, rev),
                   consistent=consistent, attempts=attempts, prompt_tokens=prompt_tokens,
                   generated_tokens=generated_tokens, turns=turns)


def judge_with_swap(ordered: OrderedFn, conversations: Sequence[ConversationLike], responses_a: Sequence[str],
                    responses_b: Sequence[str], *, swap: bool, ids: Sequence[str],
                    progress: Callable[[float], None] | None = None,
                    on_result: OnResult | None = None,
                    on_step: Callable[[int, int], None] | None = None) -> list[PairwiseJudgment]:
    """Judge N pairs, in both orders in one call when ``swap`` (2N ordered judgments), and combine.

    Args:
        ordered: ``ordered(conversations, first, second, ids=…, progress=…[, on_result=…])`` of an ordered-pair
            judge.
        ids: N record ids (each order's sub-judgment carries its pair's id).
        progress: called with finished pairs (fractions; each order counts half a pair under swap).
        on_result: called with ``(pair index, judgment)`` as soon as a pair is final (under swap: when its
            second order is); passed to ``ordered`` only when given, as is ``on_step`` (decoding steps).
    """
    n = len(conversations)
    if not swap:
        extra: dict[str, Any] = {"on_result": on_result} if on_result is not None else {}
        if on_step is not None:
            extra["on_step"] = on_step
        return ordered(conversations, responses_a, responses_b, ids=ids, progress=progress, **extra)
    half = (lambda x: progress(x / 2)) if progress else None
    reported: dict[int, PairwiseJudgment] = {}

    def keep(pair: int, j: PairwiseJudgment) -> None:  # the reported judgment is the one returned (same object)
        reported[pair] = j
        if on_result is not None:
            on_result(pair, j)

    extra = {"on_result": _pairing(n, keep)} if on_result is not None else {}
    if on_step is not None:
        extra["on_step"] = on_step
    both = ordered([*conversations, *conversations], [*responses_a, *responses_b], [*responses_b, *responses_a],
                   ids=[*ids, *ids], progress=half, **extra)
    return [reported[i] if i in reported else combine(both[i], mirror(both[n + i])) for i in range(n)]


OnResult = Callable[[int, PairwiseJudgment], None]


def _pairing(n: int, on_result: OnResult) -> OnResult:
    """An ordered judge's per-item callback over 2N items (forward orders, then reversed ones) that reports each
    pair's combined judgment once both its orders are final."""
    halves: dict[int, PairwiseJudgment] = {}

    def got(k: int, j: PairwiseJudgment) -> None:
        pair = k % n
        other = halves.pop(pair, None)
        if other is None:
            halves[pair] = j
            return
        fwd, rev = (j, other) if k < n else (other, j)
        on_result(pair, combine(fwd, mirror(rev)))

    return got
