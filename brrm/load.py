"""``brrm.load``: the one place that turns a model name into a :class:`~brrm.RewardJudge`.

Every user of brrm — Python, the CLI, the HTTP server, the RLHF adapters, audits and benchmarks — builds its
judge here, so a model kind, recipe or backend behaves the same everywhere. Options are checked (names,
types, ranges) before any model loads; a mistyped path or an unreachable hub id is one clear error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from brrm.errors import BackendUnavailable, ConfigError
from brrm.types import (
    KINDS,
    RewardJudge,
    SamplingConfig,
    check_bool,
    check_bool_or_auto,
    check_choice,
    check_float,
    check_int,
)

BACKENDS = ("transformers", "vllm", "openai")

EMBEDDED_BUDGETS = {"max_new_tokens": 400, "max_total_tokens": 4096, "block_token_cap": 32}
"""Budgets of the embedded 135M demo model (the published BR-RM budgets are 8192 per turn, 16384 total)."""

BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "transformers": ("dtype", "device", "batch_size", "classify_batch_size", "prefix_cache", "jump_forward",
                     "batch_invariant", "token_budget", "trust_remote_code"),
    "vllm": ("dtype", "device", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size",
             "gpu_memory_utilization", "enforce_eager", "block_size", "enable_prefix_caching",
             "structured_outputs_backend", "distributed_executor_backend", "engine_kwargs", "trust_remote_code",
             "batch_size", "chunk_size", "batch_invariant"),
    "openai": ("base_url", "served_model_name", "api_key", "max_concurrency", "timeout_s", "http_retries",
               "max_context", "trust_remote_code", "chunk_size"),
}
"""Options each backend takes (see the backend classes for units and ranges)."""

SAMPLING_OPTIONS = ("temperature", "top_p", "max_new_tokens", "max_total_tokens", "seed")
JUDGE_OPTIONS: dict[str, tuple[str, ...]] = {
    "brrm": (*SAMPLING_OPTIONS, "decoding", "swap", "thinking", "block_token_cap", "max_retries", "system_messages",
             "tool_messages", "strip_history_reasoning", "neutralize_markers", "strip_response_reasoning", "verdict",
             "turn2_tokens"),
    "bt": ("recipe", "max_length", "truncation_side", "strip_thinking", "strip_history_reasoning", "margin", "swap"),
    "principle": (*SAMPLING_OPTIONS, "recipe", "principle", "decoding", "reward", "strip_thinking",
                  "strip_history_reasoning", "question", "margin", "swap"),
}
"""Options each model kind takes (``swap`` is accepted by scalar kinds and changes nothing: σ(r_A − r_B) does not
depend on the order)."""


def load(model: str | None = None, /, *, kind: str = "auto", backend: Any = "transformers",
         **options: Any) -> RewardJudge:
    """Build a judge: a BR-RM pairwise judge, a Bradley–Terry reward model or a principle reward model.

    Args:
        model: hub id (e.g. ``nvidia/Qwen3-Nemotron-14B-BRRM``) or local directory; None: the embedded demo
            model (SmolLM2-135M-Instruct, offline, with small demo budgets; kinds ``brrm`` and ``principle``).
        kind: ``brrm``, ``bt``, ``principle`` or ``auto`` (from a known checkpoint id, or the model's own
            config: a one-label sequence-classification head is ``bt``; anything else must be named).
        backend: ``transformers``, ``vllm`` or ``openai`` — or an already built backend object (tests,
            scripted backends), whose model is then the one judged.
        **options: backend options (:data:`BACKEND_OPTIONS`) and judge options (:data:`JUDGE_OPTIONS`), e.g.
            ``swap=True``, ``decoding="faithful"``, ``temperature=0``, ``principle="…"``, ``dtype="bfloat16"``,
            ``base_url="http://127.0.0.1:8000/v1"``. Token budgets: ``max_new_tokens`` per turn and
            ``max_total_tokens`` per sequence.

    Returns:
        A :class:`~brrm.RewardJudge` (``judge_pairs``, ``score``, ``rank``, ``judge``, ``score_one``, ``info``).

    Raises:
        ConfigError: on an unknown kind, backend or option (naming the valid ones), an invalid value, a path
            that does not exist, a hub id that is neither cached nor reachable, or a kind that cannot be told.
        BackendUnavailable: when the backend's package (vllm) or the embedded model's package is missing.
    """
    check_choice("kind", kind, ("auto", *KINDS))
    built = None if isinstance(backend, str) else backend
    backend_name = built.info.name if built is not None else check_choice("backend", backend, BACKENDS)
    embedded = model is None and built is None
    if not embedded and built is None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError(f"model must be a hub id or a local directory, got {model!r}")
    name = built.info.model if built is not None else (_embedded_name() if embedded else str(model))
    if embedded and kind == "auto":
        kind = "brrm"
    if embedded and kind == "bt":
        raise ConfigError("the embedded demo model is a chat model, not a Bradley–Terry reward model; pass a "
                          "model for kind='bt' (or use kind='brrm' or 'principle' with the demo)")
    _check_names(options, kind, backend_name, built is not None)
    source = None
    if built is None and not embedded:
        if backend_name == "vllm":
            _require_vllm()
        source = _resolve_source(name, embedded)  # a missing path or unreachable id is named before anything else
    kind = _fit_kind(kind, name, source)
    _check_names(options, kind, backend_name, built is not None)
    judge_opts = {k: v for k, v in options.items() if k in JUDGE_OPTIONS[kind]}
    backend_opts = {k: v for k, v in options.items() if k not in judge_opts}
    _check_backend_options(backend_opts)
    if embedded:
        for key, value in EMBEDDED_BUDGETS.items():
            if key in JUDGE_OPTIONS[kind]:
                judge_opts.setdefault(key, value)
    make = _BUILDERS[kind](name, judge_opts, None)  # validates every judge option before anything loads
    if built is None:
        source = source or _resolve_source(name, embedded)
        _card_dtype(name, backend_opts)
        make = _BUILDERS[kind](name, judge_opts, source)  # with the checkpoint's generation defaults
        built = _load_backend(backend_name, source, name, backend_opts, task="classify" if kind == "bt" else "generate")
    return make(built)


def _fit_kind(kind: str, name: str, source: str | None) -> str:
    """The kind to build: ``auto`` decided from a known id or the model's config; an explicit kind checked against
    the config (a sequence classifier cannot be a generative judge).

    Raises:
        ConfigError: when the kind cannot be told, or does not fit the checkpoint.
    """
    from brrm.recipes import detect_kind, model_config

    config = model_config(source) if source is not None else None
    if kind == "auto":
        return detect_kind(name, config)[0]
    archs = " ".join((config or {}).get("architectures") or [])
    if kind in ("brrm", "principle") and "ForSequenceClassification" in archs:
        raise ConfigError(f"{name!r} is a sequence classifier ({archs}); it has no language-model head to generate "
                          f"with, so it cannot be kind {kind!r} — use kind='bt'")
    return kind


# ------------------------------------------------------------------------------------------------ options
def _check_names(options: dict[str, Any], kind: str, backend: str, prebuilt: bool) -> None:
    kinds = KINDS if kind == "auto" else (kind,)
    valid = {o for k in kinds for o in JUDGE_OPTIONS[k]} | (set() if prebuilt else set(BACKEND_OPTIONS[backend]))
    unknown = sorted(set(options) - valid)
    if unknown:
        where = f"kind {kind!r}" + ("" if prebuilt else f" with the {backend} backend")
        raise ConfigError(f"unknown option {unknown[0]!r} for {where}; valid options: {', '.join(sorted(valid))}")


_BACKEND_CHECKS: dict[str, Any] = {
    "dtype": lambda v: check_choice("dtype", v, ("auto", "float32", "bfloat16", "float16")),
    "device": lambda v: check_choice("device", v, ("auto", "cpu", "cuda")),
    "batch_size": lambda v: check_int("batch_size", v, low=1),
    "classify_batch_size": lambda v: check_int("classify_batch_size", v, low=1),
    "token_budget": lambda v: check_int("token_budget", v, low=1),
    "chunk_size": lambda v: check_int("chunk_size", v, low=1),
    "max_model_len": lambda v: check_int("max_model_len", v, low=1),
    "max_context": lambda v: check_int("max_context", v, low=1),
    "tensor_parallel_size": lambda v: check_int("tensor_parallel_size", v, low=1),
    "pipeline_parallel_size": lambda v: check_int("pipeline_parallel_size", v, low=1),
    "max_concurrency": lambda v: check_int("max_concurrency", v, low=1),
    "http_retries": lambda v: check_int("http_retries", v, low=0),
    "gpu_memory_utilization": lambda v: check_float("gpu_memory_utilization", v, low=0, high=1, low_open=True),
    "timeout_s": lambda v: check_float("timeout_s", v, low=0, low_open=True),
    "trust_remote_code": lambda v: check_bool("trust_remote_code", v),
    "prefix_cache": lambda v: check_bool("prefix_cache", v),
    "jump_forward": lambda v: check_bool("jump_forward", v),
    "batch_invariant": lambda v: check_bool_or_auto("batch_invariant", v),
    "enforce_eager": lambda v: check_bool("enforce_eager", v),
    "enable_prefix_caching": lambda v: check_bool("enable_prefix_caching", v),
}


def _check_backend_options(opts: dict[str, Any]) -> None:
    """Types and ranges of backend options, before anything loads (the backends check them again)."""
    for name, value in opts.items():
        if name in _BACKEND_CHECKS:
            _BACKEND_CHECKS[name](value)


def _sampling(opts: dict[str, Any], **defaults: Any) -> SamplingConfig:
    base = SamplingConfig(**{k: v for k, v in defaults.items() if k != "max_new_tokens"})
    return SamplingConfig(temperature=opts.get("temperature", base.temperature), top_p=opts.get("top_p", base.top_p),
                          max_new_tokens_per_turn=opts.get("max_new_tokens", base.max_new_tokens_per_turn),
                          max_total_tokens=opts.get("max_total_tokens", base.max_total_tokens),
                          seed=opts.get("seed", base.seed))


def _brrm(name: str, opts: dict[str, Any], source: str | None = None) -> Any:
    from brrm.compose import PairwiseRewardJudge
    from brrm.judges.brrm import BRRMConfig, BRRMJudge

    rest = {k: v for k, v in opts.items() if k not in SAMPLING_OPTIONS}
    swap = rest.pop("swap", False)
    config = BRRMConfig(sampling=_sampling(opts), swap=swap, **rest)
    return lambda backend: PairwiseRewardJudge(BRRMJudge(backend, config), swap=swap)


def _bt(name: str, opts: dict[str, Any], source: str | None = None) -> Any:
    from brrm.compose import ScalarRewardJudge
    from brrm.recipes import known_recipe
    from brrm.reward_models.bradley_terry import RECIPES, BradleyTerryRewardModel

    rest = dict(opts)
    check_bool("swap", rest.pop("swap", False))
    margin = check_float("margin", rest.pop("margin", 0.0), low=0)
    known = known_recipe(name)
    recipe = check_choice("recipe", rest.pop("recipe", known.recipe if known and known.kind == "bt" else "auto"),
                          ("auto", *RECIPES))
    if "max_length" in rest:
        check_int("max_length", rest["max_length"], low=8)
    return lambda backend: ScalarRewardJudge(BradleyTerryRewardModel(backend, recipe=recipe, **rest), margin=margin)


CARD_BUDGETS = {"max_new_tokens_per_turn": 16000, "max_total_tokens": 40960}
"""Qwen3-Nemotron-32B-GenRM-Principle's ``card`` decoding: up to 16,000 new tokens (issue 9's reading of the card);
the total is Qwen3-32B's 40,960-token context, cut further to the backend's own context."""


def _generation_config(source: str | None) -> dict[str, Any]:
    """Sampling defaults from the checkpoint's ``generation_config.json`` (local dir or HF cache; no network):
    temperature and top_p when it samples, greedy otherwise; {} when there is none."""
    if source is None:
        return {}
    import json

    from brrm.recipes import looks_like_hub_id

    path = Path(source) / "generation_config.json"
    if not path.is_file() and looks_like_hub_id(source):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(source, "generation_config.json")
            path = Path(cached) if isinstance(cached, str) else path
        except Exception:  # noqa: BLE001 - a broken cache only means "no generation config"
            return {}
    if not path.is_file():
        return {}
    gen = json.loads(path.read_text())
    if not gen.get("do_sample"):
        return {"temperature": 0.0}
    return {k: float(gen[k]) for k in ("temperature", "top_p") if isinstance(gen.get(k), int | float)}


def _principle(name: str, opts: dict[str, Any], source: str | None = None) -> Any:
    from brrm.compose import ScalarRewardJudge
    from brrm.judges.principle import FORMATS, PrincipleConfig, PrincipleJudge
    from brrm.recipes import known_recipe

    rest = {k: v for k, v in opts.items() if k not in SAMPLING_OPTIONS}
    check_bool("swap", rest.pop("swap", False))
    margin = check_float("margin", rest.pop("margin", 0.0), low=0)
    principle = rest.pop("principle", None)
    if principle is not None and not (isinstance(principle, str) and principle.strip()) and not (
            isinstance(principle, list | tuple) and principle and all(isinstance(p, str) and p.strip()
                                                                      for p in principle)):
        raise ConfigError(f"principle must be a non-empty string or a list of them, got {principle!r}")
    known = known_recipe(name)
    default = known.recipe if known and known.kind == "principle" else (
        "llama_reward" if name == _embedded_name() else "auto")
    fmt = check_choice("recipe", rest.pop("recipe", default), ("auto", *FORMATS))
    card = fmt == "qwen3_genrm" and rest.get("decoding", "card") == "card"
    defaults = {"temperature": 0.0, **(CARD_BUDGETS if card else {}), **_generation_config(source)}
    config = PrincipleConfig(format=fmt, sampling=_sampling(opts, **defaults), **rest)
    return lambda backend: ScalarRewardJudge(PrincipleJudge(backend, config), principle=principle, margin=margin)


_BUILDERS = {"brrm": _brrm, "bt": _bt, "principle": _principle}


# ------------------------------------------------------------------------------------------------ sources
def _embedded_name() -> str:
    from brrm.embedded import EMBEDDED_MODEL_ID

    return EMBEDDED_MODEL_ID


def _local_or_id(name: str) -> str:
    return os.path.expanduser(name)


def _resolve_source(name: str, embedded: bool) -> str:
    """Where to load ``name`` from: a local directory, the embedded model's folder, or a hub id that is cached
    or reachable.

    Raises:
        ConfigError: for a path that does not exist, or a hub id neither cached nor reachable.
    """
    if embedded:
        from brrm.embedded import embedded_model_dir

        return str(embedded_model_dir())
    from brrm.recipes import looks_like_hub_id, model_config

    path = Path(_local_or_id(name))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model folder {name!r} holds no config.json; point --model at the folder of a "
                              "saved model (config.json, weights, tokenizer)")
        return str(path)
    if not looks_like_hub_id(name):
        raise ConfigError(f"model {name!r} is not a local directory (no such folder) and not a hub id "
                          "(owner/name); point --model at the folder that holds config.json")
    if model_config(name) is not None:
        return name
    hint = (f"download it where there is network (huggingface-cli download {name} --local-dir DIR) and pass the "
            "local directory")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ConfigError(f"model {name!r} is not a local directory and not in the Hugging Face cache, and the hub "
                          f"is offline (HF_HUB_OFFLINE); {hint}")
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(name, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure to reach or find the repo is the same user error
        raise ConfigError(f"model {name!r} is not a local directory and the Hugging Face Hub could not provide it "
                          f"({type(exc).__name__}: {str(exc)[:160]}); {hint}") from None
    return name


def _card_dtype(name: str, backend_opts: dict[str, Any]) -> None:
    """A known checkpoint's GPU dtype from its card (e.g. float16 for Qwen-3-Nemotron-32B-Reward), unless set."""
    from brrm.recipes import known_recipe

    known = known_recipe(name)
    if known is None or not known.gpu_dtype or backend_opts.get("dtype", "auto") != "auto":
        return
    import torch

    if torch.cuda.is_available() and backend_opts.get("device", "auto") != "cpu":
        backend_opts["dtype"] = known.gpu_dtype


def _require_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        from brrm.backends._vllm_engine import VLLM_HINT

        raise BackendUnavailable("the vllm backend needs the vllm package, which is not installed", hint=VLLM_HINT)


def _load_backend(backend: str, source: str, name: str, opts: dict[str, Any], *, task: str) -> Any:
    """Build the named backend for ``source`` (recorded under ``name``)."""
    if backend == "transformers":
        from brrm.backends.transformers import TransformersBackend

        return _loading(name, lambda: TransformersBackend.from_pretrained(source, task=task, name=name, **opts))
    if backend == "vllm":
        try:
            from brrm.backends.vllm import VLLMBackend
        except ImportError as exc:
            raise BackendUnavailable(f"the vllm backend is not available: {exc}",
                                     hint="pip install 'brrm[vllm]' on a machine with a GPU") from exc
        if "chunk_size" in opts:
            opts["judge_chunk_size"] = opts.pop("chunk_size")
        runner = "pooling" if task == "classify" else "generate"
        return VLLMBackend.from_pretrained(source, name=name, runner=runner, **opts)
    from brrm.backends.openai import OpenAIBackend

    if "http_retries" in opts:
        opts["max_retries"] = opts.pop("http_retries")
    if isinstance(opts.get("base_url"), list | tuple):
        opts["base_urls"] = list(opts.pop("base_url"))
    if "chunk_size" in opts:
        opts["judge_chunk_size"] = opts.pop("chunk_size")
    return OpenAIBackend.from_options(source, name=name, **opts)


def _loading(name: str, build: Any) -> Any:
    """Run a transformers load, turning a missing or unreadable model into one clear error."""
    try:
        return build()
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"could not load model {name!r}: {first[:300]}") from None
