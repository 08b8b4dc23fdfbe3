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

After the last segment the end-of-turn token is forced. :class:`CompiledProgram` turns a program into
token-level form once per tokenizer (indices are cached) and :class:`ProgramState` steps one row of a
batch through it. Backends without token-level control (vLLM, OpenAI servers) translate programs into
their own structured-output requests instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brrm.errors import ConfigError


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
    logit over the whole vocabulary, appended last).

    ``after`` is the text that precedes the choice in context: each option's id is the token the model would emit
    there (:func:`label_token_id`), so SentencePiece ``▁`` variants and merged spaces resolve as in position.
    """

    options: tuple[str, ...]
    after: str = ""
    with_max: bool = False


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


_INDEX_CACHE: dict[tuple[str, str], Any] = {}
_VOCABS: weakref.WeakKeyDictionary[Any, tuple[str, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
COMPILE_SECONDS: list[float] = []
"""Wall seconds of every outlines-core index compiled (not loaded from disk) in this process."""
INDEX_CACHE_ENV = "BRRM_CACHE_DIR"
_INDEX_FORMAT = 2  # bump when the vocabulary given to outlines-core changes (2: raw token bytes)


def _vocabulary(tokenizer: Any, eos_id: int) -> tuple[str, Any]:
    """(fingerprint, outlines-core Vocabulary) without special/added control tokens, once per tokenizer.

    Byte-level BPE tokens (GPT-2 / Qwen / SmolLM style) are given to outlines-core as their raw bytes, so a
    token holding part of a UTF-8 character can only be used where the grammar's byte automaton allows
    it (outlines' string conversion maps all such tokens to "\ufffd", which lets a pattern emit invalid
    UTF-8, unlike vLLM's grammar engines). Other tokenizers go through outlines' string conversion.
    """
    cached = _VOCABS.get(tokenizer)
    if cached is not None:
        return cached
    from outlines_core import Vocabulary

    excluded = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    vocab = {tok: i for tok, i in tokenizer.get_vocab().items() if i not in excluded}
    to_bytes = _token_bytes_function(tokenizer)
    formatted: dict[bytes, list[int]] = {}
    for tok, i in vocab.items():
        formatted.setdefault(to_bytes(tok), []).append(i)
    vocabulary = Vocabulary(eos_id, formatted)
    digest = hashlib.sha256(json.dumps([eos_id, sorted(vocab.items(), key=lambda kv: kv[1])]).encode())
    _VOCABS[tokenizer] = (digest.hexdigest(), vocabulary)
    return _VOCABS[tokenizer]


def _token_bytes_function(tokenizer: Any) -> Any:
    """token string -> the bytes it decodes to."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ == "ByteLevel":
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        inverse = {ch: b for b, ch in bytes_to_unicode().items()}
        return lambda tok: bytes(inverse[c] for c in tok) if all(c in inverse for c in tok) else tok.encode()
    from outlines.models.transformers import TransformerTokenizer

    convert = TransformerTokenizer(tokenizer).convert_token_to_string
    return lambda tok: convert(tok).encode()


def _index_path(fingerprint: str, regex: str) -> Path:
    import importlib.metadata

    import platformdirs

    root = Path(os.environ.get(INDEX_CACHE_ENV) or platformdirs.user_cache_dir("brrm")) / "indices"
    version = importlib.metadata.version("outlines_core")
    key = hashlib.sha256(f"{_INDEX_FORMAT}\0{version}\0{fingerprint}\0{regex}".encode()).hexdigest()[:32]
    return root / f"{key}.bin"


def compile_index(tokenizer: Any, regex: str, eos_id: int) -> Any:
    """The outlines-core Index of ``regex`` for ``tokenizer``.

    Compiled once per (vocabulary, regex) and kept in memory and on disk (``$BRRM_CACHE_DIR`` or the user
    cache dir, ``indices/``; raw ``Index.from_binary`` bytes, never pickle), since a large vocabulary
    (Qwen's 151,669 tokens) makes compilation take seconds.
    """
    from outlines_core import Index

    fingerprint, vocabulary = _vocabulary(tokenizer, eos_id)
    key = (fingerprint, regex)
    with _LOCK:
        if key not in _INDEX_CACHE:
            path = _index_path(fingerprint, regex)
            try:
                _INDEX_CACHE[key] = Index.from_binary(path.read_bytes())
            except (OSError, ValueError):
                start = time.perf_counter()
                index = Index(regex, vocabulary)
                COMPILE_SECONDS.append(time.perf_counter() - start)
                _INDEX_CACHE[key] = index
                _write_atomic(path, index.__reduce__()[1][0])
        return _INDEX_CACHE[key]


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs recompilation
        pass


def single_token_id(tokenizer: Any, text: str) -> int:
    """The id of ``text`` when it is exactly one token.

    Raises:
        ConfigError: when the tokenizer splits ``text`` into several tokens (or none).
    """
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"{text!r} must be a single token for this constraint, but the tokenizer gives {ids}")
    return ids[0]


def label_token_id(tokenizer: Any, label: str, after: str = "") -> int:
    """The id of ``label`` as the model would emit it right after the text ``after`` (one token).

    The label is tokenized in position — ``after + label`` against ``after`` alone — so a tokenizer that writes a
    word differently at the start of a string (SentencePiece's ``▁``) or merges it with what precedes gives the
    id that follows the prompt, not the id of the isolated string.

    Raises:
        ConfigError: when the label is not exactly one token in that position (an ambiguous label).
    """
    from brrm.tokens import encoder

    enc = encoder(tokenizer)
    context, full = enc.text(after), enc.text(after + label)
    extra = full[len(context):] if full[:len(context)] == context else None
    if extra is None or len(extra) != 1:
        raise ConfigError(f"label {label!r} is not one token after {after[-20:]!r} with this tokenizer (it gives "
                          f"{full[len(context):] if extra is not None else full}); a judgement read from one token's "
                          "logit needs a single-token label")
    return int(extra[0])


@dataclass(frozen=True)
class _ThinkItem:
    budget: int
    close: tuple[int, ...]
    close_tail: tuple[int, ...]
    end_id: int


@dataclass(frozen=True)
class _PatternItem:
    index: Any
    cap: int
    force: tuple[int, ...]


@dataclass(frozen=True)
class _LiteralItem:
    ids: tuple[int, ...]


@dataclass(frozen=True)
class _ChoiceItem:
    ids: tuple[int, ...]
    with_max: bool = False


_KINDS = {_ThinkItem: "think", _PatternItem: "pattern", _LiteralItem: "literal", _ChoiceItem: "choice"}


@dataclass
class CompiledProgram:
    """A program in token form for one tokenizer. Build with :meth:`build` (cached per tokenizer)."""

    program: Program
    eos_id: int
    vocab_size: int
    items: list[Any] = field(default_factory=list)

    @classmethod
    def build(cls, program: Program, tokenizer: Any, eos_id: int, vocab_size: int) -> CompiledProgram:
        """Compile every segment: token ids of fixed texts, outlines-core indices of patterns.

        Raises:
            ConfigError: when a Choice option or ``</think>`` is not a single token.
        """
        compiled = cls(program, eos_id, vocab_size)

        def enc(text: str) -> tuple[int, ...]:
            return tuple(tokenizer.encode(text, add_special_tokens=False))

        for seg in program.segments:
            if isinstance(seg, Think):
                tail = seg.close.split("</think>", 1)[1] if "</think>" in seg.close else ""
                compiled.items.append(_ThinkItem(seg.budget, enc(seg.close), enc(tail),
                                                 single_token_id(tokenizer, "</think>")))
            elif isinstance(seg, Pattern):
                compiled.items.append(_PatternItem(compile_index(tokenizer, seg.regex, eos_id), seg.cap,
                                                   enc(seg.force)))
            elif isinstance(seg, Literal):
                compiled.items.append(_LiteralItem(enc(seg.text)))
            else:
                ids = tuple(label_token_id(tokenizer, o, seg.after) for o in seg.options)
                compiled.items.append(_ChoiceItem(ids, seg.with_max))
        return compiled


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
        self.guide: Any = None
        self.think_budget_hit = False
        self.think_closed = False
        self.forced_caps = 0
        self.done = False
        self._enter()

    @property
    def item(self) -> Any:
        return self.c.items[self.pos] if self.pos < len(self.c.items) else None

    @property
    def kind(self) -> str:
        return _KINDS.get(type(self.item), "end")

    def _enter(self) -> None:
        self.in_segment = 0
        self.guide = None
        item = self.item
        if item is None:
            self.queue = [self.c.eos_id]
        elif isinstance(item, _LiteralItem):
            self.queue = list(item.ids)
            if not self.queue:
                self._next()
        elif isinstance(item, _PatternItem):
            from outlines_core import Guide

            self.guide = Guide(item.index)

    def choice_ids(self) -> tuple[int, ...]:
        return self.item.ids if isinstance(self.item, _ChoiceItem) else ()

    def choice_with_max(self) -> bool:
        """Whether this choice step also records the vocabulary's largest logit."""
        return isinstance(self.item, _ChoiceItem) and self.item.with_max

    def forced(self) -> int | None:
        """The token that must come next, or None when the model chooses."""
        if self.done:
            return None
        item = self.item
        if not self.queue and isinstance(item, _ThinkItem) and self.in_segment >= item.budget:
            self.think_budget_hit = True
            self.queue = list(item.close)
        elif (not self.queue and isinstance(item, _PatternItem) and item.cap and self.in_segment >= item.cap
              and item.force and self.guide.accepts_tokens(list(item.force))):
            self.forced_caps += 1
            self.queue = list(item.force)
        return self.queue[0] if self.queue else None

    def banned_stop(self) -> bool:
        """Inside a Think segment the end-of-turn token is banned (the turn must reach its verdict)."""
        return self.kind == "think"

    def write_mask(self, bitmask: Any) -> bool:
        """Fill ``bitmask`` for a pattern step; returns False when this step is not a pattern step."""
        if self.kind != "pattern":
            return False
        from outlines_core.kernels.torch import fill_next_token_bitmask

        fill_next_token_bitmask(self.guide, bitmask)
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
        if item is None:
            self.done = True
        elif isinstance(item, _ThinkItem):
            if token == item.end_id and not self.think_closed:
                self.think_closed = True
                if not forced:  # the model closed its thinking: the canonical tail ("\n\n") follows
                    self.queue = list(item.close_tail)
            if self.think_closed and not self.queue:
                self._next()
        elif isinstance(item, _PatternItem):
            self.guide.advance(token_id=token, return_tokens=False)
            if self.guide.is_finished():
                self.queue = []
                self._next()
        elif isinstance(item, _LiteralItem):
            if not self.queue:
                self._next()
        else:
            self._next()

    def _next(self) -> None:
        self.pos += 1
        self._enter()


def literal(text: str) -> str:
    """Escape ``text`` for use as a literal inside an outlines-core regex."""
    import re

    return re.escape(text)


def alternatives(options: Sequence[str]) -> str:
    """A regex group matching exactly one of ``options`` (escaped)."""
    return "(" + "|".join(literal(o) for o in options) + ")"
