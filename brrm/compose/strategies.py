"""Pairwise → scalar over groups of responses to one conversation (best-of-N, GRPO groups).

=============  ===========================================  =======================  =======================
strategy       judgments per group of N                     reward                   range
=============  ===========================================  =======================  =======================
scores         none (N scalar rewards; wins derived)        the model's own reward   model scale (-inf, inf)
round_robin    N(N−1): every pair, both orders              adjusted win rate        [0, 1]
circular       N: i vs i+1 (mod N), each shown first once   adjusted win rate        [0, 1]
               (N = 2: the pair in both orders)
reference      N: each response (as A) vs the reference     P(response ≻ reference)  [0, 1]
knockout       N−1 matches (best-of-N bracket)              rounds won / rounds      [0, 1]
=============  ===========================================  =======================  =======================

With ``swap`` a pairwise judge runs both orders inside each judgment of circular, reference and knockout,
doubling its model calls (round-robin already shows every pair in both orders). Adjusted win rate =
(wins + 0.5·ties) / games (FastChat PR #1892). Judgments without a verdict never enter rewards, wins or ties;
they are counted in ``failed``, and a response with no ok judgment gets no reward (its status says why).

Groups are planned as rounds (:class:`GroupPlan`), so the judgments of many groups run in one backend call
per round (knockout needs one round per bracket level).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from brrm.compose.pairwise import adjusted_win_rate
from brrm.errors import ConfigError
from brrm.types import (
    SHAPES,
    GroupResult,
    JudgeInfo,
    PairwiseJudgment,
    ScalarReward,
    Status,
    Verdict,
    check_bool,
    check_choice,
    check_int,
)
from brrm.types.cost import JudgmentCost
from brrm.types.strategies import check_strategy

UNIT = (0.0, 1.0)
UNBOUNDED = (-math.inf, math.inf)

Pair = tuple[int, int]


def judgments_per_group(strategy: str, n: int, *, swap: bool = False) -> int:
    """Model judgments (each one two-turn BR-RM run, one presentation order) a strategy needs for a group of ``n``.

    Example: circular with swap on a GRPO group of 8 is 16 judgments; round-robin is 56 with or without swap.
    """
    if n < 2 or strategy == "scores":
        return 0
    if strategy == "circular" and n == 2:
        return 2  # one pair, both orders (as two judgments, or one with swap)
    per = {"round_robin": n * (n - 1), "circular": n, "reference": n, "knockout": n - 1}[strategy]
    return per * (2 if swap and strategy != "round_robin" else 1)


def pairwise_cost(shape: str, n: int, *, strategy: str = "auto", swap: bool = False,
                  samples: int = 1, principles: int | None = None) -> JudgmentCost:
    """What a pairwise judge's request costs (the arithmetic behind :meth:`PairwiseRewardJudge.judgment_cost
    <brrm.compose.PairwiseRewardJudge.judgment_cost>` and :class:`~brrm.service.RemoteJudge`'s).

    Args:
        shape: ``pairs`` (n pairs), ``score`` (n responses, each judged against its reference) or ``group``.
        n: pairs, items or responses, >= 0.
        strategy: a group's strategy (``auto``: ``round_robin``).
        swap: both presentation orders of every pair.
        samples: independent judgments per order (self-consistency voting), >= 1.
        principles: None (a pairwise judge scores on no principle; a request's principles are refused).

    Returns:
        The :class:`~brrm.types.cost.JudgmentCost`: two turns per judgment; e.g. a GRPO group of 8, circular with
        swap, is 16 judgments; round-robin is 56 with or without swap (it shows every pair in both orders).

    Raises:
        ConfigError: on an unknown shape or strategy, ``scores``, n < 0, or ``principles``.
    """
    check_choice("shape", shape, SHAPES)
    check_int("n", n, low=0)
    if principles is not None:
        raise ConfigError("principles: a pairwise judge (BR-RM) scores on no principle; only principle models "
                          "(kind principle) take one")
    orders = 2 if check_bool("swap", swap) else 1
    if shape != "group":
        return JudgmentCost(shape, n, n * orders, samples, turns=2, orders=orders, pairs=n)
    strategy = check_strategy(strategy, pairwise=True, has_reference=strategy == "reference")
    units = judgments_per_group(strategy, n, swap=swap)
    pairs = units if strategy == "round_robin" else units // orders  # round-robin shows both orders itself
    return JudgmentCost(shape, n, units, samples, turns=2, orders=orders, strategy=strategy, pairs=pairs)


def scalar_cost(shape: str, n: int, *, strategy: str = "auto", principles: int = 1) -> JudgmentCost:
    """What a scalar reward model's request costs, in scored sequences: each response once per principle
    (``pairs``: both responses of each pair; a ``group`` under ``reference``: the reference too). No sample and no
    order multiplies it: σ(r_A − r_B) does not depend on the order.

    Raises:
        ConfigError: on an unknown shape or strategy, or n < 0.
    """
    check_choice("shape", shape, SHAPES)
    check_int("n", n, low=0)
    per = max(1, principles)
    if shape != "group":
        return JudgmentCost(shape, n, n * per * (2 if shape == "pairs" else 1), turns=1, unit="scored sequence")
    strategy = check_strategy(strategy, pairwise=False, has_reference=strategy == "reference")
    return JudgmentCost(shape, n, (n + (strategy == "reference")) * per, turns=1, strategy=strategy,
                        unit="scored sequence")


def scalar_judge_cost(info: JudgeInfo, shape: str, n: int, *, strategy: str = "auto",
                      principles: int | None = None) -> JudgmentCost:
    """What a request costs the scalar judge ``info`` describes (the arithmetic behind :meth:`ScalarRewardJudge.
    judgment_cost <brrm.compose.ScalarRewardJudge.judgment_cost>` and :class:`~brrm.service.RemoteJudge`'s):
    :func:`scalar_cost`, each response once per principle: ``principles`` when the request names its own (>= 1),
    else the judge's default principles.

    Raises:
        ConfigError: as :func:`scalar_cost`, ``principles`` < 1, or ``principles`` for a judge that takes none
            (Bradley–Terry).
    """
    if principles is not None and not info.takes_principle:
        raise ConfigError(f"principles: only principle models (kind principle) take one; this judge is "
                          f"{info.describe()}")
    per = len(info.composition.principles) if principles is None else check_int("principles", principles, low=1)
    return scalar_cost(shape, n, strategy=strategy, principles=per)


class GroupPlan:
    """One group's judgments, round by round: ``while pairs := plan.next_round(): plan.feed(judge(pairs))``.

    Pair ``(i, j)`` shows response ``i`` as A and ``j`` as B; index ``n`` is the reference (``reference``).
    """

    def __init__(self, strategy: str, n: int, *, swap: bool = False) -> None:
        self.strategy, self.n, self.swap = strategy, n, swap
        self.pairs: list[Pair] = []
        self.judgments: list[PairwiseJudgment] = []
        self._alive = list(range(n))
        self._won = [0] * n
        self._failure: list[PairwiseJudgment | None] = [None] * n
        self._pending: list[Pair] = []
        self._done = n < 2

    def next_round(self) -> list[Pair]:
        """The pairs to judge next; empty when the plan is finished."""
        if self._done:
            return []
        if self.strategy == "round_robin":
            pairs = [(i, j) for i in range(self.n) for j in range(self.n) if i != j]
        elif self.strategy == "circular":
            pairs = [(i, (i + 1) % self.n) for i in range(self.n)]
            if self.n == 2:  # one pair: both orders, unless each judgment already runs both
                pairs = [(0, 1)] if self.swap else [(0, 1), (1, 0)]
        elif self.strategy == "reference":
            pairs = [(i, self.n) for i in range(self.n)]
        else:
            pairs = [(self._alive[k], self._alive[k + 1]) for k in range(0, len(self._alive) - 1, 2)]
        self._pending = pairs
        return pairs

    def feed(self, judgments: Sequence[PairwiseJudgment]) -> None:
        """Take the judgments of the pairs last returned by :meth:`next_round` (same order)."""
        pairs, self._pending = self._pending, []
        self.pairs += pairs
        self.judgments += list(judgments)
        if self.strategy != "knockout":
            self._done = True
            return
        nxt = []
        for (i, j), jd in zip(pairs, judgments, strict=True):
            if not jd.ok:  # a failed match eliminates both sides; no winner is invented
                self._failure[i] = self._failure[j] = jd
                continue
            first = jd.winner is Verdict.A or (jd.winner is Verdict.TIE and not jd.p_a < 0.5)
            nxt.append(i if first else j)
        if len(self._alive) % 2:
            nxt.append(self._alive[-1])  # a bye counts as a round won
        for k in nxt:
            self._won[k] += 1
        self._alive = nxt
        self._done = len(nxt) <= 1

    def result(self, rewards: list[ScalarReward] | None = None, n_scored: int = 0) -> GroupResult:
        """The group's result (``rewards`` given: the ``scores`` strategy's own rewards)."""
        if self.n < 2 and rewards is None:
            rewards = [ScalarReward.failed(Status.INVALID_INPUT, f"a group of {self.n} response(s) has nothing to "
                                           f"compare with under strategy {self.strategy!r}", id=str(k))
                       for k in range(self.n)]
        if rewards is None:
            rewards = {"reference": self._reference_rewards, "knockout": self._knockout_rewards}.get(
                self.strategy, self._win_rate_rewards)()
        rng = UNBOUNDED if self.strategy == "scores" else UNIT
        return build_group(self.strategy, rewards, rng, self.pairs, self.judgments, n_scored)

    def _win_rate_rewards(self) -> list[ScalarReward]:
        wins, ties, _ = tally(self.n, self.pairs, self.judgments)
        out = []
        for k in range(self.n):
            won, tied, lost = sum(wins[k]), sum(ties[k]), sum(row[k] for row in wins)
            if won + tied + lost:
                out.append(ScalarReward(adjusted_win_rate(won, tied, lost), Status.OK, id=str(k),
                                        provenance=self.judgments[0].provenance))
                continue
            bad = next((jd for (i, j), jd in zip(self.pairs, self.judgments, strict=True)
                        if k in (i, j) and not jd.ok), None)
            status, why = (bad.status, bad.reason) if bad else (Status.BACKEND_ERROR, "no judgment")
            out.append(ScalarReward.failed(status, f"no ok judgment for response {k}: {why}", id=str(k)))
        return out

    def _reference_rewards(self) -> list[ScalarReward]:
        return [reference_reward(jd, k) for k, jd in enumerate(self.judgments)]

    def _knockout_rewards(self) -> list[ScalarReward]:
        rounds = math.ceil(math.log2(self.n))
        out = []
        for k in range(self.n):
            bad = self._failure[k]
            out.append(ScalarReward(self._won[k] / rounds, Status.OK, id=str(k)) if bad is None
                       else ScalarReward.failed(bad.status, f"knockout match failed: {bad.reason}", id=str(k)))
        return out


Triple = tuple[int, int, int]


def run_plans(plans: Sequence[GroupPlan], judge: Callable[[list[Triple]], list[PairwiseJudgment]]) -> None:
    """Run many groups' plans together: each round's pairs of every group go to ``judge`` in one call.

    ``judge`` takes ``(group, i, j)`` triples and returns one judgment per triple, in order.
    """
    while True:
        rounds = [(g, plan.next_round()) for g, plan in enumerate(plans)]
        triples = [(g, i, j) for g, pairs in rounds for i, j in pairs]
        if not triples:
            return
        results = judge(triples)
        if len(results) != len(triples):
            raise ConfigError(f"the judge returned {len(results)} judgments for {len(triples)} pairs")
        pos = 0
        for g, pairs in rounds:
            if pairs:
                plans[g].feed(results[pos:pos + len(pairs)])
                pos += len(pairs)


def tally(n: int, pairs: Sequence[Pair],
          judgments: Sequence[PairwiseJudgment]) -> tuple[list[list[int]], list[list[int]], int]:
    """(wins[i][j], ties[i][j], failed) from judgments of ``pairs`` (indices >= n are ignored)."""
    wins = [[0] * n for _ in range(n)]
    ties = [[0] * n for _ in range(n)]
    failed = 0
    for (i, j), jd in zip(pairs, judgments, strict=True):
        if not jd.ok:
            failed += 1
        elif i >= n or j >= n:
            continue
        elif jd.winner is Verdict.A:
            wins[i][j] += 1
        elif jd.winner is Verdict.B:
            wins[j][i] += 1
        else:
            ties[i][j] += 1
            ties[j][i] += 1
    return wins, ties, failed


def reference_reward(jd: PairwiseJudgment, k: int) -> ScalarReward:
    """P(response ≻ reference): the judgment's p_a when measured, else 1 / 0.5 / 0 for win / tie / loss (a cascade's
    decision kept)."""
    if not jd.ok:
        return ScalarReward.failed(jd.status, jd.reason, id=jd.id or str(k), provenance=jd.provenance,
                                   cascade=jd.cascade)
    value = jd.p_a if math.isfinite(jd.p_a) else {Verdict.A: 1.0, Verdict.TIE: 0.5, Verdict.B: 0.0}[jd.winner]
    return ScalarReward(value, Status.OK, id=jd.id or str(k), provenance=jd.provenance, cascade=jd.cascade)


def build_group(strategy: str, rewards: list[ScalarReward], rng: tuple[float, float], pairs: Sequence[Pair],
                judgments: Sequence[PairwiseJudgment], n_scored: int = 0) -> GroupResult:
    """A :class:`GroupResult` from per-response rewards and the judgments behind them."""
    n = len(rewards)
    wins, ties, failed = tally(n, pairs, judgments)
    ranking = tuple(sorted((i for i in range(n) if rewards[i].ok), key=lambda i: (-rewards[i].reward, i)))
    return GroupResult(strategy, tuple(rewards), rng, tuple(map(tuple, wins)), tuple(map(tuple, ties)),
                       len(judgments), n_scored, failed, ranking, tuple(judgments), tuple(pairs))
