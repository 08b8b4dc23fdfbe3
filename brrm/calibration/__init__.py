"""Calibrated probabilities: fit a temperature for P(A ≻ B) on labelled pairs, measure, apply.

* :mod:`brrm.calibration.fit` — ECE / Brier / log loss (:func:`measure`), the temperature fit, the seeded split;
* :mod:`brrm.types.calibration` — the :class:`Calibration` a ``calib.json`` holds, its hash, reading/writing (a
  value below the door, which reads it);
* :mod:`brrm.compose.calibrated` — a judge whose every P(A ≻ B) is calibrated (``brrm.load(..., calibration=)``
  composes it);
* :mod:`brrm.calibration.data` — labelled observations from judged records; :mod:`brrm.calibration.report` —
  the reliability diagram (matplotlib) and the HTML report.
"""

from brrm.calibration.fit import Metrics, fit_temperature, measure
from brrm.types.calibration import Calibration, read_calibration, write_calibration

__all__ = ["Calibration", "Metrics", "fit_temperature", "measure", "read_calibration", "write_calibration"]
