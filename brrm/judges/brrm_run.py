"""One ``BRRMJudge.judge_ordered`` call run as chains of generations (:func:`brrm.backends.base.generate_chains`).

Each ordered judgment is a chain: turn 1, then turn 2 built from turn 1's output (on a continuously batching
backend it enters the running batch the step turn 1 ends), then, for ``max_retries``, a fresh attempt. Progress
counts half an item per finished turn (an item is 1.0 when final, whatever its retries), and each final judgment
goes to ``on_result`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from brrm.backends.base import Backend, Completion, GenerationRequest, Next, OnStep, generate_chains
from brrm.seeds import item_seed
from brrm.types import Conversation, PairwiseJudgment, SamplingConfig
from brrm.types.usage import TurnTokens, merge_turns

OnResult = Callable[[int, PairwiseJudgment], None]
"""``on_result(index, judgment)``: an item's final judgment, as soon as it is known."""


@dataclass
class Item:
    """One ordered judgment in flight (position 1 = ``first``)."""

    index: int
    key: str
    conversation: Conversation
    first: str
    second: str
    rid: str
    attempt: int = 0
    p1_text: str = ""
    p1_ids: tuple[int, ...] = ()
    t1: Completion | None = None
    p2_ids: tuple[int, ...] = ()
    t2: Completion | None = None
    result: PairwiseJudgment | None = None
    retryable: bool = True
    sample: int = 0
    spent: tuple[TurnTokens, ...] = ()
    """The turn tokens of earlier (retried) attempts."""

    def seed(self, base: int, turn: int) -> int:
        return item_seed(base, self.key, stream=f"turn{turn}", attempt=self.attempt, sample=self.sample)

    def turns(self) -> tuple[TurnTokens, ...]:
        """The tokens of every turn the backend ran for this item, earlier attempts included: each turn's prompt
        (P1, P2), the cached part the backend reported and the tokens generated."""
        now = [TurnTokens(len(ids), len(c.token_ids), c.cached_prompt_tokens)
               for ids, c in ((self.p1_ids, self.t1), (self.p2_ids, self.t2)) if c is not None]
        return merge_turns(self.spent, now)

    def retry(self) -> Item:
        """Reset for a fresh attempt of the same ordered judgment (new sampler streams)."""
        self.spent = self.turns()
        self.attempt += 1
        self.p1_text, self.p1_ids, self.t1, self.p2_ids, self.t2, self.result = "", (), None, (), None, None
        return self



class Sampled(Protocol):
    """What a run reads of its judge's config (:class:`brrm.judges.brrm.BRRMConfig`): the decoding settings."""

    @property
    def sampling(self) -> SamplingConfig: ...


class Judging(Protocol):
    """What a run needs of its judge (:class:`brrm.judges.brrm.BRRMJudge`): its backend and config, and the steps
    of one ordered judgment."""

    backend: Backend

    @property
    def config(self) -> Sampled: ...

    def _turn1(self, it: Item) -> GenerationRequest | None: ...

    def _after_turn1(self, it: Item, comp: Completion) -> GenerationRequest | None: ...

    def _finish(self, it: Item) -> PairwiseJudgment: ...

    def _should_retry(self, it: Item) -> bool: ...



class ItemRun:
    """One ``judge_ordered`` call's items as chains of generations: turn 1, then turn 2 (the moment turn 1
    ends, on a continuously batching backend), then the retries; reports progress and each final result."""

    def __init__(self, judge: Judging, progress: Callable[[float], None] | None,
                 on_result: OnResult | None, on_step: OnStep | None = None) -> None:
        self.judge, self.progress, self.on_result, self.on_step = judge, progress, on_result, on_step
        self.reported: dict[int, float] = {}
        self.items: list[Item] = []

    def chains(self, items: list[Item]) -> None:
        """Run ``items`` (none final yet) to their final results."""
        self.items = items
        firsts = [(k, step) for k, it in enumerate(items) if (step := self._start(it)) is not None]
        if not firsts:
            return
        chain_of = [k for k, _ in firsts]
        s = self.judge.config.sampling
        generate_chains(self.judge.backend, [step for _, step in firsts],
                        lambda c, comp: self._then(items[chain_of[c]], comp), temperature=s.temperature,
                        top_p=s.top_p, top_k=s.top_k, on_step=self.on_step,
                        on_complete=lambda c: self._turn_done(items[chain_of[c]]))

    def _turn_done(self, it: Item) -> None:
        """A turn of the item ended inside a round (backends without continuous batching): move progress now."""
        self._report(it, 0.5 if it.t1 is None else 1.0)

    def _start(self, it: Item) -> Next | None:
        """The turn-1 step of the item's current attempt; None when the item became final without a model call."""
        while True:
            req = self.judge._turn1(it)
            if req is not None:
                return Next(req, keep_kv=self.judge.backend.capabilities.kv_reuse)
            if not self._settle(it):
                return None

    def _then(self, it: Item, comp: Completion) -> Next | None:
        """The item's next step after ``comp`` (its turn 1 or turn 2), or None when it is final."""
        if it.t1 is None:
            req = self.judge._after_turn1(it, comp)
            self._report(it, 0.5)
            if req is not None:
                return Next(req)
        else:
            it.t2 = comp
            it.result = self.judge._finish(it)
        return self._start(it) if self._settle(it) else None

    def _settle(self, it: Item) -> bool:
        """The item has a result: True when it is retried (reset for a fresh attempt), else report it final."""
        if self.judge._should_retry(it):
            it.retry()
            return True
        self.final(it)
        return False

    def final(self, it: Item) -> None:
        self._report(it, 1.0)
        if self.on_result is not None and it.result is not None:
            self.on_result(it.index, it.result)

    def _report(self, it: Item, upto: float) -> None:
        done = self.reported.get(it.index, 0.0)
        if self.progress is not None and upto > done:
            self.progress(upto - done)
        self.reported[it.index] = max(done, upto)
