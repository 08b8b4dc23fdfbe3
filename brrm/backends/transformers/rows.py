"""What the transformers backend's decoder works on: the rows in flight and the decode context it reads.

:class:`Row` is one request being decoded; :class:`DecodeContext` is what the decoder (:mod:`._decode`) and the
sampler (:mod:`._sampling`) need from the backend — the model, the prefix cache, pad and stop ids, the
jump-forward switch and the counters — as a frozen value the backend builds per call, so neither depends on the
backend class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from brrm.backends.base import Completion, GenerationRequest
from brrm.backends.transformers.slots import KV, MaskFor
from brrm.backends.transformers.steering import ProgramState

if TYPE_CHECKING:
    from transformers import PreTrainedModel


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
    feed: list[int] = field(default_factory=list)
    noise: torch.Tensor | None = None
    keep_kv: bool = False  # store this row's KV when it finishes (continuous batching sets it per request)


class KVStore(Protocol):
    """A prefix cache of per-sequence KV entries (:class:`~brrm.backends.transformers.PrefixCache`)."""

    def put(self, ids: tuple[int, ...], kv: KV, prompt_length: int | None = None) -> None: ...

    def take(self, prompt: tuple[int, ...]) -> tuple[int, KV | None]: ...


@dataclass(frozen=True)
class DecodeContext:
    """What the decoder reads from its backend (the backend builds one per call).

    Attributes:
        model: the causal LM (a ``transformers`` ``PreTrainedModel``).
        cache: the prefix cache, or None when prefix caching is off.
        pad_id: id that fills padded positions.
        stop_ids: ids that end a generation.
        jump_forward: feed the tokens a constraint program forces next in the same step.
        stats: counters the decoder adds to (``prefill_tokens``, ``cached_tokens``, ``generated_tokens``,
            ``forward_calls``): the backend's own dict, shared.
        mask: what a forward passes as its attention mask for a step
            (:func:`brrm.backends.transformers.decode.mask_for`, resolved once per model: it also checks that the
            slot decoder can run the model).
    """

    model: PreTrainedModel
    cache: KVStore | None
    pad_id: int
    stop_ids: frozenset[int]
    jump_forward: bool
    stats: dict[str, int]
    mask: MaskFor


@dataclass(frozen=True)
class BatchingContext(DecodeContext):
    """What continuous batching (:mod:`._continuous`) reads beyond :class:`DecodeContext`.

    Attributes:
        batch_size: rows in the running batch, >= 1.
        completion: how a finished row becomes its :class:`~brrm.backends.base.Completion`.
    """

    batch_size: int = 1
    completion: Callable[[Row], Completion] | None = None

    def complete(self, row: Row) -> Completion:
        """``row``'s completion.

        Raises:
            ValueError: when the context was built without ``completion`` (a programming error).
        """
        if self.completion is None:
            raise ValueError("BatchingContext.completion is not set")
        return self.completion(row)
