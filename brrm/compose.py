"""One reward interface over pairwise judges and scalar reward models.

Every model implements what it natively can — ``score`` (Bradley–Terry, principle judges) or
``judge_pairs`` (BR-RM) — and the adapters here supply the rest, so :class:`ScalarRewardJudge` and
:class:`PairwiseRewardJudge` both offer ``score``, ``judge_pairs`` and ``rank``:

* scalar → pairwise (:func:`pairwise_from_rewards`): P(A ≻ B) = σ(r_A − r_B) (the Bradley–Terry model);
  a tie when |r_A − r_B| ≤ ``margin``. One scoring pass of 2N items serves N pairs; both orders give the
  same answer by construction, so ``swap`` never needs a second pass.
* pairwise → scalar, over a group of N responses to one conversation (:data:`STRATEGIES`):

  =============  =========================================  ========================  =======================
  strategy       judgments                                   reward                    range
  =============  =========================================  ========================  =======================
  scores         none (N scalar rewards; wins derived)       the model's own reward    model scale (-inf, inf)
  round_robin    N(N−1): every pair, both orders             adjusted win rate         [0, 1]
  circular       N: i vs i+1 (mod N), each shown first once  adjusted win rate         [0, 1]
  reference      N: each response (as A) vs the reference    P(response ≻ reference)   [0, 1]
  knockout       N−1 matches (best-of-N bracket)             rounds won / rounds       [0, 1]
  =============  =========================================  ========================  =======================

  (With ``swap=True`` a pairwise judge runs both orders inside each judgment of circular, reference and
  knockout, doubling its model calls.) Adjusted win rate = (wins + 0.5·ties) / games (FastChat PR #1892).
  Judgments without a verdict never enter rewards, wins or ties; they are counted in ``failed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from brrm.errors import ConfigError
from brrm.types import (
    Conversation,
    GroupResult,
    PairwiseJudge,
    PairwiseJudgment,
    ScalarReward,
    ScalarRewardModel,
    Status,
    Verdict,
    check_same_length,
)

STRATEGIES = ("scores", "round_robin", "circular", "reference", "knockout")
"""Group ranking strategies; see the module docstring for judgments and reward ranges."""

UNIT = (0.0, 1.0)
UNBOUNDED = (-math.inf, math.inf)
_TIE_OPTIONS = (Verdict.TIE, Verdict.A, Verdict.B)

Pair = tuple[int, int]
JudgeFn = Callable[[list[Pair]], list[PairwiseJudgment]]


def sigmoid(x: float) -> float:
    """σ(x) = 1 / (1 + e^−x), without overflow for any finite x."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def adjusted_win_rate(win: int, tie: int, loss: int) -> float:
    """(win + 0.5·tie) / (win + tie + loss), in [0, 1]; NaN when there are no games (nothing to rate)."""
    total = win + tie + loss
    return (win + 0.5 * tie) / total if total else math.nan


def rank_by_win_rate(counts: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Rank models by adjusted win rate from their ``{"win", "tie", "loss"}`` counts (ties count half).

    Returns:
        ``[{"name", "win_rate", "win", "tie", "loss", "total"}, ...]`` best first (equal rates keep input
        order); raw counts are reported next to the rate.

    Raises:
        ConfigError: on a missing or negative count.
    """
    rows = []
    for name, c in counts.items():
        try:
            win, tie, loss = (int(c[k]) for k in ("win", "tie", "loss"))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"counts of {name!r} need integer 'win', 'tie' and 'loss', got {dict(c)!r}"
            ) from None
        if min(win, tie, loss) < 0:
            raise ConfigError(f"counts of {name!r} must be >= 0, got {dict(c)!r}")
        rows.append(
            {
                "name": name,
                "win_rate": adjusted_win_rate(win, tie, loss),
                "win": win,
                "tie": tie,
                "loss": loss,
                "total": win + tie + loss,
            }
        )
    return sorted(rows, key=lambda r: -r["win_rate"] if not math.isnan(r["win_rate"]) else math.inf)


def pairwise_from_rewards(
    reward_a: ScalarReward,
    reward_b: ScalarReward,
    *,
    margin: float = 0.0,
    on_tie: Verdict = Verdict.TIE,
    id: str = "",
    label: Verdict = Verdict.NONE,
) -> PairwiseJudgment:
    """Turn two scalar rewards for the same conversation into a pairwise judgment.

    Args:
        reward_a, reward_b: rewards of response A and B.
        margin: |r_A − r_B| ≤ margin is a tie, >= 0 (reward units).
        on_tie: what a tie becomes: ``Verdict.TIE`` (default), or ``Verdict.A`` / ``Verdict.B`` to reproduce a
            protocol that has no ties (JudgeBench's reward-model judges: ``A>B if s_A > s_B else B>A`` is
            ``margin=0, on_tie=Verdict.B``).
        id, label: copied into the judgment.

    Returns:
        An ok judgment with p_a = σ(r_A − r_B) when both rewards are ok; when exactly one response is empty
        and the other is ok, the other wins (p_a 0 or 1); both empty is a tie; any other failed reward makes
        the judgment carry that failure (winner NONE, never a default winner).

    Raises:
        ConfigError: on a negative or non-finite margin or an invalid ``on_tie``.
    """
    if not isinstance(margin, int | float) or not math.isfinite(margin) or margin < 0:
        raise ConfigError(f"margin must be a finite number >= 0, got {margin!r}")
    if on_tie not in _TIE_OPTIONS:
        raise ConfigError(f"on_tie must be Verdict.TIE, Verdict.A or Verdict.B, got {on_tie!r}")
    meta: dict[str, Any] = {
        "id": id,
        "label": label,
        "provenance": reward_a.provenance or reward_b.provenance,
        "prompt_tokens": reward_a.input_tokens + reward_b.input_tokens,
    }
    empty = (reward_a.status is Status.EMPTY, reward_b.status is Status.EMPTY)
    if all(empty):
        return PairwiseJudgment(Verdict.TIE, Status.OK, "both responses are empty", p_a=0.5, **meta)
    if any(empty) and (reward_a.ok or reward_b.ok):
        winner = Verdict.B if empty[0] else Verdict.A
        return PairwiseJudgment(
            winner,
            Status.OK,
            f"response {'A' if empty[0] else 'B'} is empty",
            p_a=float(winner is Verdict.A),
            **meta,
        )
    failures = [(side, r) for side, r in (("A", reward_a), ("B", reward_b)) if not r.ok]
    failures.sort(key=lambda f: f[1].status is Status.EMPTY)  # a real failure explains more than emptiness
    if failures:
        side, r = failures[0]
        return PairwiseJudgment(Verdict.NONE, r.status, f"response {side}: {r.reason}", **meta)
    delta = reward_a.reward - reward_b.reward
    winner = on_tie if abs(delta) <= margin else (Verdict.A if delta > 0 else Verdict.B)
    reason = (
        ""
        if winner is not on_tie or on_tie is Verdict.TIE
        else f"tie (|Δ| <= {margin}) resolved as {on_tie.value}"
    )
    return PairwiseJudgment(winner, Status.OK, reason, p_a=sigmoid(delta), **meta)


# ------------------------------------------------------------------------------------------- strategies
def _tally(
    n: int, pairs: Sequence[Pair], judgments: Sequence[PairwiseJudgment]
) -> tuple[list[list[int]], list[list[int]], int]:
    wins = [[0] * n for _ in range(n)]
    ties = [[0] * n for _ in range(n)]
    failed = 0
    for (i, j), jd in zip(pairs, judgments, strict=True):
        if not jd.ok:
            failed += 1
        elif jd.winner is Verdict.A:
            wins[i][j] += 1
        elif jd.winner is Verdict.B:
            wins[j][i] += 1
        else:
            ties[i][j] += 1
            ties[j][i] += 1
    return wins, ties, failed


def _first_failure(
    k: int, pairs: Sequence[Pair], judgments: Sequence[PairwiseJudgment]
) -> PairwiseJudgment | None:
    return next((jd for (i, j), jd in zip(pairs, judgments, strict=True) if k in (i, j) and not jd.ok), None)


def _group(
    strategy: str,
    rewards: list[ScalarReward],
    rng: tuple[float, float],
    pairs: Sequence[Pair],
    judgments: Sequence[PairwiseJudgment],
    n_scored: int = 0,
) -> GroupResult:
    n = len(rewards)
    wins, ties, failed = _tally(n, pairs, judgments)
    ok = [i for i in range(n) if rewards[i].ok]
    ranking = tuple(sorted(ok, key=lambda i: (-rewards[i].reward, i)))
    return GroupResult(
        strategy,
        tuple(rewards),
        rng,
        tuple(map(tuple, wins)),
        tuple(map(tuple, ties)),
        len(judgments),
        n_scored,
        failed,
        ranking,
        tuple(judgments),
    )


def _win_rate_rewards(
    n: int, pairs: Sequence[Pair], judgments: Sequence[PairwiseJudgment]
) -> list[ScalarReward]:
    wins, ties, _ = _tally(n, pairs, judgments)
    out = []
    for k in range(n):
        won, tied, lost = sum(wins[k]), sum(ties[k]), sum(row[k] for row in wins)
        if won + tied + lost:
            out.append(
                ScalarReward(
                    adjusted_win_rate(won, tied, lost),
                    Status.OK,
                    id=str(k),
                    provenance=judgments[0].provenance,
                )
            )
            continue
        bad = _first_failure(k, pairs, judgments)
        status, why = (bad.status, bad.reason) if bad else (Status.BACKEND_ERROR, "no judgment")
        out.append(ScalarReward.failed(status, f"no ok judgment for response {k}: {why}", id=str(k)))
    return out


def _reference_reward(jd: PairwiseJudgment, k: int) -> ScalarReward:
    """P(response ≻ reference): the judgment's p_a when measured, else 1 / 0.5 / 0 for win / tie / loss."""
    if not jd.ok:
        return ScalarReward.failed(jd.status, jd.reason, id=jd.id or str(k), provenance=jd.provenance)
    value = jd.p_a if math.isfinite(jd.p_a) else {Verdict.A: 1.0, Verdict.TIE: 0.5, Verdict.B: 0.0}[jd.winner]
    return ScalarReward(value, Status.OK, id=jd.id or str(k), provenance=jd.provenance)


def _reference_group(judgments: Sequence[PairwiseJudgment], n_scored: int = 0) -> GroupResult:
    """Group result of the reference strategy: no pair inside the group is judged, so wins/ties are zero."""
    n = len(judgments)
    rewards = [_reference_reward(jd, k) for k, jd in enumerate(judgments)]
    return replace(
        _group("reference", rewards, UNIT, [], [], n_scored),
        judgments=tuple(judgments),
        n_judgments=n,
        failed=sum(not jd.ok for jd in judgments),
    )


def _knockout(n: int, judge: JudgeFn) -> tuple[list[ScalarReward], list[Pair], list[PairwiseJudgment]]:
    """Single-elimination bracket in input order; an odd one out gets a bye (counted as a round won).

    A tie advances the side with p_a on its side of 0.5, else (p_a NaN or 0.5) the earlier index. A failed
    match eliminates both sides, whose rewards then carry the failure (no winner is invented).
    """
    rounds = math.ceil(math.log2(n))
    won: list[int] = [0] * n
    failure: list[PairwiseJudgment | None] = [None] * n
    alive, pairs, judgments = list(range(n)), [], []
    while len(alive) > 1:
        matches = [(alive[k], alive[k + 1]) for k in range(0, len(alive) - 1, 2)]
        results = judge(matches)
        nxt = []
        for (i, j), jd in zip(matches, results, strict=True):
            if not jd.ok:
                failure[i] = failure[j] = jd
                continue
            first = jd.winner is Verdict.A or (jd.winner is Verdict.TIE and not jd.p_a < 0.5)
            nxt.append(i if first else j)
        if len(alive) % 2:
            nxt.append(alive[-1])
        for k in nxt:
            won[k] += 1
        pairs += matches
        judgments += results
        alive = nxt
    rewards = []
    for k in range(n):
        bad = failure[k]
        rewards.append(
            ScalarReward(won[k] / rounds, Status.OK, id=str(k))
            if bad is None
            else ScalarReward.failed(bad.status, f"knockout match failed: {bad.reason}", id=str(k))
        )
    return rewards, pairs, judgments


def run_strategy(strategy: str, n: int, judge: JudgeFn) -> GroupResult:
    """Rank ``n`` responses with a pairwise ``judge`` (``judge([(i, j), …])`` shows i as A and j as B).

    Raises:
        ConfigError: on an unknown strategy (``scores`` and ``reference`` need a model, see the judges),
            or fewer than 2 responses.
    """
    if n < 2:
        raise ConfigError(f"strategy {strategy!r} compares responses; it needs at least 2, got {n}")
    if strategy == "knockout":
        rewards, pairs, judgments = _knockout(n, judge)
        return _group(strategy, rewards, UNIT, pairs, judgments)
    if strategy == "round_robin":
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    elif strategy == "circular":
        pairs = [(0, 1), (1, 0)] if n == 2 else [(i, (i + 1) % n) for i in range(n)]
    else:
        raise ConfigError(
            f"strategy {strategy!r} is not valid here; expected round_robin, circular or knockout"
        )
    judgments = judge(pairs)
    return _group(strategy, _win_rate_rewards(n, pairs, judgments), UNIT, pairs, judgments)


def _check_strategy(strategy: str, reference: str | None) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy {strategy!r} is not valid; expected one of {', '.join(STRATEGIES)}")
    if (strategy == "reference") != (reference is not None):
        raise ConfigError("strategy 'reference' needs reference=<response text>, and only it takes one")


# ---------------------------------------------------------------------------------------------- judges
class ScalarRewardJudge:
    """``score``, ``judge_pairs`` and ``rank`` for a scalar reward model (Bradley–Terry or principle judge).

    Args:
        model: anything with ``score(conversations, responses, /, *, principle=None, ids=None)``.
        principle: principle used when a call passes none (required by principle judges).
        margin: ties when |r_A − r_B| ≤ margin (reward units, >= 0).
        on_tie: what a tie becomes (see :func:`pairwise_from_rewards`).
    """

    def __init__(
        self,
        model: ScalarRewardModel,
        *,
        principle: str | None = None,
        margin: float = 0.0,
        on_tie: Verdict = Verdict.TIE,
    ) -> None:
        self.model = model
        self.principle = principle
        self.margin = margin
        self.on_tie = on_tie
        pairwise_from_rewards(
            ScalarReward(0.0, Status.OK), ScalarReward(0.0, Status.OK), margin=margin, on_tie=on_tie
        )  # validates margin and on_tie now

    def score(
        self,
        conversations: Sequence[Any],
        responses: Sequence[str],
        /,
        *,
        principle: str | Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[ScalarReward]:
        """The model's rewards (see its ``score``); ``principle`` defaults to the judge's."""
        principle = self.principle if principle is None else principle
        kwargs = {"principle": principle} if principle is not None else {}
        return self.model.score(conversations, responses, ids=ids, **kwargs)

    def judge_pairs(
        self,
        conversations: Sequence[Any],
        responses_a: Sequence[str],
        responses_b: Sequence[str],
        /,
        *,
        ids: Sequence[str] | None = None,
        labels: Sequence[Verdict] | None = None,
        swap: bool | None = None,
    ) -> list[PairwiseJudgment]:
        """Judge N pairs from one scoring pass over the 2N responses (``swap`` cannot change the result).

        Raises:
            ConfigError: on mismatched lengths or invalid inputs (from the model).
        """
        n = check_same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b)
        rewards = self.score([*conversations, *conversations], [*responses_a, *responses_b])
        return [
            pairwise_from_rewards(
                rewards[i],
                rewards[n + i],
                margin=self.margin,
                on_tie=self.on_tie,
                id=str(ids[i]) if ids else "",
                label=labels[i] if labels else Verdict.NONE,
            )
            for i in range(n)
        ]

    def rank(
        self,
        conversation: Any,
        responses: Sequence[str],
        /,
        *,
        strategy: str = "scores",
        reference: str | None = None,
    ) -> GroupResult:
        """Rank a group of responses to one conversation from one scoring pass.

        ``scores`` keeps the model's rewards and derives the win matrix from all ordered pairs; the other
        strategies apply the scalar → pairwise adapter to the same rewards (no further model calls).
        """
        _check_strategy(strategy, reference)
        texts = [*responses, *([reference] if reference is not None else [])]
        rewards = self.score([conversation] * len(texts), texts)
        n = len(responses)

        def judge(pairs: list[Pair]) -> list[PairwiseJudgment]:
            return [
                pairwise_from_rewards(rewards[i], rewards[j], margin=self.margin, on_tie=self.on_tie)
                for i, j in pairs
            ]

        if strategy == "scores":
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
            return _group(strategy, rewards, UNBOUNDED, pairs, judge(pairs), n_scored=n)
        if strategy == "reference":
            pairs = [(i, n) for i in range(n)]
            judgments = judge(pairs)
            return _reference_group(judgments, n_scored=n + 1)
        return replace(run_strategy(strategy, n, judge), n_scored=n)


class PairwiseRewardJudge:
    """``score``, ``judge_pairs`` and ``rank`` for a pairwise judge (BR-RM or any :class:`PairwiseJudge`).

    Args:
        judge: anything with ``judge_pairs(conversations, responses_a, responses_b, /, *, ids, labels,
            swap)``.
        swap: judge both orders inside each judgment of ``score`` / circular / reference / knockout (None:
            the judge's own setting). Round-robin always runs both orders as separate judgments.
    """

    def __init__(self, judge: PairwiseJudge, *, swap: bool | None = None) -> None:
        self.judge = judge
        self.swap = swap

    def judge_pairs(
        self,
        conversations: Sequence[Any],
        responses_a: Sequence[str],
        responses_b: Sequence[str],
        /,
        *,
        ids: Sequence[str] | None = None,
        labels: Sequence[Verdict] | None = None,
        swap: bool | None = None,
    ) -> list[PairwiseJudgment]:
        """The judge's own judgments (``swap`` defaults to this wrapper's setting)."""
        swap = self.swap if swap is None else swap
        return self.judge.judge_pairs(
            conversations, responses_a, responses_b, ids=ids, labels=labels, swap=swap
        )

    def score(
        self,
        conversations: Sequence[Any],
        responses: Sequence[str],
        /,
        *,
        principle: str | Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
        references: Sequence[str] | None = None,
    ) -> list[ScalarReward]:
        """P(response ≻ reference) per item, in [0, 1] (the judgment's p_a, else 1 / 0.5 / 0); N judgments.

        Raises:
            ConfigError: without ``references`` (a pairwise judge scores only against something), with a
                principle, or on mismatched lengths.
        """
        if principle is not None:
            raise ConfigError("this pairwise judge takes no principle")
        if references is None:
            raise ConfigError("a pairwise judge scores a response against a reference: pass references=[...]")
        check_same_length(conversations=conversations, responses=responses, references=references)
        judgments = self.judge_pairs(conversations, responses, references, ids=ids)
        return [_reference_reward(jd, k) for k, jd in enumerate(judgments)]

    def rank(
        self,
        conversation: Any,
        responses: Sequence[str],
        /,
        *,
        strategy: str = "round_robin",
        reference: str | None = None,
    ) -> GroupResult:
        """Rank a group of responses to one conversation (see :data:`STRATEGIES` for costs and ranges).

        Raises:
            ConfigError: on an unknown strategy, ``scores`` (a pairwise judge has no scalar reward: use
                reference or round_robin), a missing reference, or fewer than 2 responses.
        """
        _check_strategy(strategy, reference)
        if strategy == "scores":
            raise ConfigError(
                "a pairwise judge has no scalar score; use round_robin, circular, reference or knockout"
            )
        conv = Conversation.coerce(conversation)
        n = len(responses)
        if strategy == "reference":
            assert reference is not None
            return _reference_group(self.judge_pairs([conv] * n, list(responses), [reference] * n))
        swap = False if strategy == "round_robin" else self.swap

        def judge(pairs: list[Pair]) -> list[PairwiseJudgment]:
            return self.judge.judge_pairs(
                [conv] * len(pairs),
                [responses[i] for i, _ in pairs],
                [responses[j] for _, j in pairs],
                swap=swap,
            )

        return run_strategy(strategy, n, judge)


def as_reward_judge(model: Any, **options: Any) -> ScalarRewardJudge | PairwiseRewardJudge:
    """Wrap a model in the one interface: scalar models (``score``) or pairwise judges (``judge_pairs``).

    Args:
        model: a scalar reward model or a pairwise judge (already-wrapped judges are returned as they are).
        **options: passed to :class:`ScalarRewardJudge` or :class:`PairwiseRewardJudge`.

    Raises:
        ConfigError: when ``model`` has neither method.
    """
    if isinstance(model, ScalarRewardJudge | PairwiseRewardJudge):
        return model
    if isinstance(model, ScalarRewardModel):
        return ScalarRewardJudge(model, **options)
    if isinstance(model, PairwiseJudge):
        return PairwiseRewardJudge(model, **options)
    raise ConfigError(f"{type(model).__name__} has neither score(...) nor judge_pairs(...)")
