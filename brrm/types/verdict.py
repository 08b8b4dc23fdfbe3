"""What a judgment says and how it ended: :class:`Verdict` (which response won), :class:`Status` (ok, or why not),
and :func:`parse_label`, which reads a dataset's preference label as a Verdict. The results of
:mod:`brrm.types.results` carry both (and re-export them)."""

from __future__ import annotations

import enum

from brrm.errors import ConfigError


class Verdict(enum.StrEnum):
    """Which response won. ``NONE`` means no verdict was produced; the result's status says why."""

    A = "A"
    B = "B"
    TIE = "tie"
    NONE = "none"

    def mirrored(self) -> Verdict:
        """The verdict seen from the swapped order (A <-> B); TIE and NONE map to themselves."""
        return {Verdict.A: Verdict.B, Verdict.B: Verdict.A}.get(self, self)


class Status(enum.StrEnum):
    """Outcome of one judgment or reward.

    ``ok``: a verdict / reward was produced. ``parse_failure``: the output ended but held no valid verdict.
    ``truncated``: a token budget or context limit was hit before the verdict. ``backend_error``: the
    model backend failed (exception, NaN logits, HTTP error). ``invalid_input``: the record itself is
    malformed (reported with its reason; the rest of the batch goes on). ``empty``: an empty response.
    ``incomplete_group``: a group reward whose GRPO group never arrived whole (some member missing after the
    cohort deadline), so no within-group reward exists for it.
    """

    OK = "ok"
    PARSE_FAILURE = "parse_failure"
    TRUNCATED = "truncated"
    BACKEND_ERROR = "backend_error"
    INVALID_INPUT = "invalid_input"
    EMPTY = "empty"
    INCOMPLETE_GROUP = "incomplete_group"


def parse_label(value: object, *, where: str = "label") -> Verdict:
    """Map a label (``"A"``, ``"B"``, ``"tie"``, or ``1`` / ``2`` as in LLMBar) to a Verdict.

    Raises:
        ConfigError: naming the field and the valid options.
    """
    table = {"a": Verdict.A, "b": Verdict.B, "tie": Verdict.TIE, "1": Verdict.A, "2": Verdict.B}
    key = str(value).strip().lower()
    if isinstance(value, bool) or key not in table:
        raise ConfigError(f"{where} {value!r} is not valid; expected one of 'A', 'B', 'tie' (or 1, 2)")
    return table[key]
