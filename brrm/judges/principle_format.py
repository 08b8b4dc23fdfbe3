"""The RLBFF principle models' formats: prompts, judgement labels and the reward formula.

Sources: ``DESIGN.md`` §3 (model facts), the Llama-3.3-Nemotron-70B-Reward-Principle model card (its question,
quoted verbatim in :data:`LLAMA_QUESTION`) and, for Qwen3-Nemotron-32B-GenRM-Principle, the project's reading of
its model card (issue 9: free generation, logits at the judgement step, the clamped log-ratio).
"""

from __future__ import annotations

import math
from typing import Any

from brrm.constraints import label_token_id
from brrm.errors import ConfigError, TemplateError

FORMATS = ("qwen3_genrm", "llama_reward")
"""Principle-judge formats; ``auto`` picks one from the model id (see :func:`resolve_format`)."""

JUDGEMENT_OPTIONS = {"qwen3_genrm": (" Yes", " No"), "llama_reward": ("Yes", "No")}
"""The judgement labels of each format, (yes, no); each must be one token in position."""

JUDGEMENT_AFTER = "Final Judgement:"
"""What the GenRM-Principle model writes right before its judgement token (model card)."""

JUDGEMENT_PATTERN = r"\n{0,2}Final Judgement:"
"""The text between the thinking block and the judgement in the ``constrained`` decoding (brrm's program)."""

LLAMA_QUESTION = ("Evaluate the response to the previous prompt in terms of whether it satisfies this principle: "
                  "{principle}. Only answer Yes or No.")
"""Final user turn of ``llama_reward``, verbatim from the Llama-3.3-Nemotron-70B-Reward-Principle model card
(``{principle}`` is replaced literally)."""

CLAMP = -50.0
"""Floor of each log-ratio in the GenRM-Principle reward: max(s_yes − s_max, −50) − max(s_no − s_max, −50)."""

PRINCIPLE_ROLE = "principle"
_MARKER = "BRRM-PRINCIPLE-ROLE-CHECK-7f3a"


def resolve_format(fmt: str, name: str) -> str:
    """The concrete format for ``fmt`` (``auto`` or one of :data:`FORMATS`) and model id ``name``.

    Raises:
        ConfigError: on an unknown format, or ``auto`` with an id that names neither released model.
    """
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ConfigError(f"format {fmt!r} is not valid; expected auto or one of {', '.join(FORMATS)}")
        return fmt
    low = name.lower()
    if "genrm-principle" in low:
        return "qwen3_genrm"
    if "reward-principle" in low:
        return "llama_reward"
    raise ConfigError(f"cannot tell the principle format of {name!r}; pass recipe= one of {', '.join(FORMATS)}")


def judgement_token_ids(tokenizer: Any, fmt: str) -> tuple[int, int]:
    """The (yes, no) token ids of format ``fmt`` in position (Qwen3 GenRM: 7414, 2308 after "Final Judgement:").

    Raises:
        ConfigError: when either label is not exactly one token where the model emits it.
    """
    yes, no = JUDGEMENT_OPTIONS[fmt]
    after = JUDGEMENT_AFTER if fmt == "qwen3_genrm" else generation_prompt_tail(tokenizer)
    try:
        return label_token_id(tokenizer, yes, after), label_token_id(tokenizer, no, after)
    except ConfigError as exc:
        raise ConfigError(f"format {fmt!r} reads the judgement from one token, but: {exc}") from None


def generation_prompt_tail(tokenizer: Any) -> str:
    """The text the chat template writes after its last control token when it opens the assistant turn
    (``"assistant\n"`` for ChatML, ``"\n\n"`` for Llama-3): what the first generated token follows."""
    from brrm.tokens import encoder

    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - no usable template: labels are then resolved without context
        return ""
    pieces = encoder(tokenizer)._split(str(text))
    return pieces[-1][0] if pieces and not pieces[-1][1] else ""


def card_reward(yes: float, no: float, top: float) -> float:
    """max(s_yes − s_max, −50) − max(s_no − s_max, −50): the GenRM-Principle reward from the judgement step's
    logits (s_max: the step's largest logit), in [−50, 50]; NaN in, NaN out."""
    if not all(math.isfinite(x) for x in (yes, no, top)):
        return math.nan
    return max(yes - top, CLAMP) - max(no - top, CLAMP)


def check_principle_role(tokenizer: Any, model: str, template_sha: str) -> None:
    """Refuse a chat template that drops or fails on ``principle`` messages.

    Raises:
        TemplateError: naming the template (by hash) and what it does with the role.
    """
    name = getattr(tokenizer, "name_or_path", "") or model
    where = f"the chat template of {name!r} (sha256 {template_sha})"
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                {"role": PRINCIPLE_ROLE, "content": _MARKER}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:
        raise TemplateError(f"{where} fails on a message with role 'principle': {exc}") from exc
    if _MARKER not in text:
        raise TemplateError(f"{where} does not render messages with role 'principle' (it drops them); the "
                            "GenRM-Principle format needs the model's own template, which knows that role")
