"""The arena's input: several models' responses to the same prompts, as one long table in JSON Lines.

One row per (prompt, model): ``prompt_id`` (string or integer), ``model`` (string), ``response`` (string),
``prompt`` (the user turn the judge sees; every row of a prompt carries it, and all of them agree) and an optional
``category``. A bad line (not JSON, a missing or mistyped field) is one :class:`RowError` naming its line number
and the field, and the rest goes on; two rows for the same (``prompt_id``, ``model``) refuse the whole table,
naming every repeated pair with its count and lines (battles join answers by ``prompt_id``, and which of two
answers to rate cannot be guessed). A model without an answer to some prompt is reported in
:attr:`ArenaTable.missing`; its ratings use the prompts it answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from brrm.errors import ConfigError

FIELDS = ("prompt_id", "model", "response", "prompt")
"""The required fields of a row (``category`` is optional)."""


@dataclass(frozen=True)
class Answer:
    """One model's response to one prompt: the row at 1-based ``line`` of the input."""

    prompt_id: str
    model: str
    response: str
    line: int


@dataclass(frozen=True)
class Prompt:
    """One prompt of the arena: its id, the user turn the judge sees, its category (``""``: none) and the first
    line that gave it."""

    prompt_id: str
    text: str
    category: str
    line: int


@dataclass(frozen=True)
class RowError:
    """A line of the input that is no valid row: its 1-based ``line`` and why (naming the field)."""

    line: int
    reason: str


@dataclass(frozen=True)
class ArenaTable:
    """The valid rows of an arena input.

    Attributes:
        prompts: prompt id -> :class:`Prompt`, in first-seen order.
        answers: (prompt id, model) -> :class:`Answer`.
        models: the models, in first-seen order.
        errors: the bad lines, in line order (each judged nowhere, reported once).
        source: where the rows came from (a path, or ``"<rows>"``).
    """

    prompts: Mapping[str, Prompt]
    answers: Mapping[tuple[str, str], Answer]
    models: tuple[str, ...]
    errors: tuple[RowError, ...]
    source: str

    @property
    def missing(self) -> dict[str, tuple[str, ...]]:
        """model -> the prompt ids it has no answer for (only models missing some), in prompt order."""
        out = {m: tuple(p for p in self.prompts if (p, m) not in self.answers) for m in self.models}
        return {m: ids for m, ids in out.items() if ids}

    def answer(self, prompt_id: str, model: str) -> Answer | None:
        """The answer of ``model`` to ``prompt_id``, or None when it has none (see :attr:`missing`)."""
        return self.answers.get((prompt_id, model))


def read_jsonl(path: str | Path) -> ArenaTable:
    """Read a JSON Lines arena table (see the module docstring; other forms: :mod:`brrm.arena.sources`).

    Raises:
        ConfigError: when the file is missing, when rows share a (``prompt_id``, ``model``) (naming each repeated
            pair with its count and lines), when no line is a valid row (naming the first bad line), or when fewer
            than two models remain.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"arena input {str(p)!r} does not exist (a JSON Lines file of prompt_id, model, "
                          f"response, prompt rows)")
    rows: list[tuple[int, object]] = []
    with p.open(encoding="utf-8") as f:
        for k, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                rows.append((k, json.loads(text)))
            except json.JSONDecodeError as exc:
                rows.append((k, RowError(k, f"line {k}: not valid JSON ({exc.msg})")))
    return table_from_rows(rows, source=str(p))


def table_from_rows(rows: Iterable[tuple[int, object]], *, source: str = "<rows>") -> ArenaTable:
    """Build an :class:`ArenaTable` from ``(line, row)`` pairs (a row: a JSON object, or a :class:`RowError`
    already made for its line). Errors as :func:`read_jsonl`."""
    prompts: dict[str, Prompt] = {}
    answers: dict[tuple[str, str], Answer] = {}
    models: dict[str, None] = {}
    errors: list[RowError] = []
    lines: dict[tuple[str, str], list[int]] = {}
    for line, row in rows:
        parsed = row if isinstance(row, RowError) else _parse(line, row, prompts)
        if isinstance(parsed, RowError):
            errors.append(parsed)
            continue
        answer, prompt = parsed
        key = (answer.prompt_id, answer.model)
        lines.setdefault(key, []).append(line)
        answers.setdefault(key, answer)
        prompts.setdefault(prompt.prompt_id, prompt)
        models.setdefault(answer.model, None)
    _refuse_duplicates(lines, source)
    if not answers:
        first = f"; first bad line: {errors[0].reason}" if errors else ""
        raise ConfigError(f"{source} holds no valid arena row{first}")
    if len(models) < 2:
        raise ConfigError(f"{source} holds answers of {len(models)} model ({', '.join(models)}); an arena needs at "
                          f"least two")
    return ArenaTable(prompts, answers, tuple(models), tuple(errors), source)


def _refuse_duplicates(lines: Mapping[tuple[str, str], list[int]], source: str) -> None:
    """Refuse a table where a (``prompt_id``, ``model``) has several rows: battles join each model's answer to a
    prompt by ``prompt_id``, and which of two answers to rate cannot be guessed.

    Raises:
        ConfigError: naming every repeated (``prompt_id``, ``model``) with its count and lines (up to
            :data:`brrm.records.duplicates.SHOWN`; the rest counted).
    """
    from brrm.records.duplicates import SHOWN

    repeated = [(key, at) for key, at in lines.items() if len(at) > 1]
    if not repeated:
        return
    n = len(repeated)
    named = ", ".join(f"({pid!r}, {model!r}) (×{len(at)}, on lines {_and(at)})" for (pid, model), at in
                      repeated[:SHOWN])
    more = f", … and {n - SHOWN} more" if n > SHOWN else ""
    raise ConfigError(f"duplicate (prompt_id, model) in {source}: {n} {'pair appears' if n == 1 else 'pairs appear'} "
                      f"more than once: {named}{more}; the arena joins each model's answer to a prompt by "
                      "prompt_id: keep one answer per model and prompt")


def _and(numbers: list[int]) -> str:
    """``1 and 3``, ``1, 3 and 7``."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _parse(line: int, row: object, prompts: Mapping[str, Prompt]) -> tuple[Answer, Prompt] | RowError:
    """One row as its answer and prompt, or the error naming the field."""
    if not isinstance(row, dict):
        return RowError(line, f"line {line}: a row must be a JSON object, got {type(row).__name__}")
    for name in FIELDS:
        if name not in row:
            return RowError(line, f"line {line}: missing field {name!r}")
    pid = row["prompt_id"]
    if isinstance(pid, bool) or not isinstance(pid, str | int) or str(pid).strip() == "":
        return RowError(line, f"line {line}: 'prompt_id' must be a non-empty string or an integer, got {pid!r}")
    for name in ("model", "response", "prompt"):
        value = row[name]
        if not isinstance(value, str) or (name != "response" and not value.strip()):
            return RowError(line, f"line {line}: {name!r} must be a non-empty string, got {value!r}"
                            if name != "response" else f"line {line}: 'response' must be a string, got {value!r}")
    category = row.get("category", "")
    if category is None:
        category = ""
    if not isinstance(category, str):
        return RowError(line, f"line {line}: 'category' must be a string, got {category!r}")
    prompt = Prompt(str(pid), row["prompt"], category, line)
    seen = prompts.get(prompt.prompt_id)
    if seen is not None and (seen.text != prompt.text or seen.category != prompt.category):
        what = "prompt" if seen.text != prompt.text else "category"
        return RowError(line, f"line {line}: {what!r} of prompt_id {prompt.prompt_id!r} differs from line {seen.line}")
    return Answer(prompt.prompt_id, row["model"], row["response"], line), prompt
