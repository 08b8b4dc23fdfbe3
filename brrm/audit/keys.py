"""Keys of the audit store: what an item is, what judged it, and what was asked for.

* :func:`item_hash` — sha256 of an item's normalized record (shape, id, conversation, responses, principle,
  reference, label) as canonical JSON. The id is part of it because a judge's per-item seed derives from the
  id and the content (:mod:`brrm.seeds`), so the same text under another id is another result.
* :func:`config_hash` — sha256 of the judge's :class:`~brrm.types.JudgeInfo` (model, kind, recipe, backend,
  template hashes, every resolved option including the seed and sampling) and the audit options that change
  a result (the group strategy), and the weights' fingerprint. ``chunk_size`` is left out (a result never
  depends on batching), and so is the spec (the request; equal judges from differently spelled requests share
  their results).
* :func:`request_hash` — sha256 of what the user asked for: the :class:`~brrm.JudgeSpec` (model argument,
  ``brrm.load`` options and the weights' fingerprint it carries), shape and strategy. The store remembers which
  configuration a request produced, so a rerun can tell what is left to do without loading the model; results
  are always stored under the configuration of the judge that actually produced them.

A stored result is found by ``(item_hash, config_hash)``: a changed configuration is a new key, never a
stale reuse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from brrm.types import JudgeInfo, JudgeSpec


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


def request_hash(spec: JudgeSpec, *, shape: str, strategy: str | None) -> str:
    """The hash of a request: the :class:`~brrm.JudgeSpec` it was given (model argument, kind, backend,
    ``brrm.load`` options and the weights' fingerprint the spec carries, :mod:`brrm.fingerprint`), shape and
    strategy. The spec's own fingerprint is used as it is, never recomputed from the model path: weights
    overwritten in place make a spec with another fingerprint, hence another request (and ``JudgeSpec.load``
    refuses a spec whose weights changed since it was made).

    Args:
        spec: what the run was asked to judge with.
        shape, strategy: as in :func:`config_hash`.
    """
    return sha256_text(canonical_json({"spec": spec.to_dict(), "shape": shape, "strategy": strategy}))
