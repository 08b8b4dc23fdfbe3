"""How a benchmark presents each pair to a judge: the order policies, the seeded random order per comparison, and
the official evaluation's order sequence (re-exported by :mod:`brrm.bench.core`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from brrm.errors import ConfigError
from brrm.types.config import check_choice
from brrm.types.jsonvalue import JSONValue


class Presentable(Protocol):
    """What an order policy reads of an item (:class:`brrm.bench.core.BenchItem`): its id, pairs and meta."""

    @property
    def id(self) -> str: ...

    @property
    def pairs(self) -> Sequence[object]: ...

    @property
    def meta(self) -> Mapping[str, JSONValue]: ...

ORDER_POLICIES = ("both", "given", "random", "sequence")
"""How a benchmark presents each pair: ``both`` orders (each judged, each scored), the ``given`` order only, one
order drawn at ``random`` once per pair from the order seed (:func:`random_swap`), or the official evaluation's
``sequence``: the order its script drew for that pair from one seeded sequence in dataset order, which the
benchmark's loader stores per item under :data:`SEQUENCE_KEY` (:func:`sequence_swaps`)."""

SEQUENCE_KEY = "sequence_swaps"
"""Item meta key: one 0/1 per pair, 1 where the official script showed the pair swapped (``j`` first)."""

OFFICIAL_SEED = 42
"""The seed of the released BR-RM evaluation's order draws: ``set_seed(config["eval"]["seed"])`` in
``examples/run_eval_brrm.py`` ``main()`` with ``seed: 42`` in ``examples/configs/evals/brrm_eval.yaml``, after the
module-level ``random.seed(42)`` of ``nemo_rl/data/hf_datasets/reward_benchmarks.py`` (YzjiaoNvd/BR-RM @
``d20a4e0``); ``set_seed`` (``nemo_rl/algorithms/utils.py``) seeds ``random`` and ``numpy.random`` alike. Caveat:
at that commit ``setup_data`` names ``RewardBench2Dataset`` and ``LocalDataset``, which the script never imports,
so it stops with a NameError before any draw; the published runs came from a version that differs at least there.
Both seeds say 42 for the first draw, assuming nothing between the seed and the data (``init_ray``,
``get_tokenizer``) draws from ``random``."""


def sequence_swaps(counts: Sequence[int], seed: int = OFFICIAL_SEED) -> list[list[JSONValue]]:
    """The official orders of a dataset: per record (in dataset order) ``n`` draws of
    ``random.choice([0, 1])`` from one ``random.seed(seed)`` sequence (1 = the pair is shown swapped).

    Args:
        counts: the number of pairs each record makes, in the order the official script formats them
            (RewardBench: 1 per row; RM-Bench: 9 per prompt, chosen style outer, rejected style inner).

    Returns:
        One list of 0/1 per record. ``random.Random(seed).choice`` draws exactly what the global ``random.choice``
        does after ``random.seed(seed)`` (one Mersenne Twister, ``_randbelow(2)`` per draw).
    """
    import random

    rng = random.Random(seed)
    return [[rng.choice([0, 1]) for _ in range(n)] for n in counts]


def random_swap(seed: int, item_id: str, pair: int) -> bool:
    """Whether pair ``pair`` of item ``item_id`` is shown swapped, drawn once from the order seed.

    A fair coin from sha256 over (seed, item id, pair index): the same record gets the same order in any batch,
    chunk or subset selection (official scripts draw from an unseeded or shared global RNG instead, so their
    orders cannot be reproduced; the *rule*, one random order per comparison, is theirs).
    """
    digest = hashlib.sha256(f"{seed}\0{item_id}\0{pair}".encode("utf-8", "surrogatepass")).digest()
    return bool(digest[0] & 1)


def _sequence_swap(item: Presentable, pair: int) -> bool:
    swaps = item.meta.get(SEQUENCE_KEY)
    if not isinstance(swaps, list) or len(swaps) != len(item.pairs) or swaps[pair] not in (0, 1):
        raise ConfigError(f"item {item.id!r} has no official presentation order ({SEQUENCE_KEY!r} in its meta): "
                          "orders 'sequence' need a benchmark loader that draws the official sequence")
    return swaps[pair] == 1


def presentations(policy: str, item: Presentable, *, seed: int = 0) -> list[tuple[int, bool]]:
    """The (pair, swapped) presentations an item's pairs get under an order policy.

    Raises:
        ConfigError: for a policy outside :data:`ORDER_POLICIES`, or ``sequence`` for an item without its official
            orders.
    """
    check_choice("order policy", policy, ORDER_POLICIES)
    out: list[tuple[int, bool]] = []
    for k in range(len(item.pairs)):
        if policy == "both":
            out += [(k, False), (k, True)]
        elif policy == "sequence":
            out.append((k, _sequence_swap(item, k)))
        else:
            out.append((k, random_swap(seed, item.id, k) if policy == "random" else False))
    return out
