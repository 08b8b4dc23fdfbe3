"""``brrm.load``: the one place that turns a model name into a :class:`~brrm.RewardJudge`.

Every user of brrm — Python, the CLI, the HTTP server, the RLHF adapters, audits and benchmarks — builds its
judge here, so a model kind, recipe or backend behaves the same everywhere. Options are checked (names,
types, ranges) before any model loads; a mistyped path or an unreachable hub id is one clear error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, Unpack

from brrm.backends.options import Options as BackendOptions
from brrm.backends.registry import BACKEND_REGISTRY
from brrm.errors import ConfigError
from brrm.fingerprint import weights_fingerprint
from brrm.load_options import BACKEND_OPTIONS, LoadOptions, judge_option_classes, judge_option_names
from brrm.registry import KIND_REGISTRY
from brrm.types import BACKENDS, KINDS, JudgeSpec, RewardJudge, check_choice, set_loader
from brrm.types.options import build, changed_keywords
from brrm.types.protocols import is_remote, kind_trait

if TYPE_CHECKING:
    from brrm.backends.base import Backend
    from brrm.judges.brrm import BRRMConfig
    from brrm.judges.principle import PrincipleConfig
    from brrm.reward_models.bradley_terry import BTConfig

    JudgeConfig: TypeAlias = BRRMConfig | BTConfig | PrincipleConfig
    Maker = Callable[[Backend, str | None], RewardJudge]
    """Builds the judge over its loaded backend and the checkpoint's source (None: a backend object)."""


EMBEDDED_KIND = "brrm"
"""What the embedded demo model is under ``kind="auto"``: a BR-RM judge (it is a chat model; kind ``principle``
works too)."""

EMBEDDED_BUDGETS = {"max_new_tokens": 400, "max_total_tokens": 4096, "block_token_cap": 32}
"""Budgets of the embedded 135M demo model (the published BR-RM budgets are 8192 per turn, 16384 total)."""

def load(model: str | None = None, /, *, kind: str = "auto", backend: str | Backend = "transformers",
         config: JudgeConfig | None = None, calibration: str | os.PathLike[str] | None = None,
         cascade: str | RewardJudge | None = None, cascade_kind: str = "auto", cascade_margin: float | None = None,
         cascade_band: float | None = None, cascade_agree: bool = False,
         cascade_options: Mapping[str, object] | None = None, **options: Unpack[LoadOptions]) -> RewardJudge:
    """Build a judge: a BR-RM pairwise judge, a Bradley–Terry reward model or a principle reward model.

    Args:
        model: hub id (e.g. ``nvidia/Qwen3-Nemotron-14B-BRRM``) or local directory; None: the embedded demo
            model (SmolLM2-135M-Instruct, offline, with small demo budgets; kinds ``brrm`` and ``principle``).
        kind: ``brrm``, ``bt``, ``principle`` or ``auto`` (from a known checkpoint id, or the model's own
            config: a one-label sequence-classification head is ``bt``; anything else must be named).
        backend: ``transformers``, ``vllm`` or ``openai`` — or an already built backend object (tests,
            scripted backends), whose model is then the one judged — or ``serve``: ``model`` is the URL of a
            running ``brrm serve`` and the judge a :class:`~brrm.service.RemoteJudge`
            (:func:`brrm.service.connect.load_remote` says which options apply).
        config: the judge's settings as one value (a ``BRRMConfig``, ``BTConfig`` or ``PrincipleConfig``, which
            also tells the kind); its fields that differ from the class defaults act as flat keywords, and flat
            keywords given as well win.
        **options: backend options (:data:`BACKEND_OPTIONS`) and judge options (the option fields of
            :func:`judge_option_classes`, split by field), e.g.
            ``swap=True``, ``decoding="faithful"``, ``temperature=0``, ``principle="…"``, ``dtype="bfloat16"``,
            ``base_url="http://127.0.0.1:8000/v1"``. Token budgets: ``max_new_tokens`` per turn and
            ``max_total_tokens`` per sequence.
        calibration: a ``calib.json`` written by ``brrm calibrate`` (:mod:`brrm.calibration`): every P(A ≻ B)
            the judge returns is then calibrated (``p_a``), with the raw one in ``p_a_raw`` and the
            calibration's hash in ``provenance.calibration``. Read and checked before the model loads.
        cascade: a judge cascade (:class:`~brrm.compose.cascade.CascadeJudge`): the second judge, which decides every
            pair this (first) judge is not confident about or fails on — a hub id, a local folder or a
            ``brrm serve`` URL (loaded with ``cascade_kind`` and ``cascade_options``), or a built judge. Exactly
            one confidence rule: ``cascade_margin`` (m >= 0: a Bradley–Terry |r_A − r_B| > m), ``cascade_band``
            (δ in [0, 0.5): P(A ≻ B) outside [½ − δ, ½ + δ]) or ``cascade_agree=True`` (every swap order and voting
            sample of the first judge agrees). The rule is checked before either model loads.
        cascade_kind: the second judge's kind (as ``kind``; ``auto`` where the checkpoint tells).
        cascade_margin, cascade_band, cascade_agree: the cascade's confidence rule (above).
        cascade_options: the second judge's :func:`load` keywords (its flat options, and ``backend``: default this
            judge's backend name, or ``transformers`` under a backend object).

    Returns:
        A :class:`~brrm.RewardJudge` (``judge_pairs``, ``score``, ``rank``, ``judge``, ``score_one``, ``info``).

    Raises:
        ConfigError: on an unknown kind, backend or option (naming the valid ones), an invalid value, a path
            that does not exist, a hub id that is neither cached nor reachable, or a kind that cannot be told.
        BackendUnavailable: when the backend's package (vllm) or the embedded model's package is missing.
    """
    check_choice("kind", kind, ("auto", *KINDS))
    if cascade is not None:  # the rule is checked before either model loads
        from brrm.load_cascade import CascadePlan

        second = CascadePlan.of(cascade, backend, cascade_kind=cascade_kind, cascade_margin=cascade_margin,
                                cascade_band=cascade_band, cascade_agree=cascade_agree, cascade_options=cascade_options)
        return second.build(load(model, kind=kind, backend=backend, config=config, calibration=calibration, **options),
                            load)
    if is_remote(model, backend) or (isinstance(model, str) and model.startswith("ray://")):
        from brrm.service.connect import load_remote  # a brrm serve URL (or Ray Serve app): the one client

        if config is not None:
            raise ConfigError("config= does not apply to backend='serve': the served judge keeps its own "
                              "configuration (per-request options such as decoding, max_new_tokens or seed are "
                              "keywords)")
        return load_remote(model, kind=kind, backend=backend, calibration=calibration, **options)
    plan = _plan(model, kind, backend, config, calibration, options)
    spec = _spec(model, plan.kind, backend,
                 plan.flat if calibration is None else {**plan.flat, "calibration": str(calibration)})
    built, source = plan.built, plan.source
    if built is None:
        source = source or _resolve_source(plan.name, plan.embedded)
        built = _named_backend(plan.backend_name, plan.name, source, plan.embedded, plan.kind, plan.backend_opts)
    judge = plan.make(built, source)  # with the checkpoint's generation defaults
    if spec is not None:
        judge.info = replace(judge.info, spec=replace(spec, fingerprint=judge.info.fingerprint))
    return judge


def check(model: str | None = None, /, *, kind: str = "auto", backend: str | Backend = "transformers",
          config: JudgeConfig | None = None, calibration: str | os.PathLike[str] | None = None,
          cascade: str | RewardJudge | None = None, cascade_kind: str = "auto", cascade_margin: float | None = None,
          cascade_band: float | None = None, cascade_agree: bool = False,
          cascade_options: Mapping[str, object] | None = None, **options: Unpack[LoadOptions]) -> None:
    """Everything :func:`load` checks before a model loads — the kind, the backend, every option's name, type and
    range, the model's folder or hub id, a calibration file, a cascade's rule and second judge — without loading
    anything (``brrm serve`` calls it before it binds its port). A ``brrm serve`` URL is not contacted: its checks are
    the server's.

    Raises:
        ConfigError, BackendUnavailable: as :func:`load` would, before loading.
    """
    check_choice("kind", kind, ("auto", *KINDS))
    if cascade is not None:
        from brrm.load_cascade import CascadePlan

        CascadePlan.of(cascade, backend, cascade_kind=cascade_kind, cascade_margin=cascade_margin,
                       cascade_band=cascade_band, cascade_agree=cascade_agree,
                       cascade_options=cascade_options).check(check)
    if not is_remote(model, backend):
        _plan(model, kind, backend, config, calibration, options)


@dataclass(frozen=True)
class _Plan:
    """What :func:`load` decided before anything loads: the kind, names, options split and checked, and the builder."""

    kind: str
    name: str
    embedded: bool
    built: Backend | None
    backend_name: str
    source: str | None
    flat: dict[str, object]
    backend_opts: dict[str, object]
    make: Maker


def _plan(model: str | None, kind: str, backend: str | Backend, config: JudgeConfig | None,
          calibration: str | os.PathLike[str] | None, options: Mapping[str, object]) -> _Plan:
    """Check everything :func:`load` needs before loading (see :func:`check`) and plan the build."""
    flat: dict[str, object] = dict(options)
    if config is not None:
        kind = _config_kind(config, kind)
        flat = {**changed_keywords(config), **flat}
    calib = None
    if calibration is not None:
        from brrm.types.calibration import read_calibration

        calib = read_calibration(calibration)
    built = None if isinstance(backend, str) else backend
    backend_name = built.info.name if built is not None else check_choice("backend", backend, BACKENDS)
    embedded = model is None and built is None
    name, kind = _name_and_kind(model, kind, built, embedded)
    _check_names(flat, kind, backend_name, built is not None)
    source = None
    if built is None and not embedded:
        BACKEND_REGISTRY[backend_name].check_available()
        source = _resolve_source(name, embedded)  # a missing path or unreachable id is named before anything else
    kind = _fit_kind(kind, name, source)
    _check_names(flat, kind, backend_name, built is not None)
    shape = "pairwise" if kind_trait(kind, "pairwise") else "scalar"
    if calib is not None and calib.kind != shape:
        raise ConfigError(f"calibration {str(calibration)!r} is for {calib.kind} judges; kind {kind!r} is {shape}")
    judge_opts, backend_opts = _split(flat, kind, embedded)
    if built is None:
        _backend_options(backend_name, backend_opts)
    make = KIND_REGISTRY[kind].build()(name, judge_opts, calib)  # validates every judge option before loading
    return _Plan(kind, name, embedded, built, backend_name, source, flat, backend_opts, make)


def _config_kind(config: JudgeConfig, kind: str) -> str:
    """The kind a judge config object is for, checked against an explicit ``kind``.

    Raises:
        ConfigError: when ``config`` is no judge config, or is for another kind.
    """
    configs = {k: judge_option_classes(k)[0] for k in KINDS}
    found = next((k for k, cls in configs.items() if isinstance(config, cls)), None)
    if found is None:
        names = [cls.__name__ for cls in configs.values()]
        raise ConfigError(f"config must be a {', '.join(names[:-1])} or {names[-1]}, got {type(config).__name__}")
    if kind not in ("auto", found):
        raise ConfigError(f"config is a {type(config).__name__}, for kind {found!r}, not {kind!r}")
    return found


def _name_and_kind(model: str | None, kind: str, built: Backend | None, embedded: bool) -> tuple[str, str]:
    """The model's recorded name, and the kind (the embedded demo is ``brrm`` under ``auto``).

    Raises:
        ConfigError: for a model that is no name, or the demo asked to be a Bradley–Terry model.
    """
    if not embedded and built is None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError(f"model must be a hub id or a local directory, got {model!r}", field="model")
    from brrm.embedded import EMBEDDED_MODEL_ID

    name = built.info.model if built is not None else (EMBEDDED_MODEL_ID if embedded else str(model))
    if embedded and kind == "auto":
        kind = EMBEDDED_KIND
    if embedded and kind_trait(kind, "generates") is False:
        raise ConfigError("the embedded demo model is a chat model, not a Bradley–Terry reward model; pass a "
                          "model for kind='bt' (or use kind='brrm' or 'principle' with the demo)")
    return name, kind


def _split(flat: Mapping[str, object], kind: str, embedded: bool) -> tuple[dict[str, object], dict[str, object]]:
    """(judge keywords, backend keywords) of ``flat``; the embedded demo's budgets fill unset judge ones."""
    names = judge_option_names(kind)
    judge = {k: v for k, v in flat.items() if k in names}
    if embedded:
        for key, value in EMBEDDED_BUDGETS.items():
            if key in names:
                judge.setdefault(key, value)
    return judge, {k: v for k, v in flat.items() if k not in judge}


def _named_backend(backend: str, name: str, source: str, embedded: bool, kind: str,
                   opts: dict[str, object]) -> Backend:
    """The backend ``backend`` loaded from ``source``, its info carrying the weights' fingerprint."""
    fingerprint = weights_fingerprint(None if embedded else source)
    _card_dtype(name, source, opts)
    task = "generate" if kind_trait(kind, "generates") else _scalar_task(source)
    options = _backend_options(backend, opts)
    try:
        built = BACKEND_REGISTRY[backend].build(source, options, name=name, task=task)
    except OSError as exc:  # a missing or unreadable model: one clear error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"could not load model {name!r}: {first[:300]}") from None
    built.info = replace(built.info, fingerprint=fingerprint)
    if not embedded:  # a known checkpoint by hub id: its snapshot's content makes renamed copies known
        from brrm.identity import learn_from_hub
        from brrm.recipes import KNOWN

        learn_from_hub(source, KNOWN)
    return built


def _scalar_task(source: str) -> str:
    """How a Bradley–Terry checkpoint loads: ``generate`` (a causal LM, whose recipe reads a vocabulary logit:
    Llama-3.1-Nemotron-70B-Reward-HF is ``LlamaForCausalLM``) when its ``config.json`` names only causal-LM
    architectures, else ``classify`` (a sequence classifier, or a config that does not tell)."""
    from brrm.recipes import architectures, model_config

    try:
        archs = architectures(model_config(source))
    except (ConfigError, OSError, ValueError):  # unreadable: loading as a classifier says what is wrong
        return "classify"
    causal = bool(archs) and all(a.endswith("ForCausalLM") for a in archs)
    return "generate" if causal else "classify"


def _spec(model: str | None, kind: str, backend: str | Backend, options: Mapping[str, object]) -> JudgeSpec | None:
    """The spec of a judge loaded by name (None over a backend object, or options that are not JSON values);
    its fingerprint is filled in from the weights actually loaded."""
    if not isinstance(backend, str):
        return None
    try:
        return JudgeSpec(model, kind=kind, backend=backend, options=options, fingerprint="-")
    except ConfigError:
        return None


def _fit_kind(kind: str, name: str, source: str | None) -> str:
    """The kind to build: ``auto`` decided from a known id or the model's config; an explicit kind checked against
    the config (a sequence classifier cannot be a generative judge).

    Raises:
        ConfigError: when the kind cannot be told, or does not fit the checkpoint.
    """
    from brrm.recipes import architectures, detect_kind, model_config

    config = model_config(source) if source is not None else None
    if kind == "auto":
        return detect_kind(name, config)[0]
    archs = " ".join(architectures(config))
    if kind_trait(kind, "generates") and "ForSequenceClassification" in archs:
        raise ConfigError(f"{name!r} is a sequence classifier ({archs}); it has no language-model head to generate "
                          f"with, so it cannot be kind {kind!r} — use {{setting}}", field="kind", value="bt")
    return kind


# ------------------------------------------------------------------------------------------------ options
def _check_names(options: Mapping[str, object], kind: str, backend: str, prebuilt: bool) -> None:
    kinds = KINDS if kind == "auto" else (kind,)
    valid = {o for k in kinds for o in judge_option_names(k)} | (set() if prebuilt else set(BACKEND_OPTIONS[backend]))
    unknown = sorted(set(options) - valid)
    if unknown:
        where = f"kind {kind!r}" + ("" if prebuilt else f" with the {backend} backend")
        raise ConfigError(f"unknown option '{{field}}' for {where}; valid options: {{valid}}", field=unknown[0],
                          valid=sorted(valid))


def _backend_options(backend: str, opts: Mapping[str, object]) -> BackendOptions:
    """The backend's options object: types and ranges checked before anything loads.

    Raises:
        ConfigError: naming the option and its valid values.
    """
    cls: Callable[..., BackendOptions] = BACKEND_REGISTRY[backend].options
    return build(cls, opts)


# ------------------------------------------------------------------------------------------------ sources
def _resolve_source(name: str, embedded: bool) -> str:
    """Where to load ``name`` from: a local directory, the embedded model's folder, or a hub id that is cached
    or reachable.

    Raises:
        ConfigError: for a path that does not exist, or a hub id neither cached nor reachable.
    """
    if embedded:
        from brrm.embedded import embedded_model_dir

        return str(embedded_model_dir())
    from brrm.fingerprint import hub_offline
    from brrm.recipes import looks_like_hub_id, model_config

    path = Path(os.path.expanduser(name))
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
    hint = (f"download it where there is network (hf download {name} --local-dir DIR) and pass the "
            "local directory")
    if hub_offline():
        raise ConfigError(f"model {name!r} is not a local directory and not in the Hugging Face cache, and the hub "
                          f"is offline (HF_HUB_OFFLINE); {hint}")
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(name, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure to reach or find the repo is the same user error
        raise ConfigError(f"model {name!r} is not a local directory and the Hugging Face Hub could not provide it "
                          f"({type(exc).__name__}: {str(exc)[:160]}); {hint}") from None
    return name


def _card_dtype(name: str, source: str, backend_opts: dict[str, object]) -> None:
    """A known checkpoint's GPU dtype from its card (e.g. float16 for Qwen-3-Nemotron-32B-Reward), unless set; the
    checkpoint is known by id, folder name or its config (:func:`brrm.recipes.card_dtype`)."""
    from brrm.recipes import card_dtype, model_config

    if backend_opts.get("dtype", "auto") != "auto" or backend_opts.get("device", "auto") == "cpu":
        return
    import torch

    dtype = card_dtype(name, model_config(source), cuda=torch.cuda.is_available())
    if dtype is not None:
        backend_opts["dtype"] = dtype


def _load_spec(spec: JudgeSpec) -> RewardJudge:
    """The judge ``spec`` names (what :meth:`JudgeSpec.load` runs once the weights are checked)."""
    return load(spec.model, kind=spec.kind, backend=spec.backend, **dict(spec.options))


set_loader(_load_spec)
