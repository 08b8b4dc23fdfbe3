"""One phase → one engine request: the sampling fields every black-box engine is sent for a :class:`Phase`.

vLLM's ``SamplingParams`` and the completions body of vLLM's OpenAI-compatible server take the same field
names (vLLM's ``vllm/sampling_params.py`` and ``vllm/entrypoints/openai/protocol.py``), so the translation is
written once here; each backend adds only what its transport needs (the prompt and model name of an HTTP body,
vLLM's output kind, the structured-output container of the regex and the form of its logprob request, which
depend on the engine's version).
"""

from __future__ import annotations

from typing import TypedDict

from brrm.backends.blackbox.phases import BAN_BIAS, Phase


class SamplingFields(TypedDict, total=False):
    """The engine-neutral part of one phase's request (names and meanings as in vLLM's ``SamplingParams``).

    ``top_k`` is present only when it cuts (> 0): an engine fills in its own "no cut" value. ``logit_bias``
    bans a phase's ``banned_ids`` with :data:`~brrm.backends.blackbox.phases.BAN_BIAS`; ``allowed_token_ids``
    restricts a ``choice`` to its options; ``logprob_token_ids`` asks for the options' logits.
    """

    n: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    seed: int
    max_tokens: int
    stop_token_ids: list[int]
    ignore_eos: bool
    skip_special_tokens: bool
    logit_bias: dict[int, float]
    allowed_token_ids: list[int]
    logprob_token_ids: list[int]


def sampling_fields(phase: Phase, temperature: float, top_p: float, top_k: int = 0) -> SamplingFields:
    """The request fields of ``phase`` sampled at ``temperature`` (>= 0; 0 = greedy), ``top_p`` (in (0, 1])
    and ``top_k`` (>= 0; 0 = no cut): one sample of at most ``phase.max_tokens`` new tokens, seeded by the
    phase, stopped by its ``stop_ids`` (and by EOS unless ``ignore_eos``), special tokens kept, no min-p and
    no repetition penalty (explicit, so a server's generation-config defaults do not apply).

    A ``choice`` phase is sent at temperature 1, top-p 1 and no top-k whatever the judge's decoding: its options'
    logprobs are then the softmax of the raw logits whether the engine reports them before or after its
    sampler's processing (vLLM's ``raw_*`` or ``processed_*`` logprobs modes), and the option is picked from
    them with the judge's decoding by :func:`~brrm.backends.blackbox.phases.pick_choice`."""
    if phase.kind == "choice":
        temperature, top_p, top_k = 1.0, 1.0, 0
    fields = SamplingFields(
        n=1,
        temperature=temperature,
        top_p=top_p,
        min_p=0.0,
        repetition_penalty=1.0,
        seed=phase.seed,
        max_tokens=phase.max_tokens,
        stop_token_ids=list(phase.stop_ids),
        ignore_eos=phase.ignore_eos,
        skip_special_tokens=False,
    )
    if top_k > 0:
        fields["top_k"] = top_k
    if phase.banned_ids:
        fields["logit_bias"] = {i: BAN_BIAS for i in phase.banned_ids}
    if phase.allowed_ids:
        fields["allowed_token_ids"] = list(phase.allowed_ids)
    if phase.logprob_ids:
        fields["logprob_token_ids"] = list(phase.logprob_ids)
    return fields
