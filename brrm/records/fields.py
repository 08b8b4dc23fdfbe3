"""Which input column holds each part of a record, and readers of the shared fields (conversation, label).

One :class:`FieldMap` serves every record shape (pairs, single responses, groups), so ``--field
prompt=instruction`` means the same in ``brrm judge``, ``score``, ``rank`` and ``audit``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from brrm.errors import ConfigError
from brrm.records._io import absent, read_string_field
from brrm.types import Conversation, Verdict, parse_label


@dataclass(frozen=True)
class FieldMap:
    """Input column of each record field.

    Attributes:
        id: the record id (optional in the data; default the 1-based line / row number).
        conversation: a list of ``{role, content}`` messages ending with a user or tool turn.
        prompt: a single user prompt string (used when the row has no conversation).
        response: the response under judgment (single-response records).
        response_a, response_b: the two candidates (pair records).
        responses: a list of candidate responses (group records).
        reference: a reference response (groups ranked against it; optional).
        principle: the principle a principle model judges against (optional; else ``--principle``).
        label: the gold verdict of a pair, ``A`` / ``B`` / ``tie`` or ``1`` / ``2`` (optional).

    Raises:
        ConfigError: when a column name is empty or not a string, or two fields share one column.
    """

    id: str = "id"
    conversation: str = "conversation"
    prompt: str = "prompt"
    response: str = "response"
    response_a: str = "response_a"
    response_b: str = "response_b"
    responses: str = "responses"
    reference: str = "reference"
    principle: str = "principle"
    label: str = "label"

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for name, column in self.items():
            if not isinstance(column, str) or not column:
                raise ConfigError(f"field map {name!r} must be a non-empty column name, got {column!r}")
            if column in seen:
                raise ConfigError(f"field map: {seen[column]!r} and {name!r} both read column {column!r}")
            seen[column] = name

    def items(self) -> list[tuple[str, str]]:
        """(field, column) pairs in declaration order."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    @classmethod
    def from_overrides(cls, overrides: Iterable[str] | Mapping[str, str] | None = None) -> FieldMap:
        """Build a field map from CLI-style ``field=column`` overrides (e.g. ``["prompt=input"]``).

        Raises:
            ConfigError: on a string without ``=``, or an unknown field (the message lists the valid ones).
        """
        pairs: dict[str, str] = {}
        items = overrides.items() if isinstance(overrides, Mapping) else (overrides or ())
        valid = [f.name for f in dataclasses.fields(cls)]
        for item in items:
            if isinstance(item, str):
                key, sep, column = item.partition("=")
                if not sep:
                    raise ConfigError(f"--field {item!r} is not field=column (e.g. prompt=input)")
            else:
                key, column = item
            key, column = key.strip(), column.strip()
            if key not in valid:
                raise ConfigError(f"--field: unknown field {key!r}; expected one of {', '.join(valid)}")
            pairs[key] = column
        return cls(**pairs)


LLMBAR_FIELDS = FieldMap(prompt="input", response_a="output_1", response_b="output_2")
"""LLMBar's columns (``input``, ``output_1``, ``output_2``, ``label``), per ``data/LLMBar/SOURCE.md``."""

EVALBIASBENCH_FIELDS = FieldMap(prompt="instruction", response_a="response1", response_b="response2")
"""EvalBiasBench's columns (``instruction``, ``response1``, ``response2``, ``label`` 1|2, ``bias``), per
``data/EvalBiasBench/SOURCE.md``."""


def read_conversation(row: Mapping[str, object], fields: FieldMap) -> Conversation:
    """The row's conversation (``conversation`` messages, or a ``prompt`` string as one user turn).

    Raises:
        ConfigError: naming the field when both or neither are given, or the value is malformed.
    """
    conv, prompt = row.get(fields.conversation), row.get(fields.prompt)
    has_conv = not absent(conv)
    if has_conv and not (prompt is None or prompt == ""):
        raise ConfigError(f"has both {fields.conversation!r} and {fields.prompt!r}; give only one of them")
    if has_conv:
        if isinstance(conv, str) and conv.lstrip().startswith("["):
            try:  # CSV cells hold the message list as JSON text
                conv = json.loads(conv)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"field {fields.conversation!r} is not valid JSON: {exc}") from None
        if not isinstance(conv, list | tuple):
            raise ConfigError(f"field {fields.conversation!r} must be a list of {{role, content}} messages, got "
                              f"{type(conv).__name__} (use {fields.prompt!r} for a single prompt string)")
        return Conversation.coerce(list(conv), where=fields.conversation)
    if prompt is None:
        raise ConfigError(f"missing field {fields.prompt!r} (or {fields.conversation!r})")
    if not isinstance(prompt, str):
        raise ConfigError(f"field {fields.prompt!r} must be a string, got {type(prompt).__name__}")
    return Conversation.from_prompt(prompt)


def read_label(row: Mapping[str, object], fields: FieldMap) -> Verdict:
    """The row's gold verdict, ``Verdict.NONE`` when absent.

    Raises:
        ConfigError: naming the field and the valid options.
    """
    value = row.get(fields.label)
    if absent(value):
        return Verdict.NONE
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return parse_label(value, where=f"field {fields.label!r}:")


def read_optional_string(row: Mapping[str, object], column: str) -> str:
    """``row[column]`` as a string, "" when absent.

    Raises:
        ConfigError: naming the column when it is present but not a string.
    """
    return "" if absent(row.get(column)) else read_string_field(row, column)
