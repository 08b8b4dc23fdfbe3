"""The trust boundary: record text becomes token ids as text; only the chat template's own markup is special.

A response, prompt, system turn, earlier turn, tool output or principle that contains ``<|im_end|>``,
``<|im_start|>``, ``<think>``, a BOS/EOS string or any other added token's text must not become that control
token: in a BR-RM prompt it would close the user turn and forge an assistant turn; in a reward model's input
it would add end-of-turn tokens; in a principle judge it would forge a second ``principle`` turn. So:

1. the chat template is rendered with each record string replaced by a unique sentinel, so the template's
   control flow never sees record text (a record cannot steer it either);
2. the rendered text is cut at the added tokens the *template* wrote — those become their ids;
3. each run of text between them (template text with the record strings put back in) is tokenized by the
   tokenizer's normalizer, pre-tokenizer and model only, never matching added tokens, so the characters
   ``<|im_end|>`` inside a response get the ids of those characters.

For text without added-token strings the result equals ``tokenizer.apply_chat_template(..., tokenize=True)``
(the canonical tokenization: the tokenizer splits at added tokens first, then tokenizes each run). The
same ids go to every backend (transformers, vLLM, OpenAI-compatible servers take token ids).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brrm.errors import ConfigError, TemplateError

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

_RENDER_CACHE = 512
"""Rendered templates kept per tokenizer (each a few kB)."""


@dataclass(frozen=True)
class Markup:
    """Text that belongs to the prompt format, not to the record (its added tokens stay special).

    Example: the Qwen-3-Nemotron-Reward recipe's ``"<think>\\n\\n</think>\\n\\n"`` before a response.
    """

    text: str


class TextEncoder:
    """Encodes record text and chat prompts for one fast (``tokenizers``-backed) tokenizer.

    Args:
        tokenizer: a Hugging Face ``PreTrainedTokenizerFast`` with a chat template (for :meth:`chat`).

    Raises:
        ConfigError: for a slow tokenizer (its added-token handling cannot be bypassed).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ConfigError(
                f"{type(tokenizer).__name__} is a slow tokenizer; brrm needs a fast one (tokenizers) to keep record "
                "text apart from control tokens (load it with use_fast=True)"
            )
        self.tokenizer = tokenizer
        from tokenizers import Tokenizer

        # Our own copy: the shared tokenizer's truncation/padding state (set by any caller) must not cut record text.
        self._backend = Tokenizer.from_str(backend.to_str())
        self._backend.no_truncation()
        self._backend.no_padding()
        self._inner = _not_first(self._backend)
        added = sorted({str(t) for t in tokenizer.get_added_vocab()}, key=len, reverse=True)
        self.added = {t: _token_id(tokenizer, t) for t in added}
        self._added_re = re.compile(f"({'|'.join(re.escape(t) for t in added)})") if added else None
        self._renders: OrderedDict[str, str] = OrderedDict()  # sentinel renders (no record text in them)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------- text
    def text(self, text: str, *, first: bool = True) -> list[int]:
        """Ids of record text: never a control token, whatever characters it holds.

        ``first=False`` for text that does not open the sequence: a SentencePiece-style pre-tokenizer that prepends
        ``▁`` to the *first* piece only (``Metaspace`` with ``prepend_scheme="first"``, Llama ``legacy=False``)
        then leaves it out, as tokenizing the whole rendered prompt does after ``<s>`` (``[`` rather than ``▁[``).
        """
        if not text:
            return []
        backend = self._backend if first or self._inner is None else self._inner
        if self._added_re is None or not self._added_re.search(text):
            return list(backend.encode(text, add_special_tokens=False).ids)
        norm = backend.normalizer
        s = norm.normalize_str(text) if norm is not None else text
        pre = backend.pre_tokenizer
        pieces = [p for p, _ in pre.pre_tokenize_str(s)] if pre is not None else [s]
        return [tok.id for piece in pieces for tok in backend.model.tokenize(piece)]

    def clean_seam(self, before: str, after: str) -> bool:
        """True when no pre-token of ``before + after`` spans the point between them (so tokenizing the two apart
        gives the canonical tokenization of the whole)."""
        pre = self._backend.pre_tokenizer
        if pre is None or not before:
            return True
        cut = len(before)
        return not any(lo < cut < hi for _, (lo, hi) in pre.pre_tokenize_str(before + after))

    def seam(self, ids: Sequence[int], text: str) -> tuple[list[int], str]:
        """Split generated ``ids`` (decoding to ``text``) before their last pre-token: (ids to keep, the text after
        them). Appending more text to the kept ids after re-tokenizing that tail with it gives the canonical
        tokenization across the seam (a pre-token never spans the cut). Returns (all ids, "") when the tail cannot
        be cut cleanly."""
        pre = self._backend.pre_tokenizer
        if pre is None or not ids:
            return list(ids), ""
        window = text[-64:]
        pieces = pre.pre_tokenize_str(window + "\n")
        last = next((p for p in reversed(pieces) if p[1][0] < len(window)), None)
        if last is None:
            return list(ids), ""
        cut = len(text) - len(window) + last[1][0]
        for k in range(1, min(len(ids), 16) + 1):
            head = str(self.tokenizer.decode(list(ids[:-k]), skip_special_tokens=False))
            if len(head) <= cut and text.startswith(head):
                return list(ids[:-k]), text[len(head):]
        return list(ids), ""

    def markup(self, text: str) -> list[int]:
        """Ids of format text written by brrm or a template (no record data): added tokens are special."""
        out: list[int] = []
        for piece, special in self._split(text):
            out.extend([self.added[piece]] if special else self.text(piece))
        return out

    def _split(self, text: str) -> list[tuple[str, bool]]:
        """(piece, is_added_token) runs of ``text``."""
        if self._added_re is None:
            return [(text, False)] if text else []
        # the pattern's one group keeps each added token among the pieces, at the odd positions
        return [(piece, i % 2 == 1) for i, piece in enumerate(self._added_re.split(text)) if piece]

    # ------------------------------------------------------------------------------------------- chat
    def chat(self, messages: Sequence[Mapping[str, object]], *, add_generation_prompt: bool,
             **template_kwargs: object) -> tuple[str, list[int]]:
        """Render ``messages`` through the chat template and encode them at the trust boundary.

        Args:
            messages: ``{"role", "content", "tool_calls"?}`` dicts; ``content`` is record text (a str) or a
                sequence of record-text and :class:`Markup` pieces.
            add_generation_prompt: append the template's assistant header.
            **template_kwargs: passed to the template (e.g. ``enable_thinking``).

        Returns:
            (the rendered text with the record text in place, its token ids).

        Raises:
            TemplateError: when the template fails on these messages, or drops or repeats a record string
                (so record text cannot be kept apart from its markup).
            ConfigError: when a tool call's name or arguments hold control-token text.
        """
        records: list[str] = []
        nonce = _nonce(messages)
        rendered_messages = []
        for m in messages:
            msg = dict(m)
            msg["content"] = self._sentinel_content(m.get("content", ""), records, nonce)
            calls = msg.get("tool_calls") or ()
            if not isinstance(calls, Sequence):
                raise ConfigError(f"tool_calls must be a list of tool calls, got {type(calls).__name__}")
            for call in calls:
                self._check_tool_call(call)
            rendered_messages.append(msg)
        # tool-call arguments are record text rendered verbatim: such renders are not kept
        cached = not any(m.get("tool_calls") for m in messages)
        text = self._render(rendered_messages, add_generation_prompt, template_kwargs, cached=cached)
        if any(r != r.strip() for r in records):  # the template may trim it (Qwen3 strips "\n" around assistant text)
            real = self._render([{**m, "content": _plain(m.get("content", ""))} for m in messages],
                                add_generation_prompt, template_kwargs)
            records = _as_rendered(text, real, records, nonce)
        return self._assemble(text, records, nonce)

    def _render(self, messages: list[dict[str, object]], add_generation_prompt: bool,
                template_kwargs: Mapping[str, object], *, cached: bool = False) -> str:
        """The template's text for ``messages``. ``cached`` is for sentinel renders holding no record text: every
        record of one shape (roles, markup, options, the template itself) renders the same text, so it is kept."""
        key = repr((hash(str(self.tokenizer.chat_template)), messages, add_generation_prompt,
                    sorted(template_kwargs.items()))) if cached else ""
        with self._lock:
            hit = self._renders.get(key) if cached else None
            if hit is not None:
                self._renders.move_to_end(key)
                return hit
        # the template's own keywords (enable_thinking, …) are free-form: the call is typed only as a callable
        apply: Callable[..., object] = self.tokenizer.apply_chat_template
        try:
            text = str(apply(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                             **template_kwargs))
        except Exception as exc:  # jinja2 errors, raise_exception() in templates (e.g. role order)
            raise TemplateError(f"the chat template failed on this conversation: {type(exc).__name__}: {exc}") from exc
        if cached:
            with self._lock:
                self._renders[key] = text
                if len(self._renders) > _RENDER_CACHE:
                    self._renders.popitem(last=False)
        return text

    def _sentinel_content(self, content: object, records: list[str], nonce: str) -> str:
        if isinstance(content, str):
            pieces: Sequence[object] = (content,)
        elif isinstance(content, Sequence):
            pieces = content
        else:
            raise ConfigError(f"message content must be a string, got {type(content).__name__}")
        out = []
        for piece in pieces:
            if isinstance(piece, Markup):
                out.append(piece.text)
            elif piece:
                out.append(f"\ue000{nonce}:{len(records)}\ue001")
                records.append(str(piece))
        return "".join(out)

    def _check_tool_call(self, call: object) -> None:
        found = self._added_re.search(repr(call)) if self._added_re is not None else None
        if found is not None:
            raise ConfigError(f"a tool call holds control-token text ({found.group(0)!r}); brrm does not render it "
                              "into a prompt")

    def _assemble(self, text: str, records: list[str], nonce: str) -> tuple[str, list[int]]:
        marker = _marker(nonce)
        found = [int(m.group(1)) for m in marker.finditer(text)]
        if sorted(found) != list(range(len(records))):
            raise TemplateError("the chat template dropped, repeated or rewrote a message's text, so brrm cannot "
                                "keep record text apart from template markup")
        ids: list[int] = []
        run: list[tuple[str, bool]] = []  # (text, is_record) pieces of the current run between template specials
        pos = 0
        for m in marker.finditer(text):
            run.extend(self._template_pieces(text[pos:m.start()], ids, run))
            run.append((records[int(m.group(1))], True))
            pos = m.end()
        run.extend(self._template_pieces(text[pos:], ids, run))
        self._flush(run, ids)
        return marker.sub(lambda mm: records[int(mm.group(1))], text), ids

    def _template_pieces(self, text: str, ids: list[int], run: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
        """Template text: an added token flushes the current run and is emitted as its id."""
        pending: list[tuple[str, bool]] = []
        for piece, special in self._split(text):
            if special:
                self._flush(run + pending, ids)
                run.clear()
                pending = []
                ids.append(self.added[piece])
            else:
                pending.append((piece, False))
        return pending

    def _flush(self, run: list[tuple[str, bool]], ids: list[int]) -> None:
        if run:
            ids.extend(self.text("".join(piece for piece, _ in run), first=not ids))
            run.clear()


def _not_first(backend: Tokenizer) -> Tokenizer | None:
    """A copy of ``backend`` whose ``Metaspace`` pre-tokenizers prepend ``▁`` never instead of to the first piece
    (for text that does not open the sequence); None when it has no such pre-tokenizer (nothing differs)."""
    from tokenizers import Tokenizer

    found: list[dict[str, object]] = []

    def never(node: dict[str, object]) -> dict[str, object]:  # every object of the pre-tokenizer, nested ones too
        if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
            node["prepend_scheme"] = "never"
            found.append(node)
        return node

    data = json.loads(backend.to_str())
    data["pre_tokenizer"] = json.loads(json.dumps(data.get("pre_tokenizer")), object_hook=never)
    return Tokenizer.from_str(json.dumps(data)) if found else None


_ENCODERS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, TextEncoder] = weakref.WeakKeyDictionary()


def encoder(tokenizer: PreTrainedTokenizerBase) -> TextEncoder:
    """The (cached) :class:`TextEncoder` of ``tokenizer``."""
    try:
        return _ENCODERS[tokenizer]
    except (KeyError, TypeError):
        enc = TextEncoder(tokenizer)
        with contextlib.suppress(TypeError):  # a tokenizer that takes no weak reference is not cached
            _ENCODERS[tokenizer] = enc
        return enc


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """The id of one added token (a str token has one id)."""
    found = tokenizer.convert_tokens_to_ids(token)
    assert not isinstance(found, list), (token, found)
    return int(found)


def _plain(content: object) -> str:
    """The text of a content :meth:`TextEncoder._sentinel_content` accepted (a str or a sequence of pieces)."""
    if isinstance(content, str):
        return content
    assert isinstance(content, Sequence), content
    return "".join(p.text if isinstance(p, Markup) else str(p) for p in content)


def _as_rendered(sentinel_text: str, real: str, records: list[str], nonce: str) -> list[str]:
    """Each record as the template rendered it, when the template only trimmed its whitespace.

    The template parts between sentinels are matched against the real render in order; a record's rendered
    form must be one of its whitespace-trimmed variants (never other text), else the record is kept whole.
    """
    parts = _marker(nonce).split(sentinel_text)
    if not real.startswith(parts[0]):
        return records
    out, pos = list(records), len(parts[0])
    for k in range(1, len(parts), 2):
        idx, after = int(parts[k]), parts[k + 1]
        r = records[idx]
        for v in (r, r.lstrip("\n"), r.rstrip("\n"), r.strip("\n"), r.strip(), r.lstrip(), r.rstrip()):
            if real.startswith(v, pos) and real.startswith(after, pos + len(v)):
                out[idx], pos = v, pos + len(v) + len(after)
                break
        else:
            return records
    return out if pos == len(real) else records


_SENTINEL_START = "\ue000"  # a private-use character; a record that holds it gets a nonce no record holds
@functools.lru_cache(maxsize=64)
def _marker(nonce: str) -> re.Pattern[str]:
    """The compiled sentinel pattern of ``nonce`` (the common case, nonce "", compiled once)."""
    return re.compile(f"\ue000{re.escape(nonce)}:(\\d+)\ue001")


def _nonce(messages: Sequence[Mapping[str, object]]) -> str:
    """A sentinel tag that occurs in no message (record text cannot fake a sentinel): "" unless some content or
    tool call holds the sentinel character itself."""
    blob = "\0".join(f"{m.get('content')}\0{json.dumps(m.get('tool_calls'), ensure_ascii=False, default=str)}"
                     for m in messages)
    if _SENTINEL_START not in blob:
        return ""
    digest = hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    while digest in blob:
        digest = hashlib.sha256(digest.encode()).hexdigest()[:12]
    return digest
