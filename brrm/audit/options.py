"""What an audit does besides judging (:class:`AuditOptions`): read by the runner, the summary, the exports and the
report, so each of them imports it from here and none imports the runner."""

from __future__ import annotations

from dataclasses import dataclass

from brrm.types import check_float, check_int


@dataclass(frozen=True)
class AuditOptions:
    """What an audit does besides judging.

    Attributes:
        shape: ``pairs``, ``single`` or ``groups`` (resolved).
        strategy: the resolved group strategy (groups), else None.
        slice_by: row columns the report and summary are sliced by.
        low_margin: a pairwise judgment with |P(A≻B) − 0.5| < this is flagged as low margin; in [0, 0.5].
        max_flagged: most flagged items the HTML report shows in full (the exports hold all), >= 0.
        chunk_size: items per judge call (and per store transaction); None: the judge's own ``chunk_size``
            locally, 64 on Ray.
        summary_every_s: seconds between periodic summary lines, > 0.
        progress: show a progress bar on the terminal.
        calibration: the ``calib.json`` the judge was calibrated with (``--calibration``), or None: the summary
            then says how many of the audited pairs were in that calibration's fit split (pairs).
        retry_failed: also judge again stored parse failures and truncations (``--retry-failed``); transient
            failures are always retried, and under sampled decoding parse failures and truncations of pairs and
            single items are too, with a new seed (:mod:`brrm.types.retry`).

    Raises:
        ConfigError: naming the option and its valid range.
    """

    shape: str
    strategy: str | None = None
    slice_by: tuple[str, ...] = ()
    low_margin: float = 0.1
    max_flagged: int = 200
    chunk_size: int | None = None
    summary_every_s: float = 60.0
    progress: bool = True
    calibration: str | None = None
    retry_failed: bool = False

    def __post_init__(self) -> None:
        check_float("low_margin", self.low_margin, low=0, high=0.5)
        check_int("max_flagged", self.max_flagged, low=0)
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, low=1)
        check_float("summary_every_s", self.summary_every_s, low=0, low_open=True)


__all__ = ["AuditOptions"]
