"""The group ranking strategies by name, and the rule that picks one from a judge's traits.

What each strategy does and what it costs is composition's business (:mod:`brrm.compose.strategies`); a surface asks
the judge what a request costs (:meth:`brrm.RewardJudge.cost`) and never counts judgments itself. This module holds
only the names a surface validates user input against (a CLI choice list, an HTTP enum) and :func:`check_strategy`.
"""

from __future__ import annotations

from brrm.errors import ConfigError

STRATEGIES = ("auto", "scores", "round_robin", "circular", "reference", "knockout")
"""Group ranking strategies (``auto``: the judge's default — ``scores`` for scalar models, ``round_robin``
for pairwise judges)."""


def check_strategy(strategy: str, *, pairwise: bool, has_reference: bool) -> str:
    """The concrete strategy (``auto`` resolved) for a judge whose ``pairwise`` trait is given.

    Args:
        strategy: one of :data:`STRATEGIES`.
        pairwise: the judge's :attr:`~brrm.JudgeInfo.pairwise` trait.
        has_reference: whether the group comes with a reference response.

    Returns:
        A strategy of :data:`STRATEGIES` other than ``auto``.

    Raises:
        ConfigError: on an unknown strategy, ``scores`` for a pairwise judge, or a reference given to / missing
            from the ``reference`` strategy.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy {strategy!r} is not valid; expected one of {', '.join(STRATEGIES)}",
                          field="strategy")
    if strategy == "auto":
        strategy = "round_robin" if pairwise else "scores"
    if strategy == "scores" and pairwise:
        raise ConfigError("a pairwise judge has no scalar score; use round_robin, circular, reference or knockout")
    if (strategy == "reference") != has_reference:
        raise ConfigError("strategy 'reference' needs a reference response per group, and only it takes one")
    return strategy
