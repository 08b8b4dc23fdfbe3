"""The single-item helpers of :class:`~brrm.types.protocols.RewardJudge` (``judge``, ``score_one``, ``rank``,
``cost``), written once over the batch methods, and the callback and principle types the batch methods take."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from brrm.types.conversation import ConversationLike
from brrm.types.cost import JudgmentCost
from brrm.types.results import GroupResult, PairwiseJudgment, ScalarReward

Principles = str | Sequence[str] | None
"""One principle for every item, one per item, or None (the judge's default principle, if any)."""

Progress = Callable[[float], None] | None
"""A callback the batch methods call with the number of items (pairs, responses) just finished, > 0."""
OnResult = Callable[[int, Any], None] | None
"""``on_result(index, result)``: item ``index``'s final result, as soon as it is known (a continuously batching
backend knows it before the call returns), in the calling thread; results still come back in order."""
OnStep = Callable[[int, int], None] | None
"""``on_step(rows, tokens)``: after each decoding step of a continuously batching backend (rows in its batch,
tokens the step added), for progress displays; judges without decoding steps never call it."""


class _Batched(Protocol):
    """The batch methods the single-item helpers of :class:`SingleItems` stand on."""

    def judge_pairs(self, conversations: Sequence[ConversationLike], responses_a: Sequence[str],
                    responses_b: Sequence[str], /, *, swap: bool | None = None) -> list[PairwiseJudgment]: ...

    def score(self, conversations: Sequence[ConversationLike], responses: Sequence[str], /, *,
              principles: Principles = None, references: Sequence[str] | None = None) -> list[ScalarReward]: ...

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]: ...


class _Costed(Protocol):
    """The cost method :meth:`SingleItems.cost` stands on."""

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> JudgmentCost: ...


class SingleItems:
    """``judge``, ``score_one``, ``rank`` and ``cost`` of :class:`RewardJudge`, written once over the batch methods
    and ``judgment_cost``: a judge class (local, remote or a wrapper) inherits them and writes only
    ``judge_pairs``, ``score``, ``rank_groups`` and ``judgment_cost``."""

    def cost(self: _Costed, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
             principles: int | None = None) -> int:
        """``judgment_cost(...).total``: the units a request runs, samples included (see ``judgment_cost``).

        Raises:
            ConfigError: as ``judgment_cost``.
        """
        return self.judgment_cost(shape, n, strategy=strategy, swap=swap, principles=principles).total

    def judge(self: _Batched, conversation: ConversationLike, response_a: str, response_b: str, /, *,
              swap: bool | None = None) -> PairwiseJudgment:
        """One pair; see ``judge_pairs``."""
        return self.judge_pairs([conversation], [response_a], [response_b], swap=swap)[0]

    def score_one(self: _Batched, conversation: ConversationLike, response: str, /, *,
                  principle: str | None = None, reference: str | None = None) -> ScalarReward:
        """One response; see ``score``."""
        refs = None if reference is None else [reference]
        return self.score([conversation], [response], principles=principle, references=refs)[0]

    def rank(self: _Batched, conversation: ConversationLike, responses: Sequence[str], /, *, strategy: str = "auto",
             reference: str | None = None, swap: bool | None = None, principles: Principles = None,
             progress: Progress = None) -> GroupResult:
        """One group; see ``rank_groups``."""
        refs = None if reference is None else [reference]
        return self.rank_groups([conversation], [responses], strategy=strategy, references=refs, swap=swap,
                                principles=principles, progress=progress)[0]
