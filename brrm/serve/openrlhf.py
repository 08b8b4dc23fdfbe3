"""OpenRLHF's remote reward contract: queries back into (conversation, response), and rewards into its reply.

OpenRLHF (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor``) sends ``{"query": [...], "prompts": [...],
"labels": [...]}``, where each query is the policy's token ids decoded with ``skip_special_tokens=False``: the
chat-templated prompt, the response, its end-of-turn token and possibly padding text (OpenRLHF issue #775). It
reads ``rewards`` (advantages), ``scores`` (dynamic filtering; ``rewards`` when absent) and ``extra_logs``
(numbers, logged per sample). This module:

1. strips policy padding / end-of-turn text from both ends of the query (:data:`POLICY_SPECIAL_TEXTS` plus any
   configured), then splits it with its prompt (the prompt found at the start, else anywhere in the query);
2. parses the templated prompt back into messages — ChatML (Qwen and others), the Llama-3 header format, Gemma's
   turn format, or ``plain`` (no template markup: the prompt is one user message; right for OpenRLHF runs
   without ``--data.apply_chat_template``). Text after the final assistant header (a prefill such as Qwen3's
   ``<think>\\n\\n</think>\\n\\n``) belongs to the response and is put back in front of it. The judge then renders
   the messages with *its own* template; the policy's template is never wrapped in a second one;
3. builds the reply: a failed item (unparsable query, missing reference, judge failure) gets the configured
   ``failed_reward`` (a number, since OpenRLHF turns rewards into tensors) and is
   named in ``extra_logs["brrm_failed"]`` (1.0 failed, 0.0 ok) and in ``statuses`` / ``reasons``.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from dataclasses import dataclass

from brrm.errors import ConfigError
from brrm.service.items import ScoreItem
from brrm.templates import is_blank, strip_reasoning
from brrm.types import Conversation, ScalarReward, Status

POLICY_SPECIAL_TEXTS = (
    "<|endoftext|>", "<|im_end|>",                      # Qwen / ChatML (pad and end of turn)
    "<|eot_id|>", "<|end_of_text|>", "<|finetune_right_pad_id|>",  # Llama-3.x
    "<end_of_turn>", "<eos>", "<pad>",                  # Gemma
    "</s>", "<unk>",                                    # Llama-2 / Mistral
    "<|end|>", "<|endofresponse|>", "<|return|>",      # Phi-3, others
    "<｜end▁of▁sentence｜>",                             # DeepSeek-R1
    "[PAD]",
)
"""End-of-turn and padding texts stripped from the ends of a query (from each family's
``tokenizer_config.json`` special tokens). Record text is data: only the ends are stripped, never the middle."""

QUERY_FORMATS = ("auto", "chatml", "llama3", "gemma", "plain")
"""Prompt formats :func:`parse_prompt` understands; ``auto`` picks by the markup present."""

_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool", "ipython": "tool",
          "model": "assistant"}


@dataclass(frozen=True)
class _Format:
    name: str
    turn: re.Pattern[str]        # one complete turn: groups (role, content)
    assistant_header: str        # what opens the assistant turn being generated
    leading: tuple[str, ...]     # texts allowed before the first turn (BOS)


FORMATS = {
    "chatml": _Format("chatml", re.compile(r"<\|im_start\|>([^\n<]+)\n(.*?)<\|im_end\|>\n?", re.S),
                      "<|im_start|>assistant\n", ()),
    "llama3": _Format("llama3", re.compile(r"<\|start_header_id\|>([^<]+)<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>",
                                           re.S),
                      "<|start_header_id|>assistant<|end_header_id|>\n\n", ("<|begin_of_text|>",)),
    "gemma": _Format("gemma", re.compile(r"<start_of_turn>([^\n<]+)\n(.*?)<end_of_turn>\n?", re.S),
                     "<start_of_turn>model\n", ("<bos>",)),
}
"""Sources: Qwen2/Qwen3 ``chat_template`` (ChatML), Llama-3.1 ``chat_template`` (header format), Gemma-2
``chat_template`` (turn format)."""


@dataclass(frozen=True)
class ParsedQuery:
    """One OpenRLHF query taken apart.

    Attributes:
        messages: the turns before the response as ``{"role", "content"}`` dicts (empty when ``error`` is set).
        response: the policy's response (prefill included), end-of-turn and padding text removed.
        format: the prompt format used (:data:`QUERY_FORMATS` without ``auto``).
        error: why the query could not be used ("" when it could).
    """

    messages: tuple[dict[str, str], ...]
    response: str
    format: str
    error: str = ""


def detect_format(text: str) -> str:
    """The prompt format of ``text`` by its markup (``plain`` when it has none)."""
    for name, marker in (("chatml", "<|im_start|>"), ("llama3", "<|start_header_id|>"),
                         ("gemma", "<start_of_turn>")):
        if marker in text:
            return name
    return "plain"


def strip_ends(text: str, specials: Sequence[str]) -> str:
    """Remove special texts (and the whitespace between them) from both ends of ``text``, repeatedly."""
    changed = True
    while changed:
        changed = False
        for s in specials:
            if text.startswith(s):
                text, changed = text[len(s):], True
            stripped = text.rstrip()
            if stripped.endswith(s):
                text, changed = stripped[:-len(s)], True
    return text


def parse_prompt(prompt: str, fmt: str = "auto") -> tuple[str, list[dict[str, str]], str]:
    """(format, messages, prefill) of a chat-templated prompt that ends by opening the assistant's turn.

    Raises:
        ValueError: naming what does not parse (no assistant header at the end, text outside turns, an
            unknown role).
    """
    if fmt not in QUERY_FORMATS:
        raise ValueError(f"query format {fmt!r} is not valid; expected one of {', '.join(QUERY_FORMATS)}")
    name = detect_format(prompt) if fmt == "auto" else fmt
    if name == "plain":
        return name, [{"role": "user", "content": prompt}], ""
    spec = FORMATS[name]
    cut = prompt.rfind(spec.assistant_header)
    if cut < 0:
        raise ValueError(f"the {name} prompt does not end by opening an assistant turn "
                         f"({spec.assistant_header!r} not found)")
    body, prefill = prompt[:cut], prompt[cut + len(spec.assistant_header):]
    messages, pos = [], 0
    for lead in spec.leading:
        if body.startswith(lead):
            pos = len(lead)
    for m in spec.turn.finditer(body, pos):
        if body[pos:m.start()].strip():
            raise ValueError(f"text outside any {name} turn: {body[pos:m.start()][:80]!r}")
        role = _ROLES.get(m.group(1).strip())
        if role is None:
            raise ValueError(f"unknown role {m.group(1).strip()!r} in the {name} prompt; expected one of "
                             f"{', '.join(sorted(_ROLES))}")
        messages.append({"role": role, "content": m.group(2)})
        pos = m.end()
    if body[pos:].strip():
        raise ValueError(f"text outside any {name} turn: {body[pos:][:80]!r}")
    if not messages:
        raise ValueError(f"no complete {name} turn before the assistant header")
    return name, messages, prefill


def split_query(query: str, prompt: str | None, *, specials: Sequence[str] = POLICY_SPECIAL_TEXTS,
                fmt: str = "auto") -> ParsedQuery:
    """Split one OpenRLHF query into the conversation and the response (see the module docstring).

    Args:
        query: the decoded prompt + response (+ end-of-turn / padding text).
        prompt: the templated prompt OpenRLHF sent alongside; None: refused (``error`` set), since the response is
            the policy's text and could write a fake user turn and assistant header to split at.
        specials: texts stripped from the ends of the query, the prompt and the response.
        fmt: a :data:`QUERY_FORMATS` name.

    Returns:
        The parsed query; ``error`` says why it is unusable (the caller marks that item ``invalid_input``).
    """
    q = strip_ends(query, specials)
    try:
        if prompt is None:  # the response is the policy's text: it could write a fake turn to split at
            return ParsedQuery((), "", fmt, "the query cannot be split safely without its prompt: send 'prompts' "
                                            "(OpenRLHF sends them with every query)")
        else:
            p = strip_ends(prompt, specials) if prompt.strip() else prompt
            at = q.find(p) if p else -1
            if at < 0:
                return ParsedQuery((), "", fmt, "the query does not contain its prompt (check that 'prompts' "
                                                "are the templated prompts the policy saw)")
            rest = q[at + len(p):]
        name, messages, prefill = parse_prompt(p, fmt)
    except ValueError as exc:
        return ParsedQuery((), "", fmt, str(exc))
    response = strip_ends(prefill + rest, specials)
    return ParsedQuery(tuple(messages), response, name)


def reply(rewards: Sequence[ScalarReward], failed_reward: float | None) -> dict[str, object]:
    """OpenRLHF's reply: ``rewards``, ``scores`` and numeric ``extra_logs``, plus brrm's ``statuses`` and
    ``reasons`` (per item, in order) and counts.

    A failed item's reward and score are ``failed_reward``; ``extra_logs["brrm_failed"]`` is 1.0 for it (0.0
    for an ok item), so the caller can mask it.
    """
    values = [r.reward if r.ok else failed_reward for r in rewards]
    failed = [0.0 if r.ok else 1.0 for r in rewards]
    statuses = [r.status.value for r in rewards]
    return {"rewards": values, "scores": values, "extra_logs": {"brrm_failed": failed}, "statuses": statuses,
            "reasons": [r.reason for r in rewards], "counts": dict(collections.Counter(statuses))}


def invalid(reason: str, k: int) -> ScalarReward:
    """The result of query ``k`` that could not be used."""
    return ScalarReward.failed(Status.INVALID_INPUT, f"query[{k}]: {reason}", id=str(k))


def resolve_mode(mode: str, pairwise: bool) -> str:
    """The concrete ``get_reward_mode``: ``auto`` is ``reference`` for pairwise judges, ``scores`` otherwise.

    Raises:
        ConfigError: for ``reference`` with a scalar model, or an unknown mode.
    """
    if mode not in ("auto", "scores", "reference"):
        raise ConfigError(f"get_reward_mode {mode!r} is not valid; expected one of auto, scores, reference")
    if mode == "auto":
        return "reference" if pairwise else "scores"
    if mode == "reference" and not pairwise:
        raise ConfigError("get_reward_mode 'reference' needs a pairwise judge (kind brrm); a scalar model uses "
                          "'scores'")
    return mode


@dataclass
class RewardPlan:
    """Queries turned into score items: ``results[k]`` is already set for an unusable query, and the scored
    items fill ``results[where[i]]`` in order (:meth:`fill`)."""

    results: list[ScalarReward | None]
    items: list[ScoreItem]
    where: list[int]

    def fill(self, scored: Sequence[ScalarReward]) -> list[ScalarReward]:
        """All results in query order, once ``scored`` (one per item) are in.

        Raises:
            ValueError: when ``scored`` does not have one result per item.
        """
        for pos, result in zip(self.where, scored, strict=True):
            self.results[pos] = result
        return [r for r in self.results if r is not None]


def plan(queries: Sequence[str], prompts: Sequence[str] | None, labels: Sequence[object] | None, *, mode: str,
         specials: Sequence[str] = POLICY_SPECIAL_TEXTS, fmt: str = "auto") -> RewardPlan:
    """Parse every query (see :func:`split_query`); in ``reference`` mode each label is the reference answer.

    Raises:
        ConfigError: when ``prompts`` or ``labels`` do not have one entry per query.
    """
    for name, value in (("prompts", prompts), ("labels", labels)):
        if value is not None and len(value) != len(queries):
            raise ConfigError(f"{name} has {len(value)} items but query has {len(queries)}; send one per query")
    out = RewardPlan([], [], [])
    for k, query in enumerate(queries):
        parsed = split_query(query, prompts[k] if prompts is not None else None, specials=specials, fmt=fmt)
        label = labels[k] if labels is not None else None
        reference = label if isinstance(label, str) else None
        error = parsed.error
        if not error and label is not None and not isinstance(label, str):
            error = f"labels[{k}] must be a string (a reference answer), got {type(label).__name__}"
        if not error and mode == "reference" and labels is None:
            error = ("labels: a pairwise judge scores each response against its label as a reference answer; send "
                     "'labels', one per query (OpenRLHF --data.label_key)")
        elif not error and mode == "reference" and is_blank(strip_reasoning(reference or "")[0]):
            error = (f"labels[{k}] is empty: a pairwise judge scores the response against the label as a reference "
                     "answer (OpenRLHF --data.label_key)")
        if not error:
            try:
                conv = Conversation.coerce(list(parsed.messages), where=f"query[{k}]")
            except ConfigError as exc:
                error = str(exc)
        if error:
            out.results.append(invalid(error, k))
            continue
        out.items.append(ScoreItem(conv, parsed.response, None, reference if mode == "reference" else None, str(k)))
        out.where.append(len(out.results))
        out.results.append(None)
    return out
