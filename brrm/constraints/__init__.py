"""Constraint programs (:mod:`~brrm.constraints.program`), their compilation for a tokenizer
(:mod:`~brrm.constraints.compile`) and the token-level state machine (:mod:`~brrm.constraints.state`)."""

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
