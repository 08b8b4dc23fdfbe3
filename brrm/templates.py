"""Prompt templates: one jinja2 environment, typed render functions, and a template hash.

The BR-RM templates in ``prompts/`` render the released prompt strings byte for byte (source:
github.com/YzjiaoNvd/BR-RM @ 34a58b2, ``nemo_rl/environments/brrm_environment.py``, constants
``UNIFIED_ANALYSIS_PROMPT`` and ``SCORING_STAGE_PROMPT``; copies in ``../shared/reference/brrm/``).
User and response text is only ever passed as template *variables*; it is never parsed as a template,
so ``{{ ... }}`` or ``{% ... %}`` inside data is rendered verbatim (no evaluation, no syntax errors).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from brrm.errors import TemplateError
from brrm.types import Conversation, Message

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from brrm.tokens import Markup

BRRM_TEMPLATES = ("brrm_turn1.jinja", "brrm_turn2.jinja", "brrm_context.jinja", "brrm_responses.jinja")

_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)

HISTORY_THINK = ("text", "markup")
"""How the ``<think>`` / ``</think>`` tags of the context reach the model when history reasoning is kept: ``text``
(the characters' ids, as any record text) or ``markup`` (the tokenizer's own think tokens for every occurrence,
in any turn, as the released BR-RM evaluation gets them by tokenizing ``apply_chat_template``'s text over the
flattened context; Qwen3 ``<think>`` = 151667, ``</think>`` = 151668)."""

# Markers of the BR-RM prompt and output format (github.com/YzjiaoNvd/BR-RM @ 34a58b2); in record text they are
# neutralised so a record cannot close its block or forge one.
_MARKER = re.compile(
    r"[\[［【]\s*((?:the\s+begin\s+of|the\s+end\s+of|quality\s+assessment\s+focus|end\s+of\s+quality|"
    r"quality\s+analysis\s+for)[^\]］】\n]*?)\s*[\]］】]",
    re.IGNORECASE,
)

_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"}
_INVISIBLE_CHARS = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800"}  # Hangul fillers, braille blank


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: empty, whitespace, or only invisible characters (zero-width spaces and
    joiners, BOM, word joiner, bidi controls, combining marks, Hangul fillers, the braille blank)."""
    return all(unicodedata.category(c) in _INVISIBLE_CATEGORIES or c in _INVISIBLE_CHARS for c in text)


END_TEXT_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|end|>", "</s>", "<eos>",
                   "<end_of_turn>")
"""End-of-text and end-of-turn token strings of common vocabularies (Qwen/GPT-2 ``<|endoftext|>``, Llama 3
``<|end_of_text|>`` / ``<|eot_id|>``, ChatML ``<|im_end|>``, Phi-3 ``<|end|>``, SentencePiece ``</s>``, Gemma
``<eos>`` / ``<end_of_turn>``): a decoded completion may end with any of them, not only with its end of turn."""


def end_texts(tokenizer: PreTrainedTokenizerBase, end_of_turn_id: int) -> tuple[str, ...]:
    """The token strings :func:`strip_end_tokens` removes from a response's end for ``tokenizer``: its end-of-turn
    token, its EOS, and each of :data:`END_TEXT_TOKENS` that is one of its added tokens (sorted, for stable
    results)."""
    added = set(tokenizer.get_added_vocab())
    eot = tokenizer.convert_ids_to_tokens(end_of_turn_id)
    found = {eot if isinstance(eot, str) else None, getattr(tokenizer, "eos_token", None),
             *(t for t in END_TEXT_TOKENS if t in added)}
    return tuple(sorted(t for t in found if isinstance(t, str) and t))


def strip_end_tokens(text: str, tokens: Sequence[str]) -> str:
    """Remove end-of-turn / EOS token *text* (e.g. ``<|im_end|>``) and whitespace from the end of a response.

    A policy's decoded completion often keeps its end token; scoring it as record text would show the model
    the characters of an extra end-of-turn before the real one.
    """
    if not tokens:
        return text
    pattern = re.compile("(?:\\s|" + "|".join(re.escape(t) for t in tokens if t) + ")+\\Z")
    out = pattern.sub("", text)
    return out if out != text and out.strip() != text.strip() else text


def neutralize_markers(text: str) -> str:
    """Rewrite BR-RM format markers inside record text so they cannot close or open blocks.

    ``[The End of Response 1]`` becomes ``⟦The End of Response 1⟧`` (same for every ``[The Begin of …]``,
    ``[The End of …]``, ``[Quality …]`` and ``[End of Quality …]`` marker, in any letter case, with spaces inside the
    brackets, and with fullwidth ``［…］`` or ``【…】`` brackets). Other text, including
    ``\\boxed{1}`` or "Final verdict", is unchanged: the verdict is only ever read from the judge's own turn 2.
    Trade-off: the released prompt had no escaping, so a record that legitimately contains these markers is
    shown to the model with different brackets (``neutralize_markers=False`` turns it off).
    """
    return _MARKER.sub(lambda m: "⟦" + m.group(1) + "⟧", text)


def prompts_dir() -> Path:
    """The folder holding the shipped templates (``brrm/prompts`` in a wheel, ``prompts/`` in a checkout).

    Raises:
        TemplateError: when neither exists.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "prompts", here.parent / "prompts"):
        if (candidate / BRRM_TEMPLATES[0]).is_file():
            return candidate
    raise TemplateError(f"prompt templates not found next to {here} (looked in brrm/prompts and ../prompts)")


@cache
def environment() -> jinja2.Environment:
    """The one jinja2 environment: StrictUndefined, trailing newlines kept, no autoescaping."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(prompts_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(name: str, **variables: object) -> str:
    """Render template ``name`` with ``variables``.

    Raises:
        TemplateError: when the template is missing or a variable is undefined.
    """
    try:
        return environment().get_template(name).render(**variables)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template {name!r} not found in {prompts_dir()}") from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"template {name!r}: {exc}") from exc


@cache
def template_hash(names: tuple[str, ...] = BRRM_TEMPLATES) -> str:
    """sha256 over the named templates' sources (first 16 hex chars); recorded in every result."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode())
        digest.update((prompts_dir() / name).read_bytes())
    return digest.hexdigest()[:16]


def text_hash(*parts: str) -> str:
    """sha256 (first 16 hex chars) over ``parts``, each followed by a NUL; for recording chat templates,
    recipes and other format strings in results (:func:`brrm.seeds.content_key`, cut)."""
    from brrm.seeds import content_key

    return content_key(*parts)[:16]


def strip_reasoning(text: str) -> tuple[str, bool]:
    """Remove one leading ``<think>…</think>`` block (and the whitespace after it).

    Returns:
        (text without the block, whether a block was removed).
    """
    stripped = _THINK_BLOCK.sub("", text, count=1)
    return stripped, stripped != text


@dataclass(frozen=True)
class ContextPolicy:
    """How earlier turns are flattened into the BR-RM ``{context}`` block.

    The released evaluation writes ``User: <text>`` / ``Assistant: <text>`` lines, keeps earlier assistant
    turns as they are, and writes no system or tool lines (``reference/README.md``); :meth:`released` is that.

    Attributes:
        strip_history_reasoning: remove a leading ``<think>…</think>`` block from earlier assistant turns
            (what the Qwen3 chat template does to history).
        system_messages: ``include`` renders system turns as ``System: <text>`` lines (keeps instructions
            such as "answer in one sentence" visible to the judge); ``drop`` omits them.
        tool_messages: ``include`` renders tool output as ``Tool: [tool output] <text>`` lines and assistant
            tool calls as ``[tool call] name(args)``; ``drop`` omits both.
        neutralize_markers: rewrite BR-RM format markers inside every context turn (see
            :func:`neutralize_markers`).
        history_think: one of :data:`HISTORY_THINK`; only the two tags of the leading reasoning block of each
            earlier assistant turn are affected (every other string of the record stays text).

    Raises:
        ConfigError: naming the field and its valid values.
    """

    strip_history_reasoning: bool = True
    system_messages: str = "include"
    tool_messages: str = "include"
    neutralize_markers: bool = True
    history_think: str = "text"

    def __post_init__(self) -> None:
        from brrm.types.config import check_bool, check_choice

        check_bool("strip_history_reasoning", self.strip_history_reasoning)
        check_choice("history_think", self.history_think, HISTORY_THINK)
        check_choice("system_messages", self.system_messages, ("include", "drop"))
        check_choice("tool_messages", self.tool_messages, ("include", "drop"))
        check_bool("neutralize_markers", self.neutralize_markers)

    @classmethod
    def released(cls) -> ContextPolicy:
        """The released evaluation's flattening: history kept as is, no system or tool lines, no escaping."""
        return cls(strip_history_reasoning=False, system_messages="drop", tool_messages="drop",
                   neutralize_markers=False, history_think="markup")

    def to_dict(self) -> dict[str, bool | str]:
        return {"strip_history_reasoning": self.strip_history_reasoning, "system_messages": self.system_messages,
                "tool_messages": self.tool_messages, "neutralize_context_markers": self.neutralize_markers,
                "history_think": self.history_think}


def _tool_call_text(call: object) -> str:
    if isinstance(call, dict):
        fn = call.get("function", call)
        name = fn.get("name", "?") if isinstance(fn, dict) else "?"
        args = fn.get("arguments", {}) if isinstance(fn, dict) else {}
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
        return f"[tool call] {name}({args_text})"
    return f"[tool call] {call}"


def _context_turns(messages: Sequence[Message], policy: ContextPolicy,
                   think_tags: tuple[str, str] = ("<think>", "</think>")) -> list[dict[str, str]]:
    turns = []
    for m in messages:
        text = m.content
        if m.role == "system":
            if policy.system_messages == "drop":
                continue
            speaker = "System"
        elif m.role == "user":
            speaker = "User"
        elif m.role == "tool":
            if policy.tool_messages == "drop":
                continue
            speaker, text = "Tool", f"[tool output] {text}"
        else:
            speaker = "Assistant"
            if policy.strip_history_reasoning:
                text, _ = strip_reasoning(text)
            calls = [_tool_call_text(c) for c in m.tool_calls] if policy.tool_messages == "include" else []
            text = "\n".join([t for t in [text, *calls] if t])
        if think_tags != ("<think>", "</think>"):  # every tag of every turn, as the released tokenization has it
            text = text.replace("<think>", think_tags[0]).replace("</think>", think_tags[1])
        if policy.neutralize_markers:
            text = neutralize_markers(text)
        turns.append({"speaker": speaker, "text": text})
    return turns


def render_context(conversation: Conversation, policy: ContextPolicy = ContextPolicy(),
                   think_tags: tuple[str, str] = ("<think>", "</think>")) -> str:
    """The filled ``{context}`` value: ``[The Begin of Context]\\n<lines>\\n[The End of Context]\\n``.

    ``think_tags`` replace every ``<think>`` and ``</think>`` of every turn kept (placeholders of
    :func:`brrm_turn1_content`)."""
    return render("brrm_context.jinja", turns=_context_turns(conversation.messages, policy, think_tags))


def render_responses(response_1: str, response_2: str) -> str:
    """The filled ``{responses}`` value with both responses wrapped in their Begin/End markers."""
    return render("brrm_responses.jinja", response_1=response_1, response_2=response_2)


def render_brrm_turn1(conversation: Conversation, response_1: str, response_2: str,
                      policy: ContextPolicy = ContextPolicy()) -> str:
    """The BR-RM turn-1 ("adaptive branching") user message for one ordered pair."""
    return render(
        "brrm_turn1.jinja",
        context=render_context(conversation, policy),
        responses=render_responses(response_1, response_2),
    )


def brrm_turn1_content(conversation: Conversation, response_1: str, response_2: str,
                       policy: ContextPolicy = ContextPolicy()) -> str | list[str | Markup]:
    """The turn-1 user message as a message content for :meth:`brrm.tokens.TextEncoder.chat`.

    With ``policy.history_think == "markup"`` (and history reasoning kept) every ``<think>`` and ``</think>`` in
    the context — any turn, any place: a second or non-leading block, an unclosed ``<think>``, a lone
    ``</think>``, a tag in a user turn — is a :class:`~brrm.tokens.Markup` piece (the special token), as the
    released evaluation's ``tokenizer(apply_chat_template(…, tokenize=False))`` makes every occurrence of an added
    token special; the responses and every other string stay record text. Otherwise the plain text of
    :func:`render_brrm_turn1`.
    """
    if policy.history_think != "markup" or policy.strip_history_reasoning:
        return render_brrm_turn1(conversation, response_1, response_2, policy)
    from brrm.tokens import Markup

    seen = "\0".join([response_1, response_2, *(m.content for m in conversation.messages)])
    k = next(k for k in itertools.count() if f"\ue003{k}" not in seen)  # placeholders that no record text holds
    tags = (f"\ue003{k}<\ue004", f"\ue003{k}>\ue004")
    text = render("brrm_turn1.jinja", context=render_context(conversation, policy, tags),
                  responses=render_responses(response_1, response_2))
    parts = re.split("(" + "|".join(re.escape(t) for t in tags) + ")", text)
    return [(Markup("<think>" if part == tags[0] else "</think>") if part in tags else part) for part in parts if part]


def render_brrm_turn2() -> str:
    """The BR-RM turn-2 ("branch-conditioned rethinking") user message; it takes no variables."""
    return render("brrm_turn2.jinja")
