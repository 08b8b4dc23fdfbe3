"""A fitted calibration: the file ``brrm calibrate`` writes and ``brrm.load(..., calibration=PATH)`` applies (a
value every layer may hold: the door reads it, :mod:`brrm.compose.calibrated` applies it, :mod:`brrm.calibration`
fits it).

``calib.json`` holds ``format`` (:data:`FORMAT`), ``kind`` (``pairwise`` or ``scalar``), ``temperature`` T > 0
(P = σ(z / T)), ``scale`` = 1/T (how a scalar model's σ(s·(r_A − r_B)) reads it), ``fit_on`` (what z is), the
model it was fitted for, the split (seed, held-out fraction, counts) and the metrics before and after on both
splits. Its identity is :attr:`Calibration.hash`: sha256 over the canonical JSON of kind and temperature (the
numbers that change a result), first 16 hex digits; every calibrated result records it in
``provenance.calibration`` next to its raw probability (``p_a_raw``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from brrm.errors import ConfigError
from brrm.numerics import sigmoid
from brrm.types.results import PairwiseJudgment

EPS = 1e-12
"""Probabilities are clipped to [EPS, 1 − EPS] for log loss and for logit(p)."""

KINDS = ("pairwise", "scalar")
"""What a calibration calibrates: a pairwise judge's verdict probability, or a scalar model's σ(r_A − r_B)."""


def logit(p: float) -> float:
    """ln(p / (1 − p)) with p clipped to [EPS, 1 − EPS] (finite for p in [0, 1])."""
    p = min(max(p, EPS), 1.0 - EPS)
    return math.log(p / (1.0 - p))


def check_kind(kind: str) -> str:
    """``kind`` if it is ``pairwise`` or ``scalar``.

    Raises:
        ConfigError: otherwise.
    """
    if kind not in KINDS:
        raise ConfigError(f"calibration kind {kind!r} is not valid; expected one of {', '.join(KINDS)}")
    return kind


FORMAT = "brrm-calibration/1"
FIT_ON = {"pairwise": "logit(p_a) = logit_1 - logit_2 (verdict-digit logits of each ordered judgment)",
          "scalar": "logit(p_a) = r_A - r_B (reward difference)"}
"""What z is, per kind (stored in the file)."""


@dataclass(frozen=True)
class Calibration:
    """A temperature for P(A ≻ B).

    Attributes:
        kind: ``pairwise`` (BR-RM's verdict probability) or ``scalar`` (σ(r_A − r_B)).
        temperature: T > 0, finite; P_calibrated = σ(logit(P_raw) / T).
        model: the model id it was fitted on ("" when unknown).
        details: split, counts and metrics as written by ``brrm calibrate`` (JSON-ready).

    Raises:
        ConfigError: for another kind or a temperature that is not a finite positive number.
    """

    kind: str
    temperature: float
    model: str = ""
    details: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_kind(self.kind)
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ConfigError(f"calibration temperature must be a finite number > 0, got {t!r}")

    @property
    def scale(self) -> float:
        """1 / T: the factor on r_A − r_B of a scalar model."""
        return 1.0 / self.temperature

    @property
    def hash(self) -> str:
        """sha256 (hex, first 16) over the canonical JSON of kind and temperature."""
        key = json.dumps({"kind": self.kind, "temperature": self.temperature}, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def probability(self, p_raw: float) -> float:
        """σ(logit(p_raw) / T); NaN stays NaN."""
        return p_raw if math.isnan(p_raw) else sigmoid(logit(p_raw) / self.temperature)

    def apply(self, j: PairwiseJudgment) -> PairwiseJudgment:
        """The judgment with ``p_a`` calibrated, the raw one in ``p_a_raw`` and the hash in its provenance
        (sub-judgments too; a swap judgment's P is the mean of its calibrated orders, as
        :func:`brrm.compose.combine` forms it). A judgment without a probability keeps NaN; an already
        calibrated one is refused.

        Raises:
            ConfigError: when ``j`` already carries a calibration.
        """
        if j.provenance is not None and j.provenance.calibration:
            raise ConfigError(f"judgment {j.id!r} is already calibrated ({j.provenance.calibration})")
        prov = replace(j.provenance, calibration=self.hash) if j.provenance is not None else None
        subs = tuple(self.apply(s) for s in j.sub_judgments)
        p_a = (subs[0].p_a + subs[1].p_a) / 2 if len(subs) == 2 else self.probability(j.p_a)  # swap: mean of orders
        return replace(j, p_a=p_a, p_a_raw=j.p_a, provenance=prov, sub_judgments=subs)

    def to_dict(self) -> dict[str, object]:
        return {"format": FORMAT, "kind": self.kind, "temperature": self.temperature, "scale": self.scale,
                "fit_on": FIT_ON[self.kind], "model": self.model, "hash": self.hash, **dict(self.details)}


def read_format_file(path: str | os.PathLike[str], what: str, fmt: str, writer: str) -> dict[str, object]:
    """The JSON object of a file whose ``format`` is ``fmt`` (a calibration's, a cascade fit's).

    Args:
        path: the file; what: its name in errors (``calibration``); writer: the command that writes one.

    Raises:
        ConfigError: naming the path when it is missing, not JSON, not an object, or of another format.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist (write one with `{writer}`)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise ConfigError(f"{what} {str(path)!r} is not a {fmt} file (format {data.get('format')!r})"
                          if isinstance(data, dict) else f"{what} {str(path)!r} is not a JSON object")
    return data


def read_calibration(path: str | os.PathLike[str]) -> Calibration:
    """The calibration in a ``calib.json``.

    Raises:
        ConfigError: naming the path when it is missing, not JSON, not a brrm calibration, or invalid.
    """
    data = read_format_file(path, "calibration", FORMAT, "brrm calibrate")
    details = {k: v for k, v in data.items() if k not in ("format", "kind", "temperature", "scale", "fit_on",
                                                          "model", "hash")}
    temperature = data.get("temperature")
    try:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            check_kind(str(data.get("kind", "")))
            raise ConfigError(f"calibration temperature must be a finite number > 0, got {temperature!r}")
        return Calibration(str(data.get("kind", "")), temperature, str(data.get("model", "")), details)
    except ConfigError as exc:
        raise ConfigError(f"calibration {str(path)!r}: {exc}") from None


def write_calibration(path: str | os.PathLike[str], calibration: Calibration) -> None:
    """Write ``calib.json``."""
    text = json.dumps(calibration.to_dict(), indent=1, ensure_ascii=False, allow_nan=False)
    Path(path).expanduser().write_text(text + "\n", encoding="utf-8")
