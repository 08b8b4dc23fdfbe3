"""What the transformers backend's decoder works on: the rows in flight and the decode context it reads.

:class:`Row` is one request being decoded; :class:`DecodeContext` is what the decoder (:mod:`._decode`) and the
sampler (:mod:`._sampling`) need from the backend — the model, the prefix cache, pad and stop ids, the
jump-forward switch and the counters — so neither depends on the whole backend class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from brrm.backends.base import GenerationRequest
from brrm.backends.transformers.steering import ProgramState


@dataclass
class Row:
    """One request in flight: its sampler, program state, generated ids and outcome."""

    index: int
    request: GenerationRequest
    generator: torch.Generator
    state: ProgramState | None
    cached: int = 0
    generated: list[int] = field(default_factory=list)
    choice_logits: list[tuple[float, ...]] = field(default_factory=list)
    finish: str = ""
    error: str = ""
    batch_pos: int = 0
    feed: list[int] = field(default_factory=list)
    noise: torch.Tensor | None = None
    keep_kv: bool = False  # store this row's KV when it finishes (continuous batching sets it per request)


class KVStore(Protocol):
    """A prefix cache of per-sequence KV entries (:class:`~brrm.backends.transformers.PrefixCache`)."""

    def put(self, ids: tuple[int, ...], kv: list[tuple[Any, Any]], prompt_length: int | None = None) -> None: ...

    def take(self, prompt: tuple[int, ...]) -> tuple[int, list[tuple[Any, Any]] | None]: ...


class DecodeContext(Protocol):
    """What the decoder reads from its backend.

    Attributes:
        model: the causal LM (a ``transformers`` ``PreTrainedModel``).
        cache: the prefix cache, or None when prefix caching is off.
        pad_id: id that fills padded positions.
        stop_ids: ids that end a generation.
        jump_forward: feed the tokens a constraint program forces next in the same step.
        stats: counters the decoder adds to (``prefill_tokens``, ``cached_tokens``, ``generated_tokens``,
            ``forward_calls``).
    """

    model: Any
    pad_id: int
    stop_ids: set[int]
    jump_forward: bool
    stats: dict[str, int]

    @property
    def cache(self) -> KVStore | None: ...


class BatchingContext(DecodeContext, Protocol):
    """What continuous batching (:mod:`._continuous`) reads from its backend beyond :class:`DecodeContext`: the
    running batch's size and how a finished row becomes its completion."""

    batch_size: int

    def _completion(self, row: Row) -> Any: ...
