"""What both :class:`~brrm.RewardJudge` implementations share: the single-item helpers, ``rank``, resource
handling, variants and the checks of a call's arguments (:mod:`brrm.compose.judges`, :mod:`brrm.compose.scalar`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

from brrm.errors import ConfigError
from brrm.templates import is_blank, strip_reasoning
from brrm.types import (
    Conversation,
    JudgeInfo,
    PairwiseJudgment,
    ScalarReward,
    Status,
    Variable,
    Verdict,
    check_same_length,
    parse_label,
)
from brrm.types.conversation import ConversationLike
from brrm.types.protocols import OnResult, SingleItems


class _Base(SingleItems):
    """The single-item helpers, ``rank`` and resource handling, shared by both judges."""

    info: JudgeInfo
    model: Any
    judge_pairs: Callable[..., list[PairwiseJudgment]]  # each judge's own (RewardJudge.judge_pairs)

    def close(self) -> None:
        """Free the model (engines, threads, connections)."""
        self.model.close()

    def _variant_model(self, options: dict[str, object]) -> Any:
        """The model with ``options`` (the model's own settings) applied, or the model itself when none.

        Raises:
            ConfigError: when options are given and the model makes no variants, or as its ``with_options``.
        """
        if not options:
            return self.model
        if not isinstance(self.model, Variable):
            raise ConfigError(f"{type(self.model).__name__} makes no variants; options {sorted(options)} cannot be "
                              "set on this judge")
        return self.model.with_options(**options)

    def _with_spec(self, variant: Self, overrides: Mapping[str, object]) -> Self:
        """``variant`` whose info names the spec of this judge with ``overrides`` (None stays None)."""
        spec = self.info.spec
        if spec is not None:
            variant.info = replace(variant.info, spec=replace(spec, options={**spec.options, **overrides}))
        return variant

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self.info
        return f"{type(self).__name__}(model={i.model!r}, kind={i.kind!r}, recipe={i.recipe!r}, backend={i.backend!r})"


def _report_all(results: Sequence[object], on_result: OnResult) -> None:
    """Every result to ``on_result`` (a pass that finishes all its items at once)."""
    if on_result is not None:
        for i, r in enumerate(results):
            on_result(i, r)


def _groups(conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]],
            references: Sequence[str] | None) -> list[Conversation]:
    check_same_length(conversations=conversations, groups=groups)
    if references is not None:
        check_same_length(conversations=conversations, references=references)
    for g, group in enumerate(groups):
        if isinstance(group, str) or not isinstance(group, Sequence):
            raise ConfigError(f"groups[{g}] must be a list of response strings, got {type(group).__name__}")
        check_same_length(**{f"groups[{g}]": group})  # each response valid text
    return [Conversation.coerce(c, where=f"conversations[{g}]") for g, c in enumerate(conversations)]


def _unscorable(response: object, reference: object, rid: str) -> ScalarReward | None:
    """Why P(response ≻ reference) cannot be a number (an empty response, a missing reference), or None."""
    if not isinstance(response, str) or not isinstance(reference, str):
        raise ConfigError(f"responses and references must be strings, got {type(response).__name__} and "
                          f"{type(reference).__name__}")
    if is_blank(strip_reasoning(reference)[0]):
        return ScalarReward.failed(Status.INVALID_INPUT, "the reference is empty: a response is scored against it",
                                   id=rid)
    if is_blank(strip_reasoning(response)[0]):
        return ScalarReward.failed(Status.EMPTY, "response is empty", id=rid)
    return None


def _labels(labels: Sequence[object] | None, n: int) -> list[Verdict] | None:
    """Gold labels as verdicts (``A``/``B``/``tie``, ``1``/``2`` or :class:`Verdict`), checked."""
    if labels is None:
        return None
    if len(labels) != n:
        raise ConfigError(f"labels has {len(labels)} items, expected {n}")
    return [v if isinstance(v, Verdict) else parse_label(v, where=f"labels[{k}]") for k, v in enumerate(labels)]


def _ids(ids: Sequence[str] | None, n: int) -> list[str]:
    out = [str(x) for x in ids] if ids is not None else [""] * n
    if len(out) != n:
        raise ConfigError(f"ids has {len(out)} items, expected {n}")
    return out
