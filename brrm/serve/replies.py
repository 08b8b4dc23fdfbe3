"""Reply bodies of the judging routes: the model and provenance blocks once per reply, items carrying only what
differs (FastAPI validates the reply against its response model and encodes it with pydantic).

Wire format (``/v1/judge``, ``/v1/score``, ``/v1/rank``)::

    {"model": {...judge info, "model": "<hub id or folder name>"},
     "provenance": {"model", "backend", "template_hash", "decoding", ...}, # and every field equal in all items
     "judgments" | "rewards" | "result": ...}                           # each item's "provenance": its seed and
                                                                        # the fields whose values differ

A field is left out of an item's ``provenance`` only when its value equals the reply's; a differing one stays, and
so does each item's ``seed``. A client gets an item's full provenance as ``{**reply["provenance"],
**item["provenance"]}`` (what :class:`~brrm.service.remote.RemoteJudge` does).
Model names are public: a local folder is named by its last component, never by its absolute path.
Non-finite floats are written as ``null`` (pydantic's default; the item's ``status`` says why).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from brrm.service.remote import result_nodes
from brrm.types.jsonvalue import JSONDict, JSONValue

SHARED = ("model", "backend", "template_hash", "decoding")
"""Provenance fields every reply block carries (equal for every item of one judge call)."""
PER_ITEM = ("seed",)
"""Provenance fields that stay with each item even when every item's value is the same (a record's own)."""


def public_name(model: str) -> str:
    """The name a reply shows for ``model``: a hub id as is; a local folder (absolute, relative or existing path)
    by its last path component, so a reply never reveals the server's file system."""
    text = str(model)
    if os.path.isabs(text) or text.startswith(("./", "../", "~")) or (os.sep in text and Path(text).exists()):
        return Path(text.rstrip("/\\")).name or text
    return text


class Result(Protocol):
    """A typed result (:class:`~brrm.PairwiseJudgment`, :class:`~brrm.ScalarReward`, :class:`~brrm.GroupResult`)."""

    def to_dict(self) -> JSONDict: ...


def shared_provenance(items: Sequence[JSONDict]) -> JSONDict | None:
    """The reply-level provenance block: the :data:`SHARED` fields of the first provenance (with the model's public
    name), and every other field whose value is the same in every provenance of the reply (nested ones included:
    swap sub-judgments, a group's rewards), but :data:`PER_ITEM`; None when no item has a provenance."""
    provs = [p for item in items for p in _provenances(item)]
    if not provs:
        return None
    first = {**provs[0], "model": public_name(str(provs[0].get("model")))}
    shared = {k: first.get(k) for k in SHARED}
    for key, value in first.items():
        if key not in shared and key not in PER_ITEM and all(key in p and p[key] == value for p in provs[1:]):
            shared[key] = value
    return shared


def _provenances(node: JSONValue) -> list[JSONDict]:
    """Every ``provenance`` dict in a result dict (its own, then its sub-results', depth first)."""
    provs = [n.get("provenance") for n in result_nodes(node)]
    return [p for p in provs if isinstance(p, dict)]


def compact(node: JSONValue, shared: JSONDict | None) -> JSONValue:
    """``node`` (a result dict) with each nested ``provenance`` reduced to what differs from ``shared``."""
    if shared is None:
        return node
    for result in result_nodes(node):
        prov = result.get("provenance")
        if isinstance(prov, dict):
            own = {**prov, "model": public_name(str(prov.get("model")))}
            result["provenance"] = {k: v for k, v in own.items() if k not in shared or shared[k] != v}
    return node


def reply(model: JSONDict, field: str, results: Sequence[Result] | Result) -> JSONDict:
    """``{"model", "provenance", field: results}`` for a list of results (or one result), compacted."""
    many = isinstance(results, Sequence)
    items = [r.to_dict() for r in results] if isinstance(results, Sequence) else [results.to_dict()]
    shared = shared_provenance(items)
    for item in items:
        compact(item, shared)
    return {"model": model, "provenance": shared, field: list(items) if many else items[0]}
