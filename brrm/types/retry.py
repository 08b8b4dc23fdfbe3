"""Which failed outcomes a resumed run judges again: transient failures always, final ones only when it can differ.

* **Transient** — ``backend_error`` (an exception, an HTTP error, non-finite logits) and the outcomes reported
  through it: a request past its deadline (``timeout``) and a stalled judge call abandoned by the scheduler
  (:mod:`brrm.service.scheduler`) are ``backend_error`` results whose reason says which; verl's own
  ``"timeout"`` status string counts too. None of them is the model's answer, so every resume (``brrm audit``
  rerun, ``brrm bench`` rerun into its folder, ``brrm judge --resume``) runs them again.
* **Final unless it can differ** — ``parse_failure`` and ``truncated`` are the model's answer to that request.
  Greedy decoding would repeat it token for token, so a resume keeps it (and its summary says how many it kept)
  unless the user asks (``--retry-failed``). Under sampled decoding a resume retries it with a new seed
  (:func:`brrm.seeds.retry_id`), so the retry can differ.
* Everything else (``ok``, ``invalid_input``, ``empty``, ``incomplete_group``) is final.

In-run retries (``max_retries``) follow the same rule: a greedy judge retries only transient failures.
"""

from __future__ import annotations

from collections.abc import Mapping

from brrm.types.protocols import JudgeInfo
from brrm.types.results import Status

TRANSIENT = frozenset({Status.BACKEND_ERROR.value, "timeout"})
"""Status values a resume always retries (``timeout``: the string verl's scorer reports)."""

FINAL_UNLESS_DIFFERENT = frozenset({Status.PARSE_FAILURE.value, Status.TRUNCATED.value})
"""Status values a resume retries only under sampled decoding (new seed) or with ``--retry-failed``."""


def is_transient(status: str) -> bool:
    """Whether a result with this status value is a transient failure (always retried on resume)."""
    return str(status) in TRANSIENT


def result_statuses(result: Mapping[str, object]) -> set[str]:
    """Every status value in a result dict (``to_dict()``): its own and its rewards' (a group whose ranking is
    ``ok`` can hold a failed member). A pair's sub-judgments (swap orders, voted samples) are not read: their
    combined status is the result's."""
    out = {str(result.get("status", ""))}
    members = result.get("rewards")
    if isinstance(members, list):
        out.update(str(m.get("status", "")) for m in members if isinstance(m, Mapping))
    return out


def is_sampled(info: JudgeInfo) -> bool:
    """Whether the judge ``info`` describes samples (temperature > 0, :attr:`JudgeInfo.sampling`): a retry with a
    new seed can differ. A judge without sampling settings (a Bradley–Terry forward pass) is deterministic: False."""
    return info.sampling is not None and not info.sampling.greedy


def record_is_sampled(options: Mapping[str, object]) -> bool:
    """:func:`is_sampled` for a stored judge record's ``options`` (an audit store's config): its ``sampling``
    entry read back as a :class:`~brrm.types.config.SamplingConfig`; a record without one (or one that does not
    read back) samples nothing."""
    from brrm.errors import ConfigError
    from brrm.types.config import SamplingConfig

    try:
        return not SamplingConfig.from_record(options.get("sampling")).greedy
    except ConfigError:
        return False


def retry_statuses(*, sampled: bool, retry_failed: bool) -> frozenset[str]:
    """The status values a resume judges again: :data:`TRANSIENT`, plus :data:`FINAL_UNLESS_DIFFERENT` when the
    judge samples or the user asked (``--retry-failed``)."""
    return TRANSIENT | FINAL_UNLESS_DIFFERENT if sampled or retry_failed else TRANSIENT


def kept_note(kept: int, *, what: str = "items") -> str:
    """The summary sentence about failures a resume kept ("" when none): how many, why, and the flag."""
    if not kept:
        return ""
    return (f"{kept} {what} kept their parse_failure/truncated result from an earlier run (greedy decoding would "
            "repeat it; pass --retry-failed to judge them again)")
