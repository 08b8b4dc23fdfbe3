"""The constraint language that crosses the seam between judges and backends: constraint programs
(:mod:`~brrm.constraints.program`) and their compilation for a tokenizer (:mod:`~brrm.constraints.compile`). The
token-level steering through a compiled program is the transformers backend's
(:mod:`brrm.backends.transformers.steering`); the black-box backends run programs as requests
(:mod:`brrm.backends.blackbox`)."""

from brrm.constraints.compile import (
    COMPILE_SECONDS,
    INDEX_CACHE_ENV,
    CompiledProgram,
    compile_index,
    label_token_id,
    single_token_id,
)
from brrm.constraints.program import Choice, Literal, Pattern, Program, Segment, Think, literal

__all__ = [
    "COMPILE_SECONDS",
    "INDEX_CACHE_ENV",
    "Choice",
    "CompiledProgram",
    "Literal",
    "Pattern",
    "Program",
    "Segment",
    "Think",
    "compile_index",
    "label_token_id",
    "literal",
    "single_token_id",
]
