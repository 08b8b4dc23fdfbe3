"""A phase as a vLLM request and a vLLM output as a phase result (:mod:`brrm.backends.vllm`).

The sampling fields are the black-box room's (:func:`~brrm.backends.blackbox.request.sampling_fields`); this
module adds what depends on the installed vLLM (:class:`~brrm.backends.vllm.engine.Features`): the
structured-output container of a regex (``StructuredOutputsParams``, or ``GuidedDecodingParams`` on older vLLM)
and the form of the options' logprob request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from brrm.backends.blackbox.phases import Phase, PhaseResult
from brrm.backends.blackbox.request import sampling_fields
from brrm.backends.vllm.engine import Features

if TYPE_CHECKING:
    from vllm import RequestOutput, SamplingParams

OLD_VLLM_LOGPROBS = 20
"""Top logprobs asked for on a vLLM without ``logprob_token_ids`` (an option outside them fails the request)."""


def sampling_params(phase: Phase, features: Features, temperature: float, top_p: float,
                    top_k: int = 0) -> SamplingParams:
    """vLLM ``SamplingParams`` for one phase (a fresh object per request, as vLLM requires); final output only,
    token ids not detokenized."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kw: dict[str, object] = {**sampling_fields(phase, temperature, top_p, top_k),
                             "output_kind": RequestOutputKind.FINAL_ONLY, "detokenize": False}
    if phase.logprob_ids:
        if phase.top_logprobs:
            kw["logprobs"] = phase.top_logprobs
        if not features.logprob_token_ids:
            del kw["logprob_token_ids"]
            kw["logprobs"] = OLD_VLLM_LOGPROBS
    if phase.regex or phase.grammar:
        constraint = {"regex": phase.regex} if phase.regex else {"grammar": phase.grammar}
        kw[features.structured] = structured_params(features.structured, **constraint)
    return SamplingParams(**kw)


def structured_params(kind: str, **constraint: str) -> object:
    """The structured-output request of ``constraint`` (``regex=`` or ``grammar=``, a Lark grammar) in the
    installed vLLM's form (``kind`` is :attr:`Features.structured`)."""
    import vllm.sampling_params as sp

    if kind == "structured_outputs":
        return sp.StructuredOutputsParams(**constraint)
    return sp.GuidedDecodingParams(**constraint)


def phase_result(out: RequestOutput) -> PhaseResult:
    """The :class:`PhaseResult` of a finished vLLM request: its token ids, finish reason (anything but
    ``stop``/``length`` is an ``error``), per-step logprobs of the ids asked for, and prompt tokens served from
    the prefix cache."""
    c = out.outputs[0]
    # num_cached_tokens: absent on older vLLM RequestOutputs, None before the first step: then not reported
    reported = getattr(out, "num_cached_tokens", None)
    cached = None if reported is None else int(reported)
    if c.finish_reason not in ("stop", "length"):
        return PhaseResult(
            tuple(c.token_ids),
            "error",
            error=f"vLLM finished the request with "
            f"finish_reason={c.finish_reason!r} (stop_reason={c.stop_reason!r})",
            cached_tokens=cached,
        )
    steps = tuple({int(t): float(lp.logprob) for t, lp in step.items()} for step in (c.logprobs or ()))
    return PhaseResult(tuple(c.token_ids), c.finish_reason, step_logprobs=steps, cached_tokens=cached)
