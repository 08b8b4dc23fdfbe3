"""The judging routes of ``brrm serve``: ``/v1/judge``, ``/v1/score``, ``/v1/rank``, ``/get_reward`` (OpenRLHF) and
``/compare`` (NeMo Gym).

Each route validates its whole request (shapes, item and field limits, conversations, options the judge cannot
honour) before anything is queued, so a bad request is its own 413/422 and never reaches a batch shared with
others; then it hands its items to the scheduler and answers with the results in input order. A failed item is
that item's status in a 200 answer. A group's rewards (``/v1/rank``, ``/compare``) never depend on the order of its
responses: it is paired in the canonical order of :mod:`brrm.service.order` (``/v1/rank`` through the service's
group job) and answered in the request's.
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from brrm.errors import ConfigError
from brrm.serve import nemo_gym, openrlhf
from brrm.serve.idempotency import key_header
from brrm.serve.replies import reply
from brrm.serve.schemas import (
    ERRORS,
    CompareRequest,
    CompareResponse,
    GetRewardRequest,
    GetRewardResponse,
    JudgeRequest,
    JudgeResponse,
    RankRequest,
    RankResponse,
    ScoreRequest,
    ScoreResponse,
)
from brrm.serve.security import check_field_lengths
from brrm.serve.state import NAMES_NO_PRINCIPLE, NO_DEFAULT_PRINCIPLE, ServerState, State, conversation
from brrm.service.items import GroupItem, PairItem, RankCall, ScoreCall, ScoreItem, pairs_key
from brrm.service.order import CanonicalGroup
from brrm.types import Conversation, GroupResult, PairwiseJudgment, ScalarReward, parse_label
from brrm.types import Verdict as V
from brrm.types.config import check_principle
from brrm.types.strategies import check_strategy

R = TypeVar("R")

judging = APIRouter(tags=["judging"], responses=ERRORS, dependencies=[Depends(key_header)])
"""``/v1/judge``, ``/v1/score`` and ``/v1/rank``."""

rlhf = APIRouter(tags=["RLHF frameworks"], responses=ERRORS, dependencies=[Depends(key_header)])
"""``/get_reward`` (OpenRLHF) and ``/compare`` (NeMo Gym)."""

ROUTERS = (judging, rlhf)
"""The judging routers: their POST paths go through the scheduler's queue (the overload gate, ``Idempotency-Key``)."""


def _checked(state: ServerState, body: BaseModel, n: int, name: str) -> None:
    """Refuse a request over the item limit or with a text field over the field limit (413)."""
    state.check_items(n, name)
    check_field_lengths(body.model_dump(exclude_none=True), state.limits.max_field_chars, "")


def _of(kind: type[R], results: list[object]) -> list[R]:
    """The scheduler's results as the call's result type.

    Raises:
        TypeError: a result of another type (a programming error: the key names the judge method).
    """
    typed = [r for r in results if isinstance(r, kind)]
    if len(typed) != len(results):
        raise TypeError(f"a judge call returned something other than {kind.__name__}")
    return typed


@judging.post("/v1/judge", summary="Judge pairs: one PairwiseJudgment per pair, in order",
              dependencies=[NAMES_NO_PRINCIPLE])
async def judge(body: JudgeRequest, request: Request, state: State) -> JudgeResponse:
    _checked(state, body, len(body.pairs), "pairs")
    items = [PairItem(conversation(p, f"pairs[{k}]"), p.response_a, p.response_b, p.id or "",
                      parse_label(p.label, where=f"pairs[{k}].label") if p.label else V.NONE)
             for k, p in enumerate(body.pairs)]
    key = pairs_key(body.swap, options=state.options(body.options))
    spent = state.check_cost(state.judge.judgment_cost("pairs", len(items), swap=body.swap), f"{len(items)} pairs")
    results = _of(PairwiseJudgment, await state.submit(request, key, items, timeout_s=body.timeout_s, cost=spent))
    state.metrics.count_statuses(r.status for r in results)
    state.metrics.count_costs(results)
    return JudgeResponse.model_validate(reply(state.model_block, "judgments", results))


@judging.post("/v1/score", summary="Score responses: one ScalarReward per item, in order")
async def score(body: ScoreRequest, request: Request, state: State) -> ScoreResponse:
    _checked(state, body, len(body.items), "items")
    items = [ScoreItem(conversation(it, f"items[{k}]"), it.response, it.principle, it.reference, it.id or "")
             for k, it in enumerate(body.items)]
    refs, principles = _score_options(state, items)
    if principles:  # then every item has its own principle, scored on it alone
        items = _fill_principles(state, items)
    spent = state.check_cost(state.judge.judgment_cost("score", len(items), principles=1 if principles else None),
                             f"{len(items)} items")
    results = _of(ScalarReward, await state.submit(request, ScoreCall(refs, principles), items,
                                                   timeout_s=body.timeout_s, cost=spent))
    state.metrics.count_statuses(r.status for r in results)
    state.metrics.count_costs(results)
    return ScoreResponse.model_validate(reply(state.model_block, "rewards", results))


@judging.post("/v1/rank", summary="Rank one group of responses by a strategy", dependencies=[NAMES_NO_PRINCIPLE])
async def rank(body: RankRequest, request: Request, state: State) -> RankResponse:
    _checked(state, body, len(body.responses), "responses")
    strategy = check_strategy(body.strategy, pairwise=state.pairwise, has_reference=body.reference is not None)
    n = len(body.responses)
    spent = state.check_cost(state.judge.judgment_cost("group", n, strategy=strategy, swap=body.swap),
                             f"{strategy} over {n} responses")
    item = GroupItem(conversation(body, "body"), tuple(body.responses), body.reference)
    key = RankCall(strategy, body.swap, body.reference is not None, state.options(body.options))
    (result,) = _of(GroupResult, await state.submit(request, key, [item], timeout_s=body.timeout_s,
                                                    cost=max(1, spent), weights=[max(1, spent)]))
    state.metrics.count_statuses(r.status for r in result.rewards)
    return RankResponse.model_validate(reply(state.model_block, "result", result))


@rlhf.post("/get_reward", summary="OpenRLHF remote reward (--remote_rm_url http://HOST:PORT/get_reward)",
           dependencies=[NAMES_NO_PRINCIPLE])
async def get_reward(body: GetRewardRequest, request: Request, state: State) -> GetRewardResponse:
    _checked(state, body, len(body.query), "query")
    rewards = await _get_rewards(state, request, body)
    state.metrics.count_statuses(r.status for r in rewards)
    state.metrics.count_costs(rewards)
    return GetRewardResponse.model_validate(openrlhf.reply(rewards, state.limits.failed_reward))


@rlhf.post("/compare", summary="NeMo Gym genrm_compare: rewards for a group of responses from pairwise comparisons")
async def compare(body: CompareRequest, request: Request, state: State) -> CompareResponse:
    _checked(state, body, len(body.response_objs), "response_objs")
    history = nemo_gym.history_messages([m.model_dump() for m in body.conversation_history])
    conv = Conversation.coerce(history, where="conversation_history")
    texts, bad = nemo_gym.output_texts(body.response_objs)
    _check_principles(state, [("principle", body.principle)])  # refused even when nothing is compared
    strategy = body.strategy or state.limits.compare_strategy
    canon = CanonicalGroup.of([None if k in bad else t for k, t in enumerate(texts)])  # the group's one order
    pairs = nemo_gym.judged_pairs(canon.caller_pairs(nemo_gym.comparison_pairs(strategy, len(texts))), bad)
    spent = state.check_cost(state.judge.judgment_cost("pairs", len(pairs), swap=body.swap,
                                                       principles=1 if body.principle is not None else None),
                             f"{strategy} over {len(texts)} responses ({len(pairs)} pairs)")
    items = [PairItem(conv, texts[i], texts[j], f"{i}-{j}", principle=body.principle) for i, j in pairs]
    key = pairs_key(body.swap, body.principle is not None, state.options(body.options))
    units = [2] if len(pairs) == 2 and pairs[0] == pairs[1][::-1] else None  # one pair's two orders: one call
    judgments = _of(PairwiseJudgment, await state.submit(request, key, items, timeout_s=body.timeout_s, cost=spent,
                                                         units=units)) if items else []
    rewards, comparisons, metrics = nemo_gym.aggregate(len(texts), pairs, judgments, bad, pool=canon.pool)
    state.metrics.count_statuses(j.status for j in judgments)
    state.metrics.count_costs(judgments)
    failed = state.limits.failed_reward
    return CompareResponse(rewards=[r.reward if r.ok else failed for r in rewards],
                           comparison_results=comparisons, metrics=metrics,
                           statuses=[r.status.value for r in rewards], reasons=[r.reason for r in rewards])


def _score_options(state: ServerState, items: list[ScoreItem]) -> tuple[bool, bool]:
    """(references given, principles given) for a /v1/score request, refusing what the judge cannot take."""
    refs = [it.reference is not None for it in items]
    if state.pairwise and not all(refs):
        k = refs.index(False)
        raise ConfigError(f"items[{k}].reference is required: a pairwise judge (BR-RM) scores a response as "
                          "P(response beats reference)")
    if not state.pairwise and any(refs):
        raise ConfigError(f"items[{refs.index(True)}].reference: a scalar reward model scores each response on its "
                          "own; references are for pairwise judges")
    _check_principles(state, [(f"items[{k}].principle", it.principle) for k, it in enumerate(items)])
    return state.pairwise, any(it.principle is not None for it in items)


def _check_principles(state: ServerState, given: list[tuple[str, str | None]]) -> None:
    """Refuse a request's principles (``(field, principle or None)`` per scored item) as the served schema does,
    naming the first field at fault: a principle for a judge that takes none, a blank one
    (:func:`~brrm.types.config.check_principle`), none where the judge has no default, and items with and without
    one where the judge has several defaults (an item without one is scored on their mean)."""
    named = [(where, p) for where, p in given if p is not None]
    bare = [where for where, p in given if p is None]
    if named and not state.judge.info.takes_principle:
        raise ConfigError(f"{named[0][0]}: only principle models (kind principle) take a principle; this judge is "
                          f"{state.judge.info.describe()} (send null)")
    for where, principle in named:
        check_principle(where, principle)
    if bare and state.needs_principle:
        raise ConfigError(f"{bare[0]} is required: {NO_DEFAULT_PRINCIPLE}")
    if bare and named and len(state.judge.info.composition.principles) > 1:
        raise ConfigError(f"{bare[0]} is required when other items name one: the judge has several default "
                          "principles, which an item without one is scored on (every item names its principle, or "
                          "none does)")


def _fill_principles(state: ServerState, items: list[ScoreItem]) -> list[ScoreItem]:
    """Items without a principle given the judge's default (:func:`_check_principles` has refused a request that
    mixes items with and without one unless the judge has exactly one default)."""
    default = state.judge.info.composition.principles
    return [it if it.principle is not None else ScoreItem(it.conversation, it.response, default[0], it.reference,
                                                          it.id) for it in items]


async def _get_rewards(state: ServerState, request: Request, body: GetRewardRequest) -> list[ScalarReward]:
    """One reward per query: parsed queries are scored in one job; unusable ones fail with their reason."""
    mode = openrlhf.resolve_mode(state.limits.get_reward_mode, bool(state.judge.info.pairwise))
    todo = openrlhf.plan(body.query, body.prompts, body.labels, mode=mode,
                         specials=(*state.limits.strip_texts, *openrlhf.POLICY_SPECIAL_TEXTS))
    n = len(todo.items)
    spent = state.check_cost(state.judge.judgment_cost("score", n), f"{n} queries")
    scored = _of(ScalarReward, await state.submit(request, ScoreCall(mode == "reference", False), todo.items,
                                                  cost=spent)) if todo.items else []
    return todo.fill(scored)
