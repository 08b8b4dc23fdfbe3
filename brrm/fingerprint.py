"""Fingerprints of the weights a model argument names: what makes two :class:`~brrm.JudgeSpec` s differ.

* a local folder: ``dir:`` + sha256 over (relative name, size, sha256 of the content) of every weight, config
  and tokenizer file in it (:data:`WEIGHT_SUFFIXES`), symlinks followed. Content digests are cached per file,
  keyed by (real path, size, mtime and ctime in ns, inode), in memory and in ``fingerprints.sqlite`` (SQLite: one
  indexed row per file, looked up and added one at a time, shared safely by concurrent processes) under the brrm
  cache folder (``BRRM_CACHE_DIR``, else the user cache dir), so a 60 GB checkpoint is read once, not on every start;
  a folder overwritten in place (even with the old sizes and mtimes restored: every write moves the file's ctime,
  which no user call can set back) or a symlink switched to another checkpoint gives another fingerprint;
* a hub id: ``hub:<id>@<commit>``, the commit the local Hugging Face cache resolves ``main`` to, else the
  commit the hub reports; ``hub:<id>@unresolved`` when neither can be asked (offline and not cached — loading
  it fails anyway, naming the cure);
* the embedded demo model (``model=None``): ``embedded:`` + the content digest of the GGUF file it ships in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".tiktoken", ".txt",
                   ".jinja", ".py")
"""Files of a checkpoint folder that the fingerprint covers: weights, configs, tokenizer files, chat templates and
remote code (a README or an image does not change what loads)."""

FORMAT = 1
"""Version of the fingerprint recipe (in every fingerprint's hash, so a changed recipe never collides)."""


def weights_fingerprint(model: str | None) -> str:
    """The fingerprint of the weights ``model`` names (local folder, hub id or None: the embedded model).

    Returns:
        ``dir:<sha256 hex 32>``, ``hub:<id>@<commit>``, ``hub:<id>@unresolved``, ``embedded:<sha256 hex 32>``, or
        ``serve:<url>`` for a ``brrm serve`` URL (its judge's own fingerprint is in the RemoteJudge's ``info``).

    Raises:
        BackendUnavailable: for None when the package that ships the embedded model is missing.
    """
    if model is None:
        from brrm.embedded import embedded_gguf_path

        gguf = embedded_gguf_path()
        return "embedded:" + _digest([(gguf.name, gguf.stat().st_size, _file_digest(gguf))])
    if model.startswith(("http://", "https://", "ray://")):  # a brrm serve URL or Ray Serve app: it checks its own
        return "serve:" + model.rstrip("/")
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        return "dir:" + _digest(_folder_entries(path))
    return f"hub:{model}@{_hub_commit(model)}"


def _digest(entries: list[tuple[str, int, str]]) -> str:
    h = hashlib.sha256(f"brrm-fingerprint:{FORMAT}".encode())
    for name, size, digest in entries:
        h.update(f"\0{name}\0{size}\0{digest}".encode())
    return h.hexdigest()[:32]


def _folder_entries(root: Path) -> list[tuple[str, int, str]]:
    """(relative name, size, content digest) of every fingerprinted file under ``root``, sorted by name."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            file = Path(dirpath) / name
            if name.startswith(".") or not name.endswith(WEIGHT_SUFFIXES) or not file.is_file():
                continue
            out.append((file.relative_to(root).as_posix(), file.stat().st_size, _file_digest(file)))
    return sorted(out)


_lock = threading.Lock()
_memory: dict[str, str] = {}
_store: tuple[int, str, sqlite3.Connection | None] | None = None
"""This process's connection to the digest store: (pid, store path, connection or None when it cannot be opened)."""


def _cache_file() -> Path:
    from brrm.embedded import _cache_root

    return _cache_root(None) / "fingerprints.sqlite"


def _digests() -> sqlite3.Connection | None:
    """The digest store's connection, opened once per process and cache folder (a forked child opens its own: a
    SQLite connection must not cross a fork); None when it cannot be opened (digests then stay in memory). Call
    with ``_lock`` held."""
    import sqlite3  # here, not at brrm's import (about 5 ms)

    global _store
    path = str(_cache_file())
    if _store is None or _store[:2] != (os.getpid(), path):
        conn: sqlite3.Connection | None = None
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            opened = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
            opened.execute("CREATE TABLE IF NOT EXISTS digests (file TEXT PRIMARY KEY, sha256 TEXT NOT NULL)")
            conn = opened
        except (sqlite3.Error, OSError):
            pass
        _store = (os.getpid(), path, conn)
    return _store[2]


def _file_digest(file: Path) -> str:
    """sha256 of ``file``'s content, cached by (real path, size, mtime_ns, ctime_ns, inode) in memory and on disk; a
    Hugging Face cache LFS blob (``blobs/<64 hex>``) is named by that sha256, which is taken without a read."""
    real = file.resolve()
    if real.parent.name == "blobs" and len(real.name) == 64 and all(c in "0123456789abcdef" for c in real.name):
        return real.name  # a Hugging Face cache LFS blob is named by the sha256 of its content
    st = real.stat()
    key = f"{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
    import sqlite3

    with _lock:
        if key not in _memory and (store := _digests()) is not None:
            with contextlib.suppress(sqlite3.Error):  # an unreadable store is a miss
                row = store.execute("SELECT sha256 FROM digests WHERE file = ?", (key,)).fetchone()
                if row is not None:
                    _memory[key] = str(row[0])
        if key in _memory:
            return _memory[key]
    with real.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    with _lock:
        _memory[key] = digest
        if (store := _digests()) is not None:
            with contextlib.suppress(sqlite3.Error):  # a store that cannot be written skips the entry
                store.execute("INSERT OR REPLACE INTO digests VALUES (?, ?)", (key, digest))
    return digest


def _hub_commit(name: str) -> str:
    """The commit a hub id resolves to: from the local cache, else the hub; ``unresolved`` when neither answers."""
    cached = hub_file(name)
    if cached is not None and "snapshots" in cached.parts:
        return cached.parts[cached.parts.index("snapshots") + 1]
    if hub_offline():
        return "unresolved"
    try:
        from huggingface_hub import HfApi

        sha = HfApi().model_info(name, timeout=10).sha
    except Exception:  # noqa: BLE001 - an unreachable hub leaves the commit unknown; loading names the cure
        return "unresolved"
    return sha or "unresolved"


def hub_file(name: str, filename: str = "config.json") -> Path | None:
    """``filename`` of hub id ``name`` in the local Hugging Face cache (its snapshot's copy); None when it is not
    cached, or the cache cannot be read (never touches the network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, filename)
    except Exception:  # noqa: BLE001 - a broken cache only means "not cached"
        return None
    return Path(cached) if isinstance(cached, str) else None


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` tells brrm not to reach the Hugging Face Hub (``1``, ``true``, ``yes`` or ``on``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
