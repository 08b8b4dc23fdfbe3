"""The RLBFF principle models' formats: prompts, judgement labels and the reward formula.

Sources: ``DESIGN.md`` §3 (model facts), the Llama-3.3-Nemotron-70B-Reward-Principle model card (its question,
quoted verbatim in :data:`LLAMA_QUESTION`) and, for Qwen3-Nemotron-32B-GenRM-Principle, ``DESIGN.md`` §3's account
of its model card (free generation with the checkpoint's generation config and ``output_scores=True``; the
*processed* scores at ``scores[-2]``; the clamped log-ratio; Qwen ids 7414 / 2308). The card names no output
format: ``"Final Judgement:"`` below is brrm's own text, used only by the ``constrained`` decoding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from brrm.constraints import label_token_id
from brrm.errors import ConfigError, TemplateError

FORMATS = ("qwen3_genrm", "llama_reward")
"""Principle-judge formats; ``auto`` picks one from the model id (see :func:`resolve_format`)."""

JUDGEMENT_OPTIONS = {"qwen3_genrm": (" Yes", " No"), "llama_reward": ("Yes", "No")}
"""The judgement labels of each format, (yes, no); each must be one token in position."""

JUDGEMENT_AFTER = "Final Judgement:"
"""brrm's own text before the judgement token in the ``constrained`` decoding, and the context in which the
" Yes" / " No" labels are resolved to one token each (Qwen ids 7414 / 2308, the ids ``DESIGN.md`` §3 gives for the
card). Not from the card, which names no output format."""

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

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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


def judgement_token_ids(tokenizer: PreTrainedTokenizerBase, fmt: str) -> tuple[int, int]:
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


def generation_prompt_tail(tokenizer: PreTrainedTokenizerBase) -> str:
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
    scores (s_max: the step's largest score), in [−50, 50]. A score masked to −inf by top-k/top-p processing is
    floored at −50, as the card's ``max(..., -50)`` does; NaN (or +inf, or a non-finite s_max) gives NaN."""
    if math.isnan(yes) or math.isnan(no) or not math.isfinite(top) or math.inf in (yes, no):
        return math.nan
    return max(yes - top, CLAMP) - max(no - top, CLAMP)


def top_needed(temperature: float, top_k: int, top_p: float, vocab: int) -> int:
    """How many of the judgement step's largest raw logits :func:`processed_scores` needs: none when greedy or
    when nothing is masked, ``top_k`` under a top-k cut (every survivor is among them), else the whole vocabulary
    (a top-p cut alone normalises over every token)."""
    if temperature == 0 or (top_k == 0 and top_p >= 1.0):
        return 0
    return top_k if top_k > 0 else vocab


def processed_scores(yes: float, no: float, top: float, largest: Sequence[float], *, temperature: float,
                     top_k: int, top_p: float) -> tuple[float, float, float]:
    """(s_yes, s_no, s_max) of the judgement step after the logits processing of transformers' sampling.

    ``generate(..., do_sample=True, output_scores=True)`` reports each step's scores after its warpers — in
    transformers' order ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper`` (masked tokens
    become −inf) — and the GenRM-Principle card reads those. Greedy decoding (``temperature == 0``) applies none:
    the raw logits are the scores. The same transformers warpers are run here over the step's largest raw logits
    ``largest`` (descending, at least :func:`top_needed` of them), which hold every token the cut keeps.

    Args:
        yes, no, top: the step's raw float32 logits of " Yes", " No" and its maximum.
        largest: the step's largest raw logits, descending (empty when greedy or nothing is masked).
        temperature, top_k, top_p: the generation's sampling settings (``top_k`` 0 = no cut).

    Returns:
        float32 scores; a label outside what the cut keeps is −inf.
    """
    if temperature == 0:
        return yes, no, top
    import torch
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    row = torch.tensor([list(largest) or [top]], dtype=torch.float32)
    raw = row[0].tolist()
    out = warpers(torch.zeros((1, 1), dtype=torch.long), row)[0]  # type: ignore[arg-type]

    def score(value: float) -> float:
        if largest and value in raw:  # one of the kept candidates: its processed score
            return float(out[raw.index(value)])
        if largest:  # below every candidate: masked by the cut
            return -math.inf
        return float(torch.tensor([value], dtype=torch.float32) / temperature)

    return score(yes), score(no), float(out.max())


def check_principle_role(tokenizer: PreTrainedTokenizerBase, model: str, template_sha: str) -> None:
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
