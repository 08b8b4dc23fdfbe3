"""What composition adds around a judge's model (:mod:`brrm.compose`): swap, voting samples, a scalar model's tie
margin and default principles, a calibration — the :class:`Composition` half of a judge's typed settings
(:attr:`brrm.JudgeInfo.composition`; the model's own half is :attr:`brrm.JudgeInfo.config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from brrm.types.jsonvalue import JSONDict, JSONValue


@dataclass(frozen=True)
class Composition:
    """How a judge's model is composed into a :class:`~brrm.RewardJudge`.

    Attributes:
        swap: a pairwise judge's default: judge both presentation orders (disagreement is a tie); None for a
            scalar model, whose σ(r_A − r_B) does not depend on the order.
        samples: independent judgments per order under self-consistency voting, >= 1 (1: no voting).
        margin: a scalar model's tie margin in reward units (|r_A − r_B| <= margin is a tie), >= 0; None for a
            pairwise judge.
        on_tie: what a scalar model's tie becomes (``tie``, ``A`` or ``B``); None for a pairwise judge.
        principles: a principle model's default principles (its reward is their mean); () for none.
        calibration: the hash of the calibration applied to every P(A ≻ B) (``brrm calibrate``); "" for none.
        cascade: a judge cascade's rule and second judge (:mod:`brrm.compose.cascade`), as canonical JSON text (so a
            cascade's records never share a store key with its first judge's alone); "" for none.
    """

    swap: bool | None = None
    samples: int = 1
    margin: float | None = None
    on_tie: str | None = None
    principles: tuple[str, ...] = ()
    calibration: str = ""
    cascade: str = ""

    def to_dict(self) -> JSONDict:
        """The JSON entries a judge's records carry for these settings (under ``options``, beside the model's own):
        ``swap`` (pairwise judges), ``samples`` (only with voting), ``margin`` and ``on_tie`` (scalar models),
        ``principle``, ``calibration`` and ``cascade`` (each only when set)."""
        entries: JSONDict = {"swap": self.swap, "samples": self.samples if self.samples > 1 else None,
                             "margin": self.margin, "on_tie": self.on_tie, "principle": list(self.principles),
                             "calibration": self.calibration, "cascade": self.cascade}
        return {key: value for key, value in entries.items() if value is not None and value not in ("", [])}

    @classmethod
    def from_record(cls, options: Mapping[str, JSONValue]) -> Composition:
        """The composition a recorded ``options`` object (:meth:`to_dict`'s entries among the model's) describes;
        entries of the wrong type count as absent (a record from another program is read, never trusted)."""
        swap, samples, margin = options.get("swap"), options.get("samples"), options.get("margin")
        on_tie, principle, calibration = options.get("on_tie"), options.get("principle"), options.get("calibration")
        cascade = options.get("cascade")
        principles = ((principle,) if isinstance(principle, str) else
                      tuple(p for p in principle if isinstance(p, str)) if isinstance(principle, list) else ())
        return cls(swap=swap if isinstance(swap, bool) else None,
                   samples=samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0
                   else 1,
                   margin=float(margin) if isinstance(margin, int | float) and not isinstance(margin, bool) else None,
                   on_tie=on_tie if isinstance(on_tie, str) else None, principles=principles,
                   calibration=calibration if isinstance(calibration, str) else "",
                   cascade=cascade if isinstance(cascade, str) else "")
