"""Robustness probes: how far does a cheap manipulation of a response move the judge?

* :mod:`~brrm.probes.variants` — the manipulations (length, authority, self-praise, format, injection, position);
* :mod:`~brrm.probes.run` — judging originals and variants with the same sampler streams, flip rates and reward
  shifts with seeded bootstrap intervals (:func:`run_probes`).
"""

from __future__ import annotations

from brrm.probes.run import Interval, ProbeFigures, ProbeItem, ProbeReport, bootstrap, probe_cost, run_probes
from brrm.probes.variants import PROBES, Probe, parse_probes

__all__ = ["PROBES", "Interval", "Probe", "ProbeFigures", "ProbeItem", "ProbeReport", "bootstrap", "parse_probes",
           "probe_cost", "run_probes"]
