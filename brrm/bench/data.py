"""Where benchmark data lives and how it is read: local files and Hugging Face Hub ids, through ``datasets``.

Local benchmark copies sit under one data root, one folder per benchmark (the layouts are in
``docs/benchmarks.md``): ``--data-dir`` / ``$BRRM_DATA_DIR`` when given (the offline path: nothing is downloaded,
a missing file is an error naming the layout), else brrm's download cache (:func:`brrm.bench.sources.cache_root`),
filled on first use from each benchmark's pinned official repository (:mod:`brrm.bench.sources`) unless
``HF_HUB_OFFLINE`` is set. Every file is read with ``datasets.load_dataset`` (the ``json`` builder for
``.json``/``.jsonl``, ``parquet`` for ``.parquet``). Hub-only data (RewardBench, RewardBench 2, MT-Bench's expert
votes) is a snapshot of the hub dataset (``huggingface_hub.snapshot_download``: the local Hugging Face cache, or a
download when online) read by ``datasets.load_dataset`` as a folder in the hub layout, or a local copy (``--data``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from brrm.bench.sources import OFFLINE_ENV, cache_root, fetch, offline, source_of
from brrm.errors import ConfigError

if TYPE_CHECKING:
    from brrm.bench.base import Benchmark
    from brrm.bench.core import BenchItem, BenchResult

DATA_DIR_ENV = "BRRM_DATA_DIR"
"""Environment variable naming the data root (the folder that holds ``LLMBar/``, ``RM-Bench/``, …)."""

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def default_data_root() -> Path:
    """``$BRRM_DATA_DIR`` if set, else the download cache (:func:`brrm.bench.sources.cache_root`)."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else cache_root()


def data_root(root: str | os.PathLike[str] | None) -> Path:
    """``root`` as a path, or :func:`default_data_root`."""
    return Path(root).expanduser() if root is not None else default_data_root()


def require(path: Path, what: str) -> Path:
    """``path`` if it exists.

    Raises:
        ConfigError: naming what is missing, the path, and how to point brrm at the data.
    """
    if not path.exists():
        raise ConfigError(f"{what} not found at {path}; pass --data-dir (or set {DATA_DIR_ENV}) to the folder "
                          "holding the benchmark folders")
    return path


def locate(relative: str, root: str | os.PathLike[str] | None, what: str) -> Path:
    """A benchmark file or folder under the data root, downloaded first where brrm may (:func:`available`).

    Args:
        relative: its path under the data root, the benchmark folder first (``LLMBar/LLMBar/Natural/dataset.json``;
            a folder such as ``RMB/Pairwise_set/Helpfulness`` stands for the pinned files under it).
        root: ``--data-dir`` (None: ``$BRRM_DATA_DIR``, else the download cache).
        what: its name in messages (``LLMBar Natural``).

    Raises:
        ConfigError: when it is missing, naming the path, where it comes from and the layout a ``--data-dir`` needs;
            or when a download fails or does not match its pinned digests.
    """
    path = available(relative, root)
    if path is None:
        raise ConfigError(_missing(what, data_root(root) / relative, relative,
                                   mine=root is None and not os.environ.get(DATA_DIR_ENV)))
    return path


def available(relative: str, root: str | os.PathLike[str] | None) -> Path | None:
    """``root/relative`` when it is there (None when not). Under a data root the user named (``root``,
    ``$BRRM_DATA_DIR``) it is only looked up; in the download cache the pinned files it lacks are first downloaded
    from the official repository and checked (:func:`brrm.bench.sources.fetch`) unless ``HF_HUB_OFFLINE`` is set,
    and it counts as there only when all of them are.

    Raises:
        ConfigError: when a download fails or does not match its pinned digests.
    """
    mine = root is None and not os.environ.get(DATA_DIR_ENV)
    base, inside = data_root(root), relative.split("/", 1)[1] if "/" in relative else ""
    path, source = base / relative, source_of(relative)
    pinned = [base / source.folder / f.path for f in source.under(inside)] if source is not None and mine else []
    if source is not None and pinned and not offline():
        fetch(source, inside, base)
    return path if path.exists() and all(p.is_file() for p in pinned) else None


def _missing(what: str, path: Path, relative: str, *, mine: bool) -> str:
    """The one line naming a missing benchmark file: where it was looked for, its source and layout, the ways out."""
    source = source_of(relative)
    origin = ""
    if source is not None:
        files = source.under(relative.split("/", 1)[1] if "/" in relative else "")
        origin = f"it comes from {source.short()}" + (f" ({files[0].upstream})" if len(files) == 1 else "") + ", "
    layout = f"layout <data-dir>/{relative}"
    if mine and offline():
        return (f"{what} not found at {path}: offline ({OFFLINE_ENV}=1) and no --data-dir; {origin}{layout}; pass "
                f"--data-dir or set {DATA_DIR_ENV}, or go online to download it to {cache_root()}")
    return (f"{what} not found at {path} (--data-dir / {DATA_DIR_ENV}): {origin}{layout}; pass --data-dir or set "
            f"{DATA_DIR_ENV} to a folder in that layout, or unset both to download it to {cache_root()}")


def _quiet() -> ModuleType:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def read_files(files: Sequence[Path]) -> list[dict[str, Any]]:
    """Rows of local data files (one builder for all of them), in file order then row order.

    Raises:
        ConfigError: for a missing file, an unknown suffix, or a file ``datasets`` cannot read.
    """
    if not files:
        return []
    builders = {_BUILDERS.get(Path(f).suffix.lower()) for f in files}
    if None in builders or len(builders) != 1:
        raise ConfigError(f"cannot read {', '.join(map(str, files[:3]))}: expected files that all end in one of "
                          f"{', '.join(_BUILDERS)}")
    for f in files:
        require(Path(f), "data file")
    datasets = _quiet()
    try:
        ds = datasets.load_dataset(builders.pop(), data_files=[str(f) for f in files], split="train")
    except Exception as exc:  # noqa: BLE001 - any reader failure is the file's problem, reported with its name
        raise ConfigError(f"cannot read {files[0]}{' …' if len(files) > 1 else ''}: {type(exc).__name__}: "
                          f"{exc}") from None
    return ds.to_list()


def read_source(source: str, *, split: str, revision: str | None = None) -> list[dict[str, Any]]:
    """Rows of a dataset named by a local file, a local folder in the hub layout, or a hub id.

    Args:
        source: ``path/to/file.{json,jsonl,parquet,csv}``, a folder ``datasets`` can load (e.g. a clone of the
            hub repo: ``data/<split>-00000-of-00001.parquet``), or a hub id such as ``allenai/reward-bench``.
        split: the split to read (``filtered`` for RewardBench).
        revision: for a hub id, the dataset commit, branch or tag to read (None: the default branch).

    Raises:
        ConfigError: when the source is neither a readable path nor a reachable/cached hub id (naming it and
            how to pass a local copy), or the split does not exist.
    """
    path = Path(source).expanduser()
    if path.is_file():
        return read_files([path])
    folder = path if path.is_dir() else hub_snapshot(source, revision)
    datasets = _quiet()
    try:
        ds = datasets.load_dataset(str(folder), split=split)
    except Exception as exc:  # noqa: BLE001 - a missing split or an unreadable file: one clear message
        where = f"folder {source!r}" if path.is_dir() else f"hub id {source!r} (snapshot {folder})"
        raise ConfigError(f"cannot load {where} split {split!r} ({type(exc).__name__}: {_one_line(exc)}); pass "
                          "--data with a local copy (a .parquet/.jsonl file or a folder in the hub layout)") from None
    return ds.to_list()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def hub_snapshot(repo: str, revision: str | None) -> Path:
    """The local folder of a hub dataset at ``revision`` (None: ``main``), in the hub layout:
    ``huggingface_hub.snapshot_download`` from the local Hugging Face cache (``$HF_HUB_CACHE``:
    ``datasets--<owner>--<name>/snapshots/<commit>/``), downloading it first when online.

    Raises:
        ConfigError: when it is neither cached nor reachable (offline, unknown id), naming the id, the revision,
            the cache and how to pass a local copy.
    """
    from huggingface_hub import constants, snapshot_download

    local = offline() or constants.HF_HUB_OFFLINE  # the variable as it is now, not as huggingface_hub's import saw it
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision, local_files_only=local))
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, network: one clear message
        why = (f"offline ({OFFLINE_ENV}=1) and not in the Hugging Face cache {constants.HF_HUB_CACHE}" if local
               else f"{type(exc).__name__}: {_one_line(exc)}")
        raise ConfigError(f"cannot load hub id {repo!r} @ {revision or 'main'}: {why}; it comes from "
                          f"huggingface.co/datasets/{repo}; pass --data with a local copy (a .parquet/.jsonl file "
                          "or a folder in the hub layout), or go online to download it") from None


_SOURCE_FIELD = re.compile(r"^- \*\*(Repository|Commit):\*\*\s*(\S+)", re.MULTILINE)


def files_sha256(path: Path) -> str:
    """sha256 (64 hex) naming a local copy by content: of the file's bytes for a file (what ``sha256sum`` prints);
    for a folder, of the lines ``<relative path>\\0<sha256 of its bytes>\\n`` over its files in path order, the
    folder's notes (``*.md``) left out so that a note edit does not rename the data."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() != ".md"):
        digest.update(f"{f.relative_to(path).as_posix()}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def items_sha256(items: Sequence[BenchItem]) -> str:
    """sha256 (64 hex) over the items a run scored, in run order: each item's id, subset, messages, responses,
    pairs and meta as canonical JSON, one line each. It names the data a run scored whatever its source (a hub id
    with no known revision included), after ``--subset`` and ``--limit``."""
    from brrm.types import Conversation

    digest = hashlib.sha256()
    for item in items:
        record = {"id": item.id, "subset": item.subset, "messages": Conversation.coerce(item.conversation).to_list(),
                  "responses": list(item.responses), "pairs": [[p.i, p.j, p.gold.value] for p in item.pairs],
                  "meta": dict(item.meta)}
        line = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def data_revision(folder: str | None, *, root: str | os.PathLike[str] | None = None,
                  source: str | None = None, revision: str | None = None) -> dict[str, str | None]:
    """Which data a run read, for ``run.json``, the report and ``result.json``.

    Args:
        folder: the benchmark's folder under the data root (:attr:`brrm.bench.base.Benchmark.data_folder`), or
            None for hub-only data.
        root: the data root (``--data-dir``).
        source: a hub id or local copy (``--data``), for hub-only data (or a benchmark's hub-only subset).
        revision: the hub revision asked for (``--revision``), recorded for a hub id.

    Returns:
        ``{"source", "repository", "commit", "sha256", "from"}``: for a local benchmark folder the upstream
        repository and commit its ``SOURCE.md`` names (``- **Repository:**`` / ``- **Commit:**`` lines) and the
        sha256 of the files there (:func:`files_sha256`); for a local file or folder given by ``source``, its
        sha256; for a hub id, the revision asked for and the commit of the snapshot in the local Hugging Face cache
        (``snapshots/<commit>/``). ``commit`` / ``sha256`` are None, with ``from`` saying why, where none can be told.
    """
    if source is not None:
        path = Path(source).expanduser()
        if path.exists():
            return {"source": str(path), "repository": None, "commit": None, "sha256": files_sha256(path),
                    "from": "sha256 of the local copy"}
        return {"source": source, "repository": f"https://huggingface.co/datasets/{source}", "sha256": None,
                "revision": revision, **_hub_commit(source, revision)}
    if folder is None:
        return {"source": None, "repository": None, "commit": None, "sha256": None, "from": "no data read"}
    base = data_root(root) / folder
    digest = files_sha256(base) if base.is_dir() else None
    notes = base / "SOURCE.md"
    if not notes.is_file():
        return {"source": str(base), "repository": None, "commit": None, "sha256": digest,
                "from": f"no SOURCE.md in {base}" + ("; sha256 of the local files" if digest else "")}
    fields = dict(_SOURCE_FIELD.findall(notes.read_text(encoding="utf-8")))
    return {"source": str(base), "repository": fields.get("Repository"),
            "commit": fields.get("Commit", "").strip("`") or None, "sha256": digest,
            "from": f"{notes}; sha256 of the local files"}


def run_revision(bench: Benchmark, items: Sequence[BenchItem] | None, *, root: str | os.PathLike[str] | None = None,
                 source: str | None = None) -> dict[str, str | None]:
    """:func:`data_revision` of a benchmark's data (its folder, ``source`` or its hub id; RewardBench 2: its
    ``revision``) plus ``items_sha256`` (:func:`items_sha256` of the items scored; None when not known, as for
    official output files read without their texts): what a result names its data by."""
    where = source or (bench.hub_source if bench.data_folder is None else None)
    asked = getattr(bench, "revision", None)
    return {**data_revision(bench.data_folder, root=root, source=where, revision=asked if isinstance(asked, str)
                            else None),
            "items_sha256": items_sha256(items) if items is not None else None}


def duplicate_note(items: Sequence[BenchItem]) -> str:
    """A result note naming the item ids that repeat in the items scored, with their counts (``""`` when none):
    each such item is judged and scored on its own (:func:`brrm.bench.core.item_keys`), but a per-item output
    holds its id on several lines. A metric that joins by id refuses such data instead (RewardBench 2's Ties
    score, PandaLM's replay)."""
    from brrm.records.duplicates import duplicate_ids

    found = duplicate_ids((it.id for it in items), what="item ids")
    if not found:
        return ""
    return (f"{found.describe()}; each is judged and scored as its own item (filed by position and content, never "
            "by id), so judgments.jsonl holds those ids on several lines")


def with_data(result: BenchResult, items: Sequence[BenchItem] | None, revision: dict[str, Any]) -> BenchResult:
    """``result`` naming the data it scored: ``data_revision`` set to ``revision`` (:func:`run_revision`) and, when
    the ``items`` (None: not known, as for official output files) repeat ids, the :func:`duplicate_note` added."""
    from dataclasses import replace

    note = duplicate_note(items) if items is not None else ""
    notes = result.notes if not note or note in result.notes else (*result.notes, note)
    return replace(result, data_revision=revision, notes=notes)


def _hub_commit(repo: str, revision: str | None) -> dict[str, str | None]:
    if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
        return {"commit": revision, "from": "the hub commit asked for (--revision)"}
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo, "README.md", repo_type="dataset", revision=revision)
    except Exception:  # noqa: BLE001 - a broken cache only means "not known"
        cached = None
    if isinstance(cached, str) and "/snapshots/" in cached:
        return {"commit": cached.split("/snapshots/", 1)[1].split("/", 1)[0], "from": "local Hugging Face cache"}
    return {"commit": None, "from": "not in the local Hugging Face cache (datasets does not report the revision)"}
