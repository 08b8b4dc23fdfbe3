"""Constraint programs: backend-neutral descriptions of what a constrained turn may generate.

A program is a sequence of segments run in order after the prompt:

* :class:`Think` — free text inside the model's ``<think>`` block, ended by the model's ``</think>`` or,
  when its token budget runs out, by forcing ``close`` (the budget hit is reported on the result).
* :class:`Pattern` — text matching a regular expression (compiled with outlines-core against the
  tokenizer's vocabulary). Every pattern used here ends in a fixed literal, so reaching an accepting
  state is unambiguous (no "accept early" truncation, outlines issue #1121). When ``cap`` tokens have
  been generated inside the segment, ``force`` is emitted instead, which completes the pattern from any
  state of its free-text part.
* :class:`Literal` — fixed text, emitted as its tokenization without asking the model (jump-forward:
  a backend may feed all of its tokens in one forward pass).
* :class:`Choice` — exactly one token out of a fixed set (e.g. the verdict digits "1"/"2"); the raw
  logits of the options are recorded at that step.

After the last segment the end-of-turn token is forced. :mod:`brrm.constraints.compile` turns a program into
token-level form once per tokenizer, and the transformers backend's steering
(:mod:`brrm.backends.transformers.steering`) steps one row of a batch through it.
Backends without token-level control (vLLM, OpenAI servers) run programs as chains of structured-output
requests instead (:mod:`brrm.backends.blackbox.phases`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Think:
    """A free ``<think>`` block of at most ``budget`` tokens, closed by forcing ``close`` if needed."""

    budget: int
    close: str = "\n</think>\n\n"


@dataclass(frozen=True)
class Pattern:
    """Text matching ``regex``; after ``cap`` tokens in this segment, ``force`` is emitted to finish it.

    ``max_len`` bounds the characters of the pattern's fixed part (everything but its free text); as
    every token of such text is at least one character, it bounds that part's tokens too.
    """

    regex: str
    cap: int = 0
    force: str = ""
    max_len: int = 0


@dataclass(frozen=True)
class Literal:
    """Fixed text, emitted as its own tokenization without consulting the model (jump-forward)."""

    text: str


@dataclass(frozen=True)
class Choice:
    """One token from ``options``; records the options' raw logits (and, with ``with_max``, the step's largest
    logit over the whole vocabulary, appended; then, with ``top`` = k > 0, the step's k largest raw logits over
    the vocabulary in descending order, appended last — what top-k/top-p logits processing needs).

    ``after`` is the text that precedes the choice in context: each option's id is the token the model would emit
    there (:func:`label_token_id`), so SentencePiece ``▁`` variants and merged spaces resolve as in position.
    """

    options: tuple[str, ...]
    after: str = ""
    with_max: bool = False
    top: int = 0


Segment = Think | Pattern | Literal | Choice


@dataclass(frozen=True)
class Program:
    """A constrained turn: segments in order, then the end-of-turn token."""

    segments: tuple[Segment, ...]

    def max_tokens(self) -> int:
        """Upper bound on the tokens this program generates, end-of-turn token included."""
        total = 1
        for s in self.segments:
            if isinstance(s, Think):
                total += s.budget + len(s.close)
            elif isinstance(s, Pattern):
                total += s.cap + max(s.max_len, len(s.force))
            elif isinstance(s, Literal):
                total += len(s.text)
            else:
                total += 1
        return total


def literal(text: str) -> str:
    """Escape ``text`` for use as a literal inside an outlines-core regex."""
    return re.escape(text)

