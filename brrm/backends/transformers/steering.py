"""One row's position in a compiled program, step by step (the transformers backend's decode loop drives it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from brrm.constraints.compile import (
    FORCE_GRACE,
    KINDS,
    ChoiceItem,
    CompiledProgram,
    Item,
    LiteralItem,
    PatternItem,
    ThinkItem,
)
from brrm.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from outlines_core import Guide


class ProgramState:
    """One row's position in a compiled program.

    Per decoding step: ``t = state.forced()``; if it is not None the row must emit ``t`` (fixed text,
    a forced close, the end-of-turn token); otherwise the caller masks the logits (``write_mask`` for
    patterns, ``choice_ids`` for choices, ``banned_stop`` inside thinking) and samples. Either way it
    then calls ``state.advance(t)``. Consecutive forced tokens can be emitted without running the model
    in between (jump-forward), since the model's choice does not matter for them.
    """

    def __init__(self, compiled: CompiledProgram) -> None:
        self.c = compiled
        self.pos = 0
        self.in_segment = 0
        self.queue: list[int] = []
        self._guide: Guide | None = None
        self.think_budget_hit = False
        self.think_closed = False
        self.forced_caps = 0
        self.done = False
        self._enter()

    @property
    def item(self) -> Item | None:
        """The compiled segment the row is in; None past the last one (the end-of-turn token comes next)."""
        return self.c.items[self.pos] if self.pos < len(self.c.items) else None

    @property
    def guide(self) -> Guide:
        """The outlines-core guide of the current pattern segment.

        Raises:
            RuntimeError: outside a pattern segment (a decoder bug).
        """
        if self._guide is None:
            raise RuntimeError(f"no pattern guide in a {self.kind!r} segment")
        return self._guide

    @property
    def kind(self) -> str:
        return KINDS.get(type(self.item), "end")

    def _enter(self) -> None:
        self.in_segment = 0
        self.segment_ids: list[int] = []
        self._guide = None
        item = self.item
        if item is None:
            self.queue = [self.c.eos_id]
        elif isinstance(item, LiteralItem):
            self.queue = list(item.ids)
            if not self.queue:
                self._next()
        elif isinstance(item, PatternItem):
            from outlines_core import Guide

            self._guide = Guide(item.index)

    def choice_ids(self) -> tuple[int, ...]:
        return self.item.ids if isinstance(self.item, ChoiceItem) else ()

    def choice_with_max(self) -> bool:
        """Whether this choice step also records the vocabulary's largest logit."""
        return isinstance(self.item, ChoiceItem) and self.item.with_max

    def choice_top(self) -> int:
        """How many of the step's largest logits this choice step records (0: none)."""
        return self.item.top if isinstance(self.item, ChoiceItem) else 0

    def forced(self) -> int | None:
        """The token that must come next, or None when the model chooses."""
        if self.done:
            return None
        item = self.item
        if not self.queue and isinstance(item, ThinkItem) and self.in_segment >= item.budget:
            self.think_budget_hit = True
            self.queue = list(item.close)
        elif (not self.queue and isinstance(item, PatternItem) and item.cap and self.in_segment >= item.cap
              and item.force and self.guide.accepts_tokens(list(item.force))
              and (item.safe is None or item.safe(self.segment_ids) or self.in_segment >= item.cap + FORCE_GRACE)):
            self.forced_caps += 1
            self.queue = list(item.force)
        return self.queue[0] if self.queue else None

    def banned_stop(self) -> bool:
        """Inside a Think segment the end-of-turn token is banned (the turn must reach its verdict)."""
        return self.kind == "think"

    def write_mask(self, bitmask: torch.Tensor) -> bool:
        """Fill ``bitmask`` for a pattern step; returns False when this step is not a pattern step."""
        if self.kind != "pattern":
            return False
        from brrm.backends.transformers.bitmask import fill

        fill(self.guide, bitmask)
        return True

    def advance(self, token: int) -> None:
        """Consume the emitted ``token``.

        Raises:
            ConfigError: when a forced token was not the one emitted (a backend bug).
        """
        forced = bool(self.queue)
        if forced:
            if token != self.queue[0]:
                raise ConfigError(f"constraint expected forced token {self.queue[0]}, got {token}")
            self.queue.pop(0)
        item = self.item
        self.in_segment += 1
        self.segment_ids.append(token)
        if item is None:
            self.done = True
        elif isinstance(item, ThinkItem):
            if token == item.end_id and not self.think_closed:
                self.think_closed = True
                if not forced:  # the model closed its thinking: the canonical tail ("\n\n") follows
                    self.queue = list(item.close_tail)
            if self.think_closed and not self.queue:
                self._next()
        elif isinstance(item, PatternItem):
            self.guide.advance(token_id=token, return_tokens=False)
            if self.guide.is_finished():
                self.queue = []
                self._next()
        elif isinstance(item, LiteralItem):
            if not self.queue:
                self._next()
        else:
            self._next()

    def _next(self) -> None:
        self.pos += 1
        self._enter()
