"""Other forms of the arena's input, turned into the long table's rows (:func:`brrm.arena.table.table_from_rows`):
a Parquet file or a Hugging Face dataset of the same columns, and Arena-Hard-Auto's folder of per-model answer files.

Arena-Hard-Auto (``lmarena/arena-hard-auto``, ``data/<bench>/``): ``model_answer/<model>.jsonl`` holds one line per
question. v2.0 lines carry ``uid``, ``model`` and ``messages`` (the user turn, then the assistant's
``{"answer": …}``); v0.1 lines carry ``question_id``, ``model_id`` and ``choices[0].turns[0].content``, with the
prompt in ``question.jsonl`` (``question_id``, ``turns[0].content``). A ``question.jsonl`` beside
``model_answer/`` also gives each prompt's ``category`` (and v2.0's ``prompt``). Rows are numbered by file then
line (``line`` counts on across the files, in sorted file order); an answer line that cannot be read is one
error row naming its file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from brrm.arena.table import ArenaTable, RowError, read_jsonl, table_from_rows
from brrm.errors import ConfigError
from brrm.records import open_rows

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""An ``owner/name`` Hugging Face hub id (a dataset in the local cache when offline)."""

_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")
"""Suffixes that name a file: a missing ``examples/arena.jsonl`` is a missing file, not a hub id."""

Row = tuple[int, object]
"""(line, a JSON object or the :class:`RowError` of that line)."""


def read_table(source: str | Path | object, *, split: str | None = None) -> ArenaTable:
    """Read an arena input: an Arena-Hard-Auto folder (:func:`arena_hard_rows`), a Hugging Face dataset (a
    ``datasets.Dataset`` / ``DatasetDict`` object, a ``save_to_disk`` folder, a dataset repository folder or a hub
    id in the local cache: :func:`dataset_rows`), a ``.parquet`` long table (:func:`parquet_rows`) or a JSON Lines
    long table (:func:`brrm.arena.table.read_jsonl`).

    Args:
        source: the input (see above).
        split: the split of a Hugging Face dataset with several (``--split``); default: its only split.

    Raises:
        ConfigError: as those readers (a missing path, duplicate rows naming both lines, no valid row, a dataset
            that cannot be loaded or lacks ``split``), or ``split`` given for an input that is no dataset.
    """
    if not isinstance(source, str | Path):
        return table_from_rows(dataset_rows(source, split), source=f"<{type(source).__name__}>")
    p = Path(source).expanduser()
    if p.is_dir() and (p / "model_answer").is_dir():
        _no_split(split, source)
        return table_from_rows(arena_hard_rows(p), source=str(p))
    if p.is_dir() or (not p.exists() and _HUB_ID.match(str(source)) and p.suffix.lower() not in _FILE_SUFFIXES):
        try:
            rows = open_rows(str(source), format="hf", split=split)
        except ConfigError as exc:
            what = "a folder that is neither an Arena-Hard-Auto folder (model_answer/*.jsonl) nor" if p.is_dir() \
                else "not a file, and not"
            raise ConfigError(f"arena input {str(source)!r} is {what} a Hugging Face dataset: {exc}") from None
        return table_from_rows(rows, source=str(source))
    _no_split(split, source)
    if p.suffix == ".parquet" and p.is_file():
        return table_from_rows(parquet_rows(p), source=str(p))
    return read_jsonl(p)


def _no_split(split: str | None, source: str | Path) -> None:
    if split is not None:
        raise ConfigError(f"--split applies to Hugging Face datasets (a dataset folder, hub id or object), not "
                          f"{str(source)!r}")


def dataset_rows(dataset: object, split: str | None = None) -> list[Row]:
    """The rows of an in-memory Hugging Face ``datasets.Dataset`` (or one split of a ``DatasetDict``), numbered
    from 1.

    Raises:
        ConfigError: for an object that is neither, or a ``DatasetDict`` without ``split`` when it has several
            splits (naming them), or with a ``split`` it lacks.
    """
    import datasets

    if isinstance(dataset, datasets.DatasetDict):
        splits = ", ".join(dataset)
        if split is None and len(dataset) != 1:
            raise ConfigError(f"the dataset has several splits; pass split (one of: {splits})")
        if split is not None and split not in dataset:
            raise ConfigError(f"split {split!r} is not in the dataset; splits: {splits}", field="split")
        dataset = dataset[split if split is not None else next(iter(dataset))]
    elif split is not None:
        raise ConfigError("the dataset has no splits; drop split")
    if not isinstance(dataset, datasets.Dataset):
        raise ConfigError(f"an arena input is a path, a hub id or a datasets.Dataset, not {type(dataset).__name__}")
    return list(enumerate(dataset.to_list(), start=1))


def parquet_rows(path: Path) -> list[Row]:
    """The rows of a Parquet long table (1-based row numbers as lines).

    Raises:
        ConfigError: when the file cannot be read as Parquet.
    """
    try:
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    except ImportError:
        raise ConfigError("reading Parquet needs pyarrow (pip install pyarrow)") from None
    except Exception as exc:  # noqa: BLE001  # pyarrow raises several types for a file that is no Parquet
        raise ConfigError(f"arena input {str(path)!r} is not a readable Parquet file ({exc})") from None
    return list(enumerate(rows, start=1))


def arena_hard_rows(folder: Path) -> list[Row]:
    """The rows of an Arena-Hard-Auto benchmark folder (see the module docstring).

    Raises:
        ConfigError: when ``folder`` has no ``model_answer/*.jsonl``.
    """
    files = sorted((folder / "model_answer").glob("*.jsonl"))
    if not files:
        raise ConfigError(f"{str(folder)!r} holds no model_answer/*.jsonl (Arena-Hard-Auto's answer files); pass a "
                          f"JSONL long table or such a folder")
    questions = _questions(folder / "question.jsonl")
    out: list[Row] = []
    for path in files:
        with path.open(encoding="utf-8") as f:
            for k, text in enumerate(f, start=1):
                if text.strip():
                    line = len(out) + 1
                    out.append((line, _answer(text, questions, f"{path.name} line {k}", line)))
    return out


def _questions(path: Path) -> dict[str, Mapping[str, object]]:
    """question id -> its question line (empty when there is no ``question.jsonl``)."""
    if not path.is_file():
        return {}
    out: dict[str, Mapping[str, object]] = {}
    with path.open(encoding="utf-8") as f:
        for text in f:
            if text.strip():
                q = json.loads(text)
                out[str(q.get("uid", q.get("question_id")))] = q
    return out


def _answer(text: str, questions: Mapping[str, Mapping[str, object]], where: str, line: int) -> object:
    """One answer line as a long-table row, or the :class:`RowError` naming ``where``."""
    try:
        row = json.loads(text)
        qid = str(row.get("uid", row.get("question_id")))
        model = row.get("model", row.get("model_id"))
        question = questions.get(qid, {})
        if "messages" in row:
            prompt = row["messages"][0]["content"]
            answer = row["messages"][-1]["content"]
            response = answer["answer"] if isinstance(answer, dict) else answer
        else:
            response = row["choices"][0]["turns"][0]["content"]
            turns = question.get("turns")
            prompt = turns[0]["content"] if isinstance(turns, list) else question.get("prompt")
        if prompt is None and "prompt" in question:
            prompt = question["prompt"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return RowError(line, f"line {line}: {where}: not an Arena-Hard-Auto answer ({type(exc).__name__}: {exc})")
    if prompt is None:
        return RowError(line, f"line {line}: {where}: no prompt for question {qid} (question.jsonl lacks it)")
    return {"prompt_id": qid, "model": model, "response": response, "prompt": prompt,
            "category": str(question.get("category") or "")}
