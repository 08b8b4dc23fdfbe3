"""Where benchmark data lives and how it is read: local files and Hugging Face Hub ids, through ``datasets``.

Local benchmark copies sit under one data root (``$BRRM_DATA_DIR``, else ``../shared/data`` next to the
checkout), one folder per benchmark as documented in each folder's ``SOURCE.md``. Every file is read with
``datasets.load_dataset`` (the ``json`` builder for ``.json``/``.jsonl``, ``parquet`` for ``.parquet``), so a
local path works offline and a hub id works where the hub (or its local cache) is reachable.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from brrm.errors import ConfigError

DATA_DIR_ENV = "BRRM_DATA_DIR"
"""Environment variable naming the data root (the folder that holds ``LLMBar/``, ``RM-Bench/``, …)."""

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def default_data_root() -> Path:
    """``$BRRM_DATA_DIR`` if set, else ``../shared/data`` next to the repository checkout."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


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
    datasets = _quiet()
    try:
        extra = {"revision": revision} if revision and not path.is_dir() else {}
        ds = datasets.load_dataset(str(path) if path.is_dir() else source, split=split, **extra)
    except Exception as exc:  # noqa: BLE001 - offline hub, missing split, unknown id: one clear message
        where = "folder" if path.is_dir() else "hub id"
        raise ConfigError(f"cannot load {where} {source!r} split {split!r} ({type(exc).__name__}: "
                          f"{str(exc)[:300]}); pass --data with a local copy (a .parquet/.jsonl file or a folder "
                          "in the hub layout) when the hub is not reachable") from None
    return ds.to_list()


_SOURCE_FIELD = re.compile(r"^- \*\*(Repository|Commit):\*\*\s*(\S+)", re.MULTILINE)


def data_revision(folder: str | None, *, root: str | os.PathLike[str] | None = None,
                  source: str | None = None) -> dict[str, str | None]:
    """Which revision of a benchmark's data a run read, for the report and ``result.json``.

    Args:
        folder: the benchmark's folder under the data root (:attr:`brrm.bench.base.Benchmark.data_folder`), or
            None for hub-only data.
        root: the data root (``--data-dir``).
        source: a hub id or local copy (``--data``), for hub-only data (or a benchmark's hub-only subset).

    Returns:
        ``{"source": path or hub id, "repository": …, "commit": …, "from": …}``: for a local benchmark folder the
        upstream repository and commit its ``SOURCE.md`` names (``- **Repository:**`` / ``- **Commit:**`` lines);
        for a local file or folder given by ``source``, its sha256 (first 16 hex, over the files in name order);
        for a hub id, the commit of the snapshot in the local Hugging Face cache (``snapshots/<commit>/``).
        ``commit`` is None, with ``from`` saying why, where none can be told.
    """
    if source is not None:
        path = Path(source).expanduser()
        if path.exists():
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            digest = hashlib.sha256()
            for f in files:
                digest.update(f.read_bytes())
            return {"source": str(path), "repository": None, "commit": None, "sha256": digest.hexdigest()[:16],
                    "from": "sha256 of the local copy"}
        return {"source": source, "repository": f"https://huggingface.co/datasets/{source}",
                **_hub_commit(source)}
    if folder is None:
        return {"source": None, "repository": None, "commit": None, "from": "no data read"}
    base = data_root(root) / folder
    notes = base / "SOURCE.md"
    if not notes.is_file():
        return {"source": str(base), "repository": None, "commit": None, "from": f"no SOURCE.md in {base}"}
    fields = dict(_SOURCE_FIELD.findall(notes.read_text(encoding="utf-8")))
    return {"source": str(base), "repository": fields.get("Repository"),
            "commit": fields.get("Commit", "").strip("`") or None, "from": str(notes)}


def _hub_commit(repo: str) -> dict[str, str | None]:
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo, "README.md", repo_type="dataset")
    except Exception:  # noqa: BLE001 - a broken cache only means "not known"
        cached = None
    if isinstance(cached, str) and "/snapshots/" in cached:
        return {"commit": cached.split("/snapshots/", 1)[1].split("/", 1)[0], "from": "local Hugging Face cache"}
    return {"commit": None, "from": "not in the local Hugging Face cache (datasets does not report the revision)"}
