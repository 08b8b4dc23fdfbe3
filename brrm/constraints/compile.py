"""Compiling programs for one tokenizer: outlines-core indices (cached in memory and on disk), label ids in
position, and :class:`CompiledProgram` (a program in token form)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, cast

from brrm.constraints.program import Literal, Pattern, Program, Think
from brrm.errors import ConfigError

if TYPE_CHECKING:
    from outlines_core import Index, Vocabulary
    from transformers import PreTrainedTokenizer, PreTrainedTokenizerBase

_INDEX_CACHE: dict[tuple[str, str], Index] = {}
_VOCABS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, tuple[str, Vocabulary]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
COMPILE_SECONDS: list[float] = []
"""Wall seconds of every outlines-core index compiled (not loaded from disk) in this process."""
INDEX_CACHE_ENV = "BRRM_CACHE_DIR"
_INDEX_FORMAT = 2  # bump when the vocabulary given to outlines-core changes (2: raw token bytes)


def _vocabulary(tokenizer: PreTrainedTokenizerBase, eos_id: int) -> tuple[str, Vocabulary]:
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

    # added_tokens_decoder: a property of transformers' tokenizers, absent on some slow and wrapped ones
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


def _token_bytes_function(tokenizer: PreTrainedTokenizerBase) -> Callable[[str], bytes]:
    """token string -> the bytes it decodes to."""
    # backend_tokenizer: the Rust tokenizer of a fast transformers tokenizer (slow ones have none)
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ == "ByteLevel":
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        inverse = {ch: b for b, ch in bytes_to_unicode().items()}
        return lambda tok: bytes(inverse[c] for c in tok) if all(c in inverse for c in tok) else tok.encode()
    from outlines.models.transformers import TransformerTokenizer

    # outlines annotates the slow PreTrainedTokenizer, but wraps any transformers tokenizer
    convert = TransformerTokenizer(cast("PreTrainedTokenizer", tokenizer)).convert_token_to_string
    return lambda tok: convert(tok).encode()


def _index_path(fingerprint: str, regex: str) -> Path:
    import importlib.metadata

    from brrm.embedded import _cache_root

    root = _cache_root(None) / "indices"  # INDEX_CACHE_ENV, else the user cache folder
    version = importlib.metadata.version("outlines_core")
    key = hashlib.sha256(f"{_INDEX_FORMAT}\0{version}\0{fingerprint}\0{regex}".encode()).hexdigest()[:32]
    return root / f"{key}.bin"


_COMPILE_LISTENERS: list[Callable[[], None]] = []


def on_compile(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener()`` (no arguments) just before an index is compiled because neither memory nor the disk
    cache holds it — the seconds-long step a user should hear about once, not on every run. Returns a function
    that removes the listener."""
    _COMPILE_LISTENERS.append(listener)
    return lambda: _COMPILE_LISTENERS.remove(listener) if listener in _COMPILE_LISTENERS else None


def compile_index(tokenizer: PreTrainedTokenizerBase, regex: str, eos_id: int) -> Index:
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
                for listener in list(_COMPILE_LISTENERS):
                    listener()
                start = time.perf_counter()
                index = Index(regex, vocabulary)
                COMPILE_SECONDS.append(time.perf_counter() - start)
                _INDEX_CACHE[key] = index
                _write_atomic(path, index.__reduce__()[1][0])
        return _INDEX_CACHE[key]


def _write_atomic(path: Path, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a read-only cache only costs recompilation
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)


def single_token_id(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    """The id of ``text`` when it is exactly one token.

    Raises:
        ConfigError: when the tokenizer splits ``text`` into several tokens (or none).
    """
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"{text!r} must be a single token for this constraint, but the tokenizer gives {ids}")
    return int(ids[0])


_ANCHORS = ("\n", "a", "0")
"""Texts a forced text is tokenized after (then dropped) to get its ids in mid-sequence position."""


def forced_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    """Ids of ``text`` that brrm forces after text already in the sequence (markers, a thinking close, a
    block end): the ids the tokenizer gives it in position, not at the start of a string.

    A SentencePiece-style tokenizer marks a word start with ``"▁"`` and prepends one to a whole string, so
    ``"}\n[The End…"`` alone becomes ``"▁}"…`` and decodes as ``"\boxed{2 }"`` after the digit. When the
    string's first token carries such a marker the text does not have, the text is tokenized after a short
    anchor (:data:`_ANCHORS`, dropped again) instead; byte-level BPE tokenizers (Qwen, GPT-2), whose pre-token
    boundaries already make the plain encoding canonical in position, keep the plain encoding.
    """
    plain = tuple(tokenizer.encode(text, add_special_tokens=False))
    if not plain or text.startswith((" ", "▁")) or not str(tokenizer.convert_ids_to_tokens(plain[0])).startswith("▁"):
        return plain
    for anchor in _ANCHORS:
        context = tokenizer.encode(anchor, add_special_tokens=False)
        full = tokenizer.encode(anchor + text, add_special_tokens=False)
        if full[:len(context)] == context and len(full) > len(context):
            return tuple(full[len(context):])
    return plain


def label_token_id(tokenizer: PreTrainedTokenizerBase, label: str, after: str = "") -> int:
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
class ThinkItem:
    budget: int
    close: tuple[int, ...]
    close_tail: tuple[int, ...]
    end_id: int


SafeForce: TypeAlias = Callable[[Sequence[int]], bool]
"""``safe(segment ids)``: forcing a pattern's completion now keeps the canonical tokenization."""


@dataclass(frozen=True)
class PatternItem:
    index: Index
    cap: int
    force: tuple[int, ...]
    safe: SafeForce | None = None


@dataclass(frozen=True)
class LiteralItem:
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ChoiceItem:
    ids: tuple[int, ...]
    with_max: bool = False
    top: int = 0


Item: TypeAlias = ThinkItem | PatternItem | LiteralItem | ChoiceItem
"""One compiled segment of a :class:`CompiledProgram`."""
KINDS = {ThinkItem: "think", PatternItem: "pattern", LiteralItem: "literal", ChoiceItem: "choice"}


@dataclass
class CompiledProgram:
    """A program in token form for one tokenizer. Build with :meth:`build` (cached per tokenizer)."""

    program: Program
    eos_id: int
    vocab_size: int
    items: list[Item] = field(default_factory=list)

    @classmethod
    def build(cls, program: Program, tokenizer: PreTrainedTokenizerBase, eos_id: int,
              vocab_size: int) -> CompiledProgram:
        """Compile every segment: token ids of fixed texts, outlines-core indices of patterns.

        Raises:
            ConfigError: when a Choice option or ``</think>`` is not a single token.
        """
        compiled = cls(program, eos_id, vocab_size)

        def enc(text: str) -> tuple[int, ...]:
            return forced_ids(tokenizer, text)

        for seg in program.segments:
            if isinstance(seg, Think):
                tail = seg.close.split("</think>", 1)[1] if "</think>" in seg.close else ""
                compiled.items.append(ThinkItem(seg.budget, enc(seg.close), enc(tail),
                                                 single_token_id(tokenizer, "</think>")))
            elif isinstance(seg, Pattern):
                compiled.items.append(PatternItem(compile_index(tokenizer, seg.regex, eos_id), seg.cap,
                                                   enc(seg.force), _safe_force(tokenizer, seg.force)))
            elif isinstance(seg, Literal):
                compiled.items.append(LiteralItem(enc(seg.text)))
            else:
                ids = tuple(label_token_id(tokenizer, o, seg.after) for o in seg.options)
                compiled.items.append(ChoiceItem(ids, seg.with_max, seg.top))
        return compiled


FORCE_GRACE = 16
"""Tokens a pattern may run past its cap while waiting for a point where its forced completion keeps the canonical
tokenization; after that the completion is forced anyway."""


def _safe_force(tokenizer: PreTrainedTokenizerBase, force: str) -> SafeForce | None:
    """safe(segment ids) -> True when appending ``force`` after them leaves their last token where the canonical
    tokenization of the text would leave it (no pre-token spans the seam; e.g. not after "-*-", which would merge
    with "\n" into one pre-token)."""
    if not force:
        return None
    from brrm.tokens import encoder

    enc = encoder(tokenizer)

    def safe(ids: Sequence[int]) -> bool:
        tail = str(tokenizer.decode(list(ids[-4:]), skip_special_tokens=False)) if ids else ""
        return enc.clean_seam(tail, force)

    return safe
