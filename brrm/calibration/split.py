"""The fit / held-out split of a calibration: by content group, never by row, with digests of both sides.

A pair's **content group** (:func:`brrm.calibration.data.content_key`) is sha256 over its conversation and its two
responses, order-free: the same prompt and responses under two ids, or shown in either order, are one group. A
group goes to the held-out split when sha256 over (split seed, group key) falls below the held-out fraction
(:func:`brrm.calibration.fit.held_out`), so every row of a group — duplicates merged from two datasets, both orders
of a swapped pair — lands on one side for every seed, and a group keeps its side whatever else the file holds.

A split with fewer than :data:`MIN_GROUPS` groups on either side is refused: with so few distinct pairs the
held-out ECE over 10 bins says little more than how many bins are occupied, and the fit can sit on its search
bound. :func:`rows_digest` names the rows each side holds (written to ``calib.json``), and the fit's group keys are
kept (up to :data:`MAX_KEPT_GROUPS`) so that applying the calibration to data it was fitted on can be said
(:func:`overlap`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from brrm.calibration.data import Observation
from brrm.calibration.fit import held_out
from brrm.errors import ConfigError
from brrm.types.jsonvalue import record

MIN_GROUPS = 5
"""Fewest content groups (distinct pairs) each side of a split must hold."""

KEY_CHARS = 16
"""Hex characters of a group key kept in ``calib.json`` (64 bits: no collision among a few million pairs)."""

MAX_KEPT_GROUPS = 100_000
"""Most fit-group keys ``calib.json`` keeps (about 1.9 MB); beyond that only the digests are written and overlap
with later data cannot be told."""


def rows_digest(rows: Sequence[Observation]) -> str:
    """sha256 (64 hex) over the sorted (group, z, y) of a side's observations: equal rows give equal digests."""
    lines = sorted(f"{o.key}\t{o.z!r}\t{o.y}" for o in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class Split:
    """The two sides of a calibration's data.

    Attributes:
        fit, heldout: the observations of each side (both orders of a swapped pair are two observations).
        fit_groups, heldout_groups: the content groups of each side, sorted (no group is on both).
    """

    fit: tuple[Observation, ...]
    heldout: tuple[Observation, ...]
    fit_groups: tuple[str, ...]
    heldout_groups: tuple[str, ...]

    def to_dict(self, seed: int, fraction: float) -> dict[str, object]:
        """What ``calib.json`` records of the split: seed, fraction, sizes in groups and observations, digests and
        (up to :data:`MAX_KEPT_GROUPS`) the fit's and held-out's group keys (first :data:`KEY_CHARS` hex)."""
        return split_record(self.fit_groups, self.heldout_groups, seed, fraction, unit="observations",
                            counts=(len(self.fit), len(self.heldout)),
                            digests=(rows_digest(self.fit), rows_digest(self.heldout)))


def split_record(fit_groups: Sequence[str], held_groups: Sequence[str], seed: int, fraction: float, *, unit: str,
                 counts: tuple[int, int], digests: tuple[str, str]) -> dict[str, object]:
    """A split as a fit file records it (``calib.json``, a cascade fit): seed, fraction, sizes in groups and in
    ``unit`` (``counts``: fit, held-out), the sides' ``digests`` and (up to :data:`MAX_KEPT_GROUPS`) their group keys
    (first :data:`KEY_CHARS` hex)."""
    keep = len(fit_groups) + len(held_groups) <= MAX_KEPT_GROUPS
    return {"by": "content group (sha256 of the conversation and both responses, order-free)", "seed": seed,
            "heldout_fraction": fraction, "fit_groups": len(fit_groups), "heldout_groups": len(held_groups),
            f"fit_{unit}": counts[0], f"heldout_{unit}": counts[1], "fit_digest": digests[0],
            "heldout_digest": digests[1], "min_groups_per_side": MIN_GROUPS,
            "fit_group_keys": [g[:KEY_CHARS] for g in fit_groups] if keep else None,
            "heldout_group_keys": [g[:KEY_CHARS] for g in held_groups] if keep else None}


def sides(keys: Iterable[str], seed: int, fraction: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(fit groups, held-out groups) of the distinct group ``keys``, each sorted.

    Args:
        keys: group keys (:func:`brrm.calibration.data.content_key`; repeats are one group).
        seed: the split seed (any int).
        fraction: the held-out fraction of groups, in (0, 1).

    Raises:
        ConfigError: when either side holds fewer than :data:`MIN_GROUPS` groups, naming both sizes (``brrm
            calibrate`` checks records this way before any pair is judged).
    """
    groups = sorted(set(keys))
    fit = tuple(g for g in groups if not held_out(g, seed, fraction))
    held = tuple(g for g in groups if held_out(g, seed, fraction))
    if len(fit) < MIN_GROUPS or len(held) < MIN_GROUPS:
        raise ConfigError(
            f"{len(groups)} distinct pairs split into {len(fit)} fit / {len(held)} held-out "
            f"(--heldout {fraction}, --split-seed {seed}); each side needs at least {MIN_GROUPS} distinct pairs: "
            "give more labelled pairs or change --heldout")
    return fit, held


def split(observations: Sequence[Observation], seed: int, fraction: float) -> Split:
    """Split observations by content group (each :attr:`Observation.key` is a group key).

    Args:
        observations: labelled observations keyed by their pair's :func:`brrm.calibration.data.content_key`.
        seed: the split seed (any int).
        fraction: the held-out fraction of groups, in (0, 1).

    Raises:
        ConfigError: when either side holds fewer than :data:`MIN_GROUPS` groups (:func:`sides`).
    """
    fit_groups, heldout_groups = sides((o.key for o in observations), seed, fraction)
    out = set(heldout_groups)
    return Split(tuple(o for o in observations if o.key not in out), tuple(o for o in observations if o.key in out),
                 fit_groups, heldout_groups)


@dataclass(frozen=True)
class Overlap:
    """How much of the data a calibration is applied to it was fitted on.

    Attributes:
        pairs: pairs the calibration was applied to.
        in_fit, in_heldout: of those, how many are content groups of its fit / held-out split (0 when unknown).
        known: False when the calibration kept no group keys (``reason`` says why); the counts are then 0 and
            say nothing.
        reason: why the overlap is unknown (empty when known).
    """

    pairs: int
    in_fit: int
    in_heldout: int
    known: bool
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict of the fields (the audit summary's ``calibration_overlap``)."""
        return dict(record(self))

    def sentence(self) -> str:
        """One line for reports: ``"3 of 40 pairs were in the calibration's fit split …"``."""
        if not self.known:
            return f"whether these pairs were in the calibration's fit split is unknown: {self.reason}"
        return (f"{self.in_fit} of {self.pairs} pairs were in the calibration's fit split and {self.in_heldout} in "
                "its held-out split" + (": probabilities of pairs it was fitted on look better calibrated than "
                                        "they will on new data" if self.in_fit else ""))


def overlap(details: Mapping[str, object], keys: Sequence[str]) -> Overlap:
    """How many of ``keys`` (content keys of data a calibration is applied to) were in its fit / held-out split.

    Args:
        details: a calibration's ``details`` (``calib.json``'s split record).
        keys: :func:`brrm.calibration.data.content_key` of each pair the calibration is applied to.
    """
    record = details.get("split")
    fit = record.get("fit_group_keys") if isinstance(record, Mapping) else None
    held = record.get("heldout_group_keys") if isinstance(record, Mapping) else None
    if not isinstance(fit, list) or not isinstance(held, list):
        why = ("the calibration file keeps no group keys (written by an older brrm, or fitted on more than "
               f"{MAX_KEPT_GROUPS} pairs)")
        return Overlap(len(keys), 0, 0, False, why)
    fit_set, held_set = {str(k) for k in fit}, {str(k) for k in held}
    short = [k[:KEY_CHARS] for k in keys]
    return Overlap(len(short), sum(k in fit_set for k in short), sum(k in held_set for k in short), True)
