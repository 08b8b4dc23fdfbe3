"""Checkpoint identity by content: a renamed copy of a known checkpoint is known by its files, not its name.

A known checkpoint (:data:`brrm.recipes.KNOWN`) is told by its hub id, by the folder name of a local copy, or by
its ``config.json`` (:data:`brrm.recipes.IDENTITIES`). A generative checkpoint (BR-RM, the principle models) has
its base model's config, so neither tells a renamed copy of it; its *content* does: the folder fingerprint of
:func:`brrm.fingerprint.weights_fingerprint` (sha256 over every weight, config and tokenizer file, by relative name,
size and content digest). brrm learns that fingerprint from the hub snapshot itself: loading a known checkpoint
by its hub id records the fingerprint of its snapshot folder in the local Hugging Face cache (LFS blobs are named
by their sha256, so nothing is read twice) in ``identities.json`` under the brrm cache folder
(``BRRM_CACHE_DIR``), and any folder with that fingerprint is then that checkpoint. A folder *named* like a known
checkpoint never teaches an identity (its name is no proof of its content).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Container
from pathlib import Path

IDENTITY_FILE = "identities.json"
"""File under the brrm cache folder: ``{"dir:<fingerprint>": "<known hub id>"}``."""


def _file() -> Path:
    from brrm.embedded import _cache_root

    return _cache_root(None) / IDENTITY_FILE


def learned() -> dict[str, str]:
    """The fingerprints learned so far -> the known hub id (lower-case) each is; {} when none (or unreadable)."""
    return read_table(_file())


def content_identity(model: str) -> str | None:
    """The known hub id (lower-case) a local folder is by its content, or None (not a folder, or no learned
    fingerprint matches). Only fingerprints when something was learned, so an unknown folder costs no read."""
    table = learned()
    path = Path(os.path.expanduser(model))
    if not table or not path.is_dir():
        return None
    from brrm.fingerprint import weights_fingerprint

    return table.get(weights_fingerprint(str(path)))


def snapshot_folder(hub_id: str) -> Path | None:
    """The local Hugging Face cache's snapshot folder of ``hub_id`` (the one ``config.json`` resolves to), or
    None when it is not cached."""
    from brrm.fingerprint import hub_file

    cached = hub_file(hub_id)
    return cached.parent if cached is not None else None


def remember(hub_id: str, folder: Path, known: Container[str]) -> str | None:
    """Record ``folder``'s fingerprint as the known checkpoint ``hub_id`` (an exact key of ``known``, the caller's
    :data:`brrm.recipes.KNOWN`, any case); the fingerprint, or None when ``hub_id`` is not known or the table
    cannot be written (then nothing is learned)."""
    from brrm.fingerprint import weights_fingerprint

    key = hub_id.lower()
    if key not in known or not folder.is_dir():
        return None
    fingerprint = weights_fingerprint(str(folder))
    return fingerprint if add_to_table(_file(), fingerprint, key, indent=1) else None


def learn_from_hub(hub_id: str, known: Container[str]) -> str | None:
    """:func:`remember` a known checkpoint loaded by its hub id, from its snapshot in the local cache (None when
    ``hub_id`` is not a key of ``known`` or is not cached)."""
    if hub_id.lower() not in known:
        return None
    folder = snapshot_folder(hub_id)
    return remember(hub_id, folder, known) if folder is not None else None


def read_table(path: Path) -> dict[str, str]:
    """The JSON object of strings in ``path`` (the identity table); {} when it is missing, unreadable or not an
    object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def add_to_table(path: Path, key: str, value: str, *, indent: int | None = None) -> bool:
    """Add one entry to the table in ``path`` (read, merge, atomic replace); False when it cannot be written (the
    entry is then skipped)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({**read_table(path), key: value}, sort_keys=True, indent=indent), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return False
    return True
