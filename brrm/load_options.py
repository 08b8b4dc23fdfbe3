"""The keywords of :func:`brrm.load`, written once: each backend's and each model kind's options dataclasses (whose
fields are the keywords, their types, ranges and help), and the flat keywords typed for editors and mypy.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from brrm.registry import BACKEND_REGISTRY, KIND_REGISTRY, kind_entry, resolve
from brrm.types import KINDS, JudgeInfo, SamplingConfig, check_choice
from brrm.types.options import PerRequest, keyword, option_fields, per_request

BACKEND_OPTIONS: Mapping[str, tuple[str, ...]] = BACKEND_REGISTRY.view(
    lambda entry: tuple(f.name for f in dataclasses.fields(entry.options)))
"""Options each backend takes: the fields of its options class (:mod:`brrm.backends.options`, with units and
ranges), by backend name (:data:`brrm.registry.BACKEND_REGISTRY`, plugins included)."""

KIND_OPTIONS: Mapping[str, tuple[str | type, ...]] = KIND_REGISTRY.view(lambda entry: entry.options)
"""Each model kind's options classes (its :class:`~brrm.registry.KindEntry`'s, as ``"module:Class"``), by kind."""


def judge_option_classes(kind: str) -> tuple[type, ...]:
    """The options dataclasses of a model kind (imported lazily, from its :class:`~brrm.registry.KindEntry`): their
    :func:`~brrm.types.options.option` fields are the kind's :func:`load` keywords, its CLI flags and their help.

    Raises:
        ConfigError: on an unknown kind, naming the valid ones.
    """
    check_choice("kind", kind, KINDS)
    return KIND_REGISTRY[kind].option_classes()


REQUEST_OPTION_CLASSES = ("brrm.types:SamplingConfig", "brrm.judges.brrm_config:BRRMConfig")
"""The options classes whose fields may be marked per-request (:class:`~brrm.types.options.PerRequest`): the
sampling settings of every generative judge and BR-RM's own."""


@dataclass(frozen=True)
class RequestOption:
    """One option a server's request may set for itself: a field marked :class:`~brrm.types.options.PerRequest`.

    Attributes:
        keyword: its name in a request's ``options`` object (and :func:`load`'s keyword).
        name: the field's name in ``owner``.
        owner: the options class that holds it (:class:`~brrm.types.SamplingConfig` or ``BRRMConfig``).
        type: ``int`` or ``str``.
        mark: its :class:`~brrm.types.options.PerRequest` (bounded by the server's own value; integer range).
        choices: the words a ``str`` option takes.
        help: the field's help.
    """

    keyword: str
    name: str
    owner: type
    type: type
    mark: PerRequest
    choices: tuple[str, ...]
    help: str

    def current(self, info: JudgeInfo) -> object | None:
        """The served judge's own value of this option (its bound when :attr:`mark` is bounded); None when the
        judge has no such setting (a Bradley–Terry model's sampling)."""
        holder = info.sampling if self.owner is SamplingConfig else info.config
        return getattr(holder, self.name) if isinstance(holder, self.owner) else None


@functools.cache
def request_options() -> tuple[RequestOption, ...]:
    """Every per-request option, in class and field order: the one list that ``brrm serve``'s ``options`` schema,
    :class:`~brrm.service.items.CallOptions` and :class:`~brrm.service.RemoteJudge` are derived from."""
    out = []
    for ref in REQUEST_OPTION_CLASSES:
        cls = resolve(ref)
        hints = typing.get_type_hints(cls)
        for f in option_fields(cls):
            mark = per_request(f)
            if mark is not None:
                kind = hints[f.name]
                out.append(RequestOption(keyword(f), f.name, cls, kind if kind in (int, str) else str, mark,
                                         tuple(f.metadata.get("choices") or ()), str(f.metadata["help"])))
    return tuple(out)


def config_from_record(kind: str, record: Mapping[str, object]) -> object | None:
    """A model kind's typed config (the first options class of its :class:`~brrm.registry.KindEntry`) read back
    from a judge's record (``options`` of ``GET /v1/models``); None for an unknown kind or a record that does not
    read back (a server of another version): the caller keeps the record and says nothing it cannot know."""
    from brrm.errors import ConfigError

    if kind not in KIND_REGISTRY:
        return None
    try:
        reader: Any = judge_option_classes(kind)[0]  # BRRMConfig, BTConfig or PrincipleConfig: each has from_record
        config: object = reader.from_record(record)
    except (ConfigError, TypeError, ValueError):
        return None
    return config


def recipe_choices(kind: str) -> tuple[str, ...]:
    """The values the ``recipe`` keyword (``--recipe``) takes for a scalar kind: a Bradley–Terry recipe
    (:data:`brrm.reward_models.bradley_terry.RECIPES`) or a principle model's prompt format
    (:data:`brrm.judges.principle_format.FORMATS`), each with ``auto``; () for a kind without one (BR-RM)."""
    entry = kind_entry(kind)
    if entry is None or entry.recipes is None:
        return ()
    return ("auto", *resolve(entry.recipes))


def judge_option_names(kind: str) -> tuple[str, ...]:
    """The :func:`load` keywords of a model kind's judge, in definition order (``swap`` is accepted by scalar kinds
    and changes nothing: σ(r_A − r_B) does not depend on the order)."""
    return tuple(dict.fromkeys(keyword(f) for cls in judge_option_classes(kind) for f in option_fields(cls)))


class LoadOptions(TypedDict, total=False):
    """The flat keywords of :func:`brrm.load`, typed for editors and mypy (a test keeps these names equal to the
    option fields of :data:`BACKEND_OPTIONS` and :func:`judge_option_classes`, where units and ranges are)."""

    # sampling (BR-RM, principle)
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_total_tokens: int
    seed: int
    # BR-RM
    decoding: str
    swap: bool
    thinking: str
    block_token_cap: int
    max_retries: int
    system_messages: str
    tool_messages: str
    strip_history_reasoning: bool
    neutralize_markers: bool
    strip_response_reasoning: bool
    verdict: str
    turn2_tokens: str
    samples: int
    history_think: str
    shortcuts: bool
    # scalar models (bt, principle)
    recipe: str
    max_length: int
    truncation_side: str
    strip_thinking: bool
    margin: float
    principle: str | list[str]
    reward: str
    question: str
    # backends (brrm.backends.options)
    dtype: str
    device: str
    batch_size: int
    classify_batch_size: int
    token_budget: int
    prefix_cache: bool
    jump_forward: bool
    batch_invariant: bool | str
    trust_remote_code: bool
    scheduling: str
    progress_bars: bool
    max_model_len: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    enforce_eager: bool
    block_size: int
    enable_prefix_caching: bool
    structured_outputs_backend: str
    distributed_executor_backend: str
    engine_kwargs: Mapping[str, object]
    chunk_size: int
    base_url: str | list[str]
    served_model_name: str
    api_key: str
    max_concurrency: int
    initial_concurrency: int
    timeout_s: float
    http_retries: int
    max_context: int
    logprobs_mode: str
