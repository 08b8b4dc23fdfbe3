"""Where each benchmark's data comes from, and fetching it from there.

The local-file benchmarks (LLMBar and MT-Bench's processed set, JudgeBench, RM-Bench, RMB, Auto-J Eval-P, PandaLM,
EvalBiasBench) come from their official GitHub repositories. :data:`SOURCES_FILE` (``sources.json``, shipped with
brrm) pins each one: the repository, the commit, and per file its path there, its git blob id (the repository's
own content address at that commit), and its sha256 and size where brrm's maintainers hold a byte-for-byte copy
(the ``SOURCE.md`` of each folder of the shared data names the same commit and blob ids). A file is downloaded from
``raw.githubusercontent.com`` at that commit into the download cache (:func:`cache_root`), in the same layout as a
``--data-dir`` (``<folder>/<path>``), and used only when every pinned digest matches. Auto-J's scenario groups are
not a data file upstream: ``scenario_group.json`` is derived from the ``scenario_group`` literal of the pinned
``codes/leaderboard/utils_constants.py`` (read as a literal, never run) and checked by its sha256.

Nothing is downloaded when ``HF_HUB_OFFLINE`` is set (the Hugging Face convention brrm's tests and CI use) or when
the user names a data root (``--data-dir`` / ``BRRM_DATA_DIR``): :func:`brrm.bench.data.locate` decides.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from brrm.errors import ConfigError

SOURCES_FILE = Path(__file__).with_name("sources.json")
"""The pinned sources: folder -> ``{"repository", "commit", "files": [{"path", "upstream", "git_blob", "sha256",
"bytes", "derived"?}]}``."""

CACHE_ENV = "BRRM_CACHE_DIR"
"""Environment variable naming brrm's cache root; benchmark downloads go to ``<root>/benchmarks``."""

RAW_URL_ENV = "BRRM_GITHUB_RAW_URL"
"""Environment variable replacing ``https://raw.githubusercontent.com`` (a mirror, or a local server in tests);
files are fetched from ``<url>/<owner>/<repo>/<commit>/<path>``."""

OFFLINE_ENV = "HF_HUB_OFFLINE"
"""Set (to 1, ON, YES or TRUE, as huggingface_hub reads it): brrm downloads nothing."""

_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass(frozen=True)
class SourceFile:
    """One pinned file.

    Attributes:
        path: where it sits under the benchmark's folder (the ``--data-dir`` layout).
        upstream: its path in the repository at the pinned commit (for a derived file: the file it is derived from).
        git_blob: the git blob id (40 hex) of the upstream file at that commit.
        sha256: sha256 (64 hex) of the file brrm writes, where known; None where only the blob id is pinned.
        size: its size in bytes, where known.
        derived: for a file computed from the upstream one, what is derived (``scenario_group``); None otherwise.
    """

    path: str
    upstream: str
    git_blob: str
    sha256: str | None
    size: int | None
    derived: str | None = None


@dataclass(frozen=True)
class Source:
    """One benchmark folder's official source: a GitHub repository at a commit, and its pinned files."""

    folder: str
    repository: str
    commit: str
    files: tuple[SourceFile, ...]

    def short(self) -> str:
        """``github.com/<owner>/<repo> @ <commit>``."""
        return f"{self.repository.removeprefix('https://')} @ {self.commit}"

    def url(self, file: SourceFile) -> str:
        """Where ``file`` is downloaded from (:data:`RAW_URL_ENV` or raw.githubusercontent.com)."""
        base = os.environ.get(RAW_URL_ENV) or "https://raw.githubusercontent.com"
        owner_repo = self.repository.removeprefix("https://github.com/").strip("/")
        return f"{base.rstrip('/')}/{owner_repo}/{self.commit}/{quote(file.upstream)}"

    def under(self, relative: str) -> tuple[SourceFile, ...]:
        """The pinned files at or under ``relative`` (a path inside the folder; "" for all)."""
        prefix = relative.strip("/")
        return tuple(f for f in self.files if not prefix or f.path == prefix or f.path.startswith(prefix + "/"))


@functools.cache
def sources() -> dict[str, Source]:
    """Every pinned source, by the benchmark folder it fills."""
    raw = json.loads(SOURCES_FILE.read_text(encoding="utf-8"))
    return {folder: Source(folder, s["repository"], s["commit"],
                           tuple(SourceFile(f["path"], f["upstream"], f["git_blob"], f["sha256"], f["bytes"],
                                            f.get("derived")) for f in s["files"]))
            for folder, s in raw.items()}


def source_of(relative: str) -> Source | None:
    """The source of a path under the data root (``LLMBar/LLMBar/Natural/dataset.json``), by its first part."""
    return sources().get(Path(relative).parts[0]) if relative else None


def cache_root() -> Path:
    """Where downloaded benchmark data lives: ``$BRRM_CACHE_DIR/benchmarks``, else brrm's user cache folder
    (``platformdirs.user_cache_dir("brrm")``) ``/benchmarks``; a data root in the ``--data-dir`` layout."""
    import platformdirs

    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("brrm")) / "benchmarks"


def offline() -> bool:
    """True when :data:`OFFLINE_ENV` is set to a true value (read at each call)."""
    return os.environ.get(OFFLINE_ENV, "").strip().upper() in _TRUE


def git_blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (``git hash-object``): sha1 over ``blob <size>\\0`` and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def fetch(source: Source, relative: str, root: Path) -> list[Path]:
    """Download the pinned files at or under ``relative`` that ``root/<folder>`` lacks, checking each.

    Args:
        source: the folder's source (:func:`source_of`).
        relative: a path inside the folder (a file, or a folder of files as RMB's parts).
        root: the data root to fill (:func:`cache_root`).

    Returns:
        The files written, in pinned order.

    Raises:
        ConfigError: when a download fails or a file does not match its pinned digests (nothing is kept then).
    """
    base = root / source.folder
    todo = [f for f in source.under(relative) if not (base / f.path).is_file()]
    if todo:
        print(f"brrm: downloading {len(todo)} file{'s' * (len(todo) > 1)} of {source.folder} from {source.short()} "
              f"to {base}", file=sys.stderr)
    written = []
    for file in todo:
        data = _download(source, file)
        data = _derive(file, data) if file.derived else data
        _check_written(source, file, data)
        target = base / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{os.getpid()}.part")
        part.write_bytes(data)
        os.replace(part, target)
        written.append(target)
    if written:
        _note(source, base)
    return written


def _download(source: Source, file: SourceFile) -> bytes:
    import httpx

    url = source.url(file)
    try:
        response = httpx.get(url, follow_redirects=True, timeout=60.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot download {source.folder}/{file.path} from {url} ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); pass --data-dir (or set BRRM_DATA_DIR) to a local copy in the layout "
                          f"<data-dir>/{source.folder}/{file.path}") from None
    data = response.content
    if git_blob_id(data) != file.git_blob:
        raise _mismatch(source, file, "git blob", file.git_blob, git_blob_id(data))
    return data


def _mismatch(source: Source, file: SourceFile, what: str, want: str, found: str) -> ConfigError:
    return ConfigError(f"{source.folder}/{file.path} from {source.short()} ({file.upstream}) does not match its "
                       f"pinned {what}: expected {want}, got {found}; nothing was kept")


def _check_written(source: Source, file: SourceFile, data: bytes) -> None:
    """The bytes brrm writes against the pinned size and sha256, where known."""
    if file.size is not None and len(data) != file.size:
        raise _mismatch(source, file, "size", str(file.size), str(len(data)))
    if file.sha256 is not None and hashlib.sha256(data).hexdigest() != file.sha256:
        raise _mismatch(source, file, "sha256", file.sha256, hashlib.sha256(data).hexdigest())


def _derive(file: SourceFile, upstream: bytes) -> bytes:
    """A derived file's bytes from its upstream file: Auto-J's ``scenario_group`` dict as JSON (indent 1)."""
    for node in ast.parse(upstream).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == file.derived
                                                for t in node.targets):
            return json.dumps(ast.literal_eval(node.value), indent=1).encode()
    raise ConfigError(f"{file.upstream} defines no {file.derived!r}")


def _note(source: Source, base: Path) -> None:
    """A ``SOURCE.md`` in the downloaded folder, naming repository and commit as the shared copies' notes do (what
    :func:`brrm.bench.data.data_revision` reads)."""
    (base / "SOURCE.md").write_text(
        f"# {source.folder}, downloaded by brrm\n\n- **Repository:** {source.repository}\n"
        f"- **Commit:** `{source.commit}`\n- **Files:** pinned in brrm/bench/sources.json (git blob ids; sha256 "
        "where known), each checked before it was kept\n", encoding="utf-8")
