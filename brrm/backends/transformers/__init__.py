"""The steerable, token-level room: Hugging Face transformers run by our own decoder.

:mod:`~brrm.backends.transformers.backend` is the backend; the decoder over a typed decode context
(:mod:`~brrm.backends.transformers.decode`, continuous batching in
:mod:`~brrm.backends.transformers.continuous`), its rows (:mod:`~brrm.backends.transformers.rows`), per-row
sampling (:mod:`~brrm.backends.transformers.sampling`), the outlines-core steering of a constraint program
(:mod:`~brrm.backends.transformers.steering`), batch-invariant forwards
(:mod:`~brrm.backends.transformers.invariant` over :mod:`~brrm.backends.transformers.tiles`), scoring heads
(:mod:`~brrm.backends.transformers.classify`) and length bucketing
(:mod:`~brrm.backends.transformers.bucketing`) live beside it. Importing this package does not import torch."""

from brrm.backends.transformers.backend import (
    CLASSIFY_MIN_BATCH,
    CONTINUOUS_CHUNK,
    DEVICES,
    DTYPES,
    SCHEDULING,
    TASKS,
    PrefixCache,
    TransformersBackend,
)

__all__ = [
    "CLASSIFY_MIN_BATCH",
    "CONTINUOUS_CHUNK",
    "DEVICES",
    "DTYPES",
    "SCHEDULING",
    "TASKS",
    "PrefixCache",
    "TransformersBackend",
]
