"""Calibration figures of a pairwise audit: ECE, Brier score and log loss of P(A ≻ B) against the labels.

Over ok judgments with a measured P(A ≻ B) and a label ``A`` or ``B`` (ties and unlabelled rows are left out):
:func:`brrm.calibration.measure` (10 equal-width bins of P(A ≻ B)). When the judge was calibrated
(``provenance.calibration`` set), the raw probabilities (``p_a_raw``) are measured too, so the report shows
before and after side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from brrm.types import PairwiseJudgment, Verdict


def calibration_figures(judged: Sequence[PairwiseJudgment]) -> dict[str, object]:
    """``{"labelled": n, "measured": Metrics.to_dict(), "raw": Metrics.to_dict() or None, "calibration": hash,
    "against": m}``: ``m`` of the ``n`` judgments have a winner that is not their P(A ≻ B)'s more probable side."""
    from brrm.calibration import measure

    use = [j for j in judged if j.ok and math.isfinite(j.p_a) and j.label in (Verdict.A, Verdict.B)]
    y = [1 if j.label is Verdict.A else 0 for j in use]
    hashes = {j.provenance.calibration for j in use if j.provenance is not None} - {""}
    raw = None
    if hashes and all(math.isfinite(j.p_a_raw) for j in use):
        raw = measure([j.p_a_raw for j in use], y).to_dict()
    return {"labelled": len(use), "measured": measure([j.p_a for j in use], y).to_dict(), "raw": raw,
            "calibration": ", ".join(sorted(hashes)), "against": sum(_against(j) for j in use)}


def _against(j: PairwiseJudgment) -> bool:
    """Whether a judgment's winner is not the side its P(A ≻ B) makes more probable (a sampled verdict is one draw;
    a tie is against any P but 0.5): where the verdicts' accuracy and P(A ≻ B)'s can part."""
    side = Verdict.A if j.p_a > 0.5 else Verdict.B if j.p_a < 0.5 else Verdict.TIE
    return j.winner is not side
