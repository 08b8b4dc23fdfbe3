"""Per-item seeds: a result depends only on the record, the options and the seed.

A sampler stream is seeded from the base seed and a stable key of the item — never from its position in a
batch, its chunk, or what else was judged — so the same record gives the same output at batch size 1 or 8,
in any order, with or without its neighbours. The key holds the item's id and content hash, the
presentation order (a swapped pair is different content), the turn, the attempt and the sample index of
self-consistency voting, so turn 1 and turn 2 (a retry, and each of k voted samples) draw from different
streams.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 63
"""Seeds are in [0, 2**63): valid for torch generators, vLLM and OpenAI-compatible servers."""


def content_key(*parts: str) -> str:
    """sha256 (hex) over text parts, each NUL-terminated: a stable key of an item's content."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


def item_seed(base: int, key: str, *, stream: str = "", attempt: int = 0, sample: int = 0) -> int:
    """The seed of one sampler stream of one item, in [0, 2**63).

    Args:
        base: the user's seed (``SamplingConfig.seed``).
        key: the item's stable key (e.g. its id and :func:`content_key`).
        stream: which stream (``turn1``, ``turn2``, ``judgement``, …).
        attempt: 0 for the first run, k for the k-th retry.
        sample: the sample index of self-consistency voting, >= 0; sample 0 is the stream of an unvoted
            judgment (its seed is the one every earlier release derived), sample s > 0 adds ``s`` to the key.
    """
    tail = f"\0sample{sample}" if sample else ""
    text = f"{base}\0{key}\0{stream}\0{attempt}{tail}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") & ((1 << SEED_BITS) - 1)


def retry_id(item_id: str, failed_seed: int | None) -> str:
    """The id a resumed run judges a sampled item under when its earlier result failed to parse or was truncated:
    ``<id>#retry:<seed of that failed attempt>`` (``#retry:0`` when the failed result recorded no seed).

    Sampler streams derive from the id (:func:`item_seed`), so the retry draws new streams — it can differ —
    while staying a function of the record, the options and the earlier outcome (a second resume of a second
    failure moves on again). Surfaces put the record's own id back on the result; its ``provenance.seed`` is the
    retry's seed.
    """
    return f"{item_id}#retry:{int(failed_seed or 0)}"


def failed_seed(result: object) -> int | None:
    """The ``provenance.seed`` of a stored result dict (None where it recorded none)."""
    if not isinstance(result, dict):
        return None
    prov = result.get("provenance")
    seed = prov.get("seed") if isinstance(prov, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
