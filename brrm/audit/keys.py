"""Keys of the audit store: what an item is, what judged it, and what was asked for.

* :func:`item_hash` — sha256 of an item's normalized record (shape, id, conversation, responses, principle,
  reference, label) as canonical JSON. The id is part of it because a judge's per-item seed derives from the
  id and the content (:mod:`brrm.seeds`), so the same text under another id is another result.
* :func:`config_hash` — sha256 of the judge's :class:`~brrm.types.JudgeInfo` (model, kind, recipe, backend,
  template hashes, every resolved option including the seed and sampling) and the audit options that change
  a result (the group strategy), and the weights' fingerprint. ``chunk_size`` is left out (a result never
  depends on batching), and so is the spec (the request; equal judges from differently spelled requests share
  their results).
* :func:`request_hash` — sha256 of what the user asked for (model argument, ``brrm.load`` options, shape,
  strategy) and a fingerprint of the model's files. The store remembers which configuration a request
  produced, so a rerun can tell what is left to do without loading the model; results are always stored
  under the configuration of the judge that actually produced them.

A stored result is found by ``(item_hash, config_hash)``: a changed configuration is a new key, never a
stale reuse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from brrm.types import JudgeInfo


def canonical_json(value: object) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def sha256_text(text: str) -> str:
    """sha256 (64 hex chars) of a string encoded as UTF-8 (lone surrogates kept)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def item_hash(record: Mapping[str, object]) -> str:
    """The content hash of a normalized record (see :func:`brrm.audit.plan.normalize`); 64 hex chars."""
    return sha256_text(canonical_json(dict(record)))


def config_hash(info: JudgeInfo | Mapping[str, object], *, shape: str, strategy: str | None = None) -> str:
    """The hash of a judge configuration and the result-changing audit options; 64 hex chars.

    Args:
        info: the judge's ``info`` (or its ``to_dict()``).
        shape: ``pairs``, ``single`` or ``groups`` (the same judge audits each shape differently).
        strategy: the group ranking strategy (groups only), already resolved from ``auto``.
    """
    data = dict(info.to_dict() if isinstance(info, JudgeInfo) else info)
    data.pop("chunk_size", None)
    data.pop("spec", None)  # how it was asked for; the fingerprint of the weights stays in the key
    return sha256_text(canonical_json({"judge": data, "shape": shape, "strategy": strategy}))


def request_hash(model: str | None, options: Mapping[str, object], *, shape: str, strategy: str | None) -> str:
    """The hash of a request: model argument, ``brrm.load`` options, shape, strategy and the model's files.

    Args:
        model: what was passed to ``brrm.load`` (None: the embedded demo model).
        options: the keyword options passed to ``brrm.load`` (JSON-ready values).
        shape, strategy: as in :func:`config_hash`.
    """
    return sha256_text(canonical_json({"model": model, "options": dict(options), "shape": shape,
                                       "strategy": strategy, "files": model_fingerprint(model)}))


def model_fingerprint(model: str | None) -> list[str]:
    """What identifies the weights ``model`` names: :func:`brrm.fingerprint.weights_fingerprint` (content digests of
    a local folder's weight, config and tokenizer files, cached by path, size, mtime, ctime and inode; a hub id's
    resolved commit; the embedded GGUF's digest), so weights overwritten in place or a switched symlink make
    another request, while an unchanged 60 GB checkpoint is not read again."""
    from brrm.fingerprint import weights_fingerprint

    return [weights_fingerprint(model)]

