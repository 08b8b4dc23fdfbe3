"""How long a batch's first job is held for company: adapted to how requests really arrive.

A fixed hold (``max_wait_s``) costs every request that arrives alone the whole wait: a client that sends one
request at a time (a reward worker waiting for each answer) gains nothing from it, since its next request comes
only after the answer. Requests from many clients at once gain from it: they share calls. The signal that tells
the two apart is whether an arrival *found company* — other work queued or running when it came. The scheduler
keeps the mean gap between such arrivals (exponentially weighted) and holds the oldest job only while another is
expected: until the last arrival that found company plus :data:`PATIENCE` mean gaps, never past the first job's
arrival plus ``max_wait_s``, and not at all when the mean gap is as long as the window (company would come too
late). A lone request, or the first of a burst after a quiet spell, is sent at once; the rest of a burst queue
behind the running call and share the next one. (A scheduler that runs each job as its own call, ``split``, keeps
the whole window: its backend joins the calls into one running batch, and the window gathers a burst into one
of its call slots.)
"""

from __future__ import annotations

WEIGHT = 0.3
"""Weight of the newest gap in the running mean, in (0, 1]: three or four arrivals carry a change of rate."""

PATIENCE = 2.0
"""A hold lasts until the last arrival that found company plus this many mean gaps."""


class Arrivals:
    """The arrival rate of a scheduler's jobs that found company (the event loop's clock, seconds).

    Args:
        max_wait_s: the longest hold, seconds >= 0 (0: never hold).
        adaptive: False keeps the whole window for every first job (a ``split`` scheduler, see above).
    """

    def __init__(self, max_wait_s: float, *, adaptive: bool = True) -> None:
        self.max_wait_s, self.adaptive = max_wait_s, adaptive
        self.gap: float | None = None
        self.last: float | None = None

    def arrived(self, now: float, *, company: bool) -> None:
        """Count one arrival at ``now``; ``company``: other work was queued or running when it came."""
        if not company:
            return
        if self.last is not None:
            gap = max(0.0, now - self.last)
            self.gap = gap if self.gap is None else (1 - WEIGHT) * self.gap + WEIGHT * gap
        self.last = now

    def hold_until(self, first_arrival: float) -> float:
        """Until when the oldest queued job (arrived at ``first_arrival``) waits for company; a time at or before
        ``first_arrival`` means: send it now."""
        if not self.adaptive:
            return first_arrival + self.max_wait_s
        if self.gap is None or self.last is None or self.gap >= self.max_wait_s:
            return first_arrival
        return min(first_arrival + self.max_wait_s, self.last + PATIENCE * self.gap)
