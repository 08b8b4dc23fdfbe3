"""The request models and routes of one ``brrm serve`` process, built at start-up, from which FastAPI emits the
OpenAPI schema that states exactly what *this* server accepts and answers.

The pydantic models of :mod:`brrm.serve.schemas` describe every server (and state the rules every server has: the
context of a pair, item or group is ``oneOf`` a ``prompt`` string or a ``conversation`` with a user turn; tool calls
only on assistant turns); :func:`request_models` subclasses each request model (``create_model``) with what
depends on the served judge and the limits, as the model's JSON Schema (validation stays the base model's, so a
request is answered as before):

* per-request ``options`` only where the judge can vary them (BR-RM and generative principle models), each budget
  at most the server's; a Bradley–Terry server's schema allows only their absence (``null``);
* ``reference`` required by a pairwise judge's ``/v1/score`` and absent from a scalar model's; ``principle`` only
  for principle models; ``/v1/rank`` strategies the judge runs, ``reference`` exactly with that strategy;
* ``maxItems`` from the item limit and the cost limit (per strategy and ``swap``), ``maxLength`` from the field
  limit; request examples this server's judge answers.

:func:`server_router` includes a route module's router with those models as its bodies, the bearer scheme and 401
where the server has an API key, and without the routes a principle model without a default cannot answer; the
``Idempotency-Key`` header is each judging route's own parameter (:func:`brrm.serve.idempotency.key_header`).

Two rules of the server have no JSON Schema form (JSON Schema cannot name an array's last item or compare two
arrays' lengths), so they are stated in the descriptions, and the server answers them 422 naming the field: a
conversation ends with a user or tool turn; ``/get_reward``'s ``prompts`` and ``labels`` have one entry per
``query``.
"""

from __future__ import annotations

import bisect
import copy
import functools
import inspect
import operator
import types
import typing
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, create_model

from brrm.errors import ConfigError
from brrm.load_options import request_options
from brrm.serve import schemas as s
from brrm.serve.limits import COMPARE_STRATEGIES
from brrm.serve.nemo_gym import comparison_pairs
from brrm.serve.security import OPEN_PATHS
from brrm.serve.state import NAMES_NO_PRINCIPLE, ServerState
from brrm.service.items import CallOptions
from brrm.types import RewardJudge
from brrm.types.jsonvalue import JSONDict, JSONValue
from brrm.types.strategies import STRATEGIES

Schema = MutableMapping[str, JSONValue]
Models = Mapping[type, type[BaseModel]]
"""A request model -> this server's subclass of it (:func:`request_models`)."""
NULL: JSONDict = {"type": "null"}
BEARER = Depends(HTTPBearer(scheme_name="bearer", auto_error=False))
"""The bearer scheme in the schema (the key itself is checked by :class:`~brrm.serve.security.ApiKeyMiddleware`)."""
UNAUTHORISED: dict[int | str, dict[str, Any]] = {401: {"description": "missing or wrong API key",
                                                      "model": s.ErrorResponse}}


def request_models(state: ServerState) -> Models:
    """This server's request models: each of :mod:`brrm.serve.schemas`' subclassed (same name, same validation),
    its nested request models replaced by this server's, its JSON Schema made this server's (the module docstring).
    """
    made: dict[type, type[BaseModel]] = {}
    for base in (s.ChatMessage, s.TextPart, s.HistoryMessage, s.JudgeOptions, s.PairIn, s.ScoreItemIn,
                 s.JudgeRequest, s.ScoreRequest, s.RankRequest, s.GetRewardRequest, s.CompareRequest):
        fields: dict[str, Any] = {name: (_swap(f.annotation, made), copy.copy(f)) for name, f in
                                  base.model_fields.items() if _swap(f.annotation, made) is not f.annotation}
        made[base] = create_model(base.__name__, __base__=base, __doc__=base.__doc__, __module__=base.__module__,
                                  __cls_kwargs__={"json_schema_extra": _extra(base, state)}, **fields)
    return made


def _swap(annotation: Any, made: Models) -> Any:
    """``annotation`` with each model in ``made`` replaced by its subclass (inside ``list``, ``X | None``,
    ``Annotated``); ``annotation`` itself when it holds none."""
    if isinstance(annotation, type) and annotation in made:
        return made[annotation]
    args = typing.get_args(annotation)
    new = tuple(_swap(a, made) for a in args)
    if all(a is b for a, b in zip(new, args, strict=True)):
        return annotation
    origin = typing.get_origin(annotation)  # list, Annotated (its args: the type, then the metadata) or a union
    return functools.reduce(operator.or_, new) if origin in (typing.Union, types.UnionType) else origin[new]


def _extra(base: type[BaseModel], state: ServerState) -> Callable[[JSONDict, type], None]:
    """The ``json_schema_extra`` of ``base``'s subclass: its examples, this server's rules (:data:`EDITS`) and every
    string's ``maxLength``."""
    given = base.model_config.get("json_schema_extra")

    def extra(schema: JSONDict, _cls: type) -> None:
        if isinstance(given, dict):
            schema.update(copy.deepcopy(given))
        for edit in EDITS.get(base.__name__, ()):
            edit(schema, state)
        for node in _walk(schema):
            if node.get("type") == "string" and "enum" not in node and "const" not in node:
                node["maxLength"] = state.limits.max_field_chars

    return extra


def server_router(template: APIRouter, state: ServerState, models: Models) -> APIRouter:
    """``template``'s routes as this server has them: bodies of this server's request models, the bearer scheme
    and 401 on every route but :data:`~brrm.serve.security.OPEN_PATHS` when the server has an API key, and the
    routes that name no principle (:data:`~brrm.serve.state.NAMES_NO_PRINCIPLE`) left out of the schema when the
    judge needs one from every request."""
    router = APIRouter()
    for route in template.routes:
        if not isinstance(route, APIRoute):
            raise TypeError(f"{route!r}: a brrm serve router holds API routes only")
        locked = bool(state.limits.api_key) and route.path not in OPEN_PATHS
        hidden = state.needs_principle and NAMES_NO_PRINCIPLE in route.dependencies
        router.add_api_route(
            route.path, _bound(route.endpoint, models), methods=sorted(route.methods or ()), name=route.name,
            response_model=route.response_model, status_code=route.status_code, tags=route.tags,
            dependencies=[*route.dependencies, *([BEARER] if locked else [])], summary=route.summary,
            description=route.description, response_description=route.response_description,
            responses={**route.responses, **(UNAUTHORISED if locked else {})}, response_class=route.response_class,
            include_in_schema=route.include_in_schema and not hidden, openapi_extra=route.openapi_extra)
    return router


def _bound(endpoint: Callable[..., Any], models: Models) -> Callable[..., Any]:
    """``endpoint``, its parameters of a request model taking this server's subclass instead (FastAPI reads the
    signature); ``endpoint`` itself when it has none."""
    signature = inspect.signature(endpoint, eval_str=True)
    params = [p.replace(annotation=models[p.annotation]) if isinstance(p.annotation, type) and
              p.annotation in models else p for p in signature.parameters.values()]
    if params == list(signature.parameters.values()):
        return endpoint

    @functools.wraps(endpoint)
    async def bound(**kwargs: Any) -> Any:
        return await endpoint(**kwargs)

    bound.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return bound


def _walk(node: JSONValue) -> Iterator[Schema]:
    """Every object in ``node``, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _options_of(node: Schema) -> list[Schema]:
    """The alternatives of an ``anyOf`` (pydantic writes ``X | None`` as ``anyOf: [X, null]``)."""
    options = node.get("anyOf")
    return [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []


def _props(model: Schema) -> dict[str, Schema]:
    """A model schema's ``properties`` (each a schema)."""
    props = model.get("properties")
    if not isinstance(props, dict):
        raise TypeError("OpenAPI schema: a request model without properties")
    return typing.cast(dict[str, Schema], props)


def _options(model: Schema, state: ServerState) -> None:
    """Each per-request option the judge can vary (a budget with the server's own as its maximum; a word option
    with only the choices the judge takes, said in its description); ``null`` otherwise. Whether it can is asked
    of the judge: a variant with the option's least value, or with each of a word option's choices."""
    props = _props(model)
    for request_option in request_options():
        name, mark = request_option.keyword, request_option.mark
        tried = request_option.choices if request_option.type is str else (mark.low if mark.low is not None else 0,)
        valid = [value for value in tried if _varies(state, name, value)]
        if not valid:
            props[name] = NULL
            continue
        top = request_option.current(state.judge.info) if mark.bounded else None
        for option in _options_of(props[name]):
            if option.get("type") == "integer" and isinstance(top, int):
                option["maximum"] = top
            if "enum" in option and len(valid) < len(tried):  # a principle model's decoding: no "faithful"
                option["enum"] = list(valid)
                node, takes = props[name], ", ".join(map(str, valid))
                node["description"] = f"{node.get('description', '')} This server's judge takes: {takes}."


def _varies(state: ServerState, name: str, value: str | int) -> bool:
    """Whether the judge takes ``value`` as option ``name`` of a request (a variant with it can be built)."""
    try:
        state.variants.get(CallOptions.of({name: value}))
    except ConfigError:
        return False
    return True


def _principle(model: Schema, state: ServerState) -> None:
    """``principle`` only for principle models, never blank."""
    props = _props(model)
    if not state.judge.info.takes_principle:
        props["principle"] = NULL
    for option in _options_of(props["principle"]):
        if option.get("type") == "string":
            option["pattern"] = _not_blank()  # the judge refuses an empty or blank principle


def _score_item(model: Schema, state: ServerState) -> None:
    """A ``/v1/score`` item: ``reference`` required by a pairwise judge, absent for a scalar model;
    :func:`_principle`."""
    _props(model)["reference"] = {"type": "string", "description": "the reference response (a pairwise judge "
                                  "scores P(response beats reference))"} if state.pairwise else NULL
    if state.pairwise:
        model["required"] = [*typing.cast(list[str], model.get("required", [])), "reference"]
    _principle(model, state)


@functools.cache
def _not_blank() -> str:
    """A regex pattern that matches a string with a character Python's ``str.strip`` keeps (a principle
    :func:`~brrm.types.config.check_principle` takes); written from Python's own whitespace, which differs from
    ECMA's ``\\s`` (it counts U+001C-U+001F and U+0085, not U+FEFF). Every whitespace character is in the BMP.
    Built once, when a principle model's schema is first asked for (a scan of the BMP: not at import)."""
    return "[^" + "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace()) + "]"


def _named() -> JSONDict:
    """An object that names its principle (a string): then each response is scored on that one alone."""
    return {"required": ["principle"], "properties": {"principle": {"type": "string"}}}


EXAMPLE_REFERENCE = "Blue."
"""The reference response a pairwise judge's ``/v1/score`` example items carry (scored: P(response beats it))."""
EXAMPLE_PRINCIPLE = "The response is correct."
"""The principle the examples name on a principle model without a default one."""


def _score_request(model: Schema, state: ServerState) -> None:
    """``/v1/score``: what a principle model refuses (without a default principle, an item that names none; with
    several, some items naming one and others not), ``maxItems``, and example items with a ``reference`` for a
    pairwise judge and a ``principle`` where the model has no default one."""
    every: JSONDict = {"properties": {"items": {"items": _named()}}}
    none: JSONDict = {"properties": {"items": {"items": {"properties": {"principle": NULL}}}}}
    defaults = len(state.judge.info.composition.principles)
    if state.judge.info.takes_principle and defaults != 1:
        _rules(model).append({"anyOf": [every, none]} if defaults else every)
    for also, principles in _principle_cases(every, state):
        _swap_rules(model, "items", state, _priced(state.judge, "score", principles=principles), also=also)
    extra = {"reference": EXAMPLE_REFERENCE} if state.pairwise else {}
    extra |= {"principle": EXAMPLE_PRINCIPLE} if state.needs_principle else {}
    for example in _examples(model):
        example["items"] = [{**item, **extra} for item in typing.cast(list[JSONDict], example["items"])]


def _rank_request(model: Schema, state: ServerState) -> None:
    """``/v1/rank``: the strategies the judge runs, ``reference`` exactly with that strategy, and ``maxItems`` for
    every strategy and ``swap``."""
    _props(model)["strategy"]["enum"] = [x for x in STRATEGIES if not (state.pairwise and x == "scores")]
    _rules(model).append({"if": {"required": ["strategy"], "properties": {"strategy": {"const": "reference"}}},
                          "then": {"required": ["reference"], "properties": {"reference": {"type": "string"}}},
                          "else": {"properties": {"reference": NULL}}})
    for strategy in STRATEGIES:
        resolved = ("round_robin" if state.pairwise else "scores") if strategy == "auto" else strategy
        if not (state.pairwise and resolved == "scores"):  # at least 1: the group's slot
            _swap_rules(model, "responses", state, _priced(state.judge, "group", resolved, least=1),
                        strategy=strategy, default=strategy == "auto")


def _compare_request(model: Schema, state: ServerState) -> None:
    """``/compare``: :func:`_principle` (required without a default), ``maxItems`` for every strategy, ``swap`` and
    principle case, and an example that names a principle where one is needed."""
    _principle(model, state)
    if state.needs_principle:
        _rules(model).append(_named())
    for strategy in COMPARE_STRATEGIES:
        for also, principles in _principle_cases(_named(), state):
            _swap_rules(model, "response_objs", state, _compare_price(state.judge, strategy, principles),
                        strategy=strategy, default=strategy == state.limits.compare_strategy, also=also)
    for example in _examples(model) if state.needs_principle else ():
        example["principle"] = EXAMPLE_PRINCIPLE


def _compare_price(judge: RewardJudge, strategy: str, principles: int | None) -> Price:
    """What a ``/compare`` request under ``strategy`` costs (``principles``: 1 when the request names its principle,
    None: the judge's defaults)."""
    return lambda swap: lambda n: judge.cost("pairs", len(comparison_pairs(strategy, n)), swap=swap,
                                             principles=principles)


def _examples(model: Schema) -> list[JSONDict]:
    return [e for e in typing.cast(list[JSONDict], model.get("examples", []))]


def _rules(model: Schema) -> list[JSONValue]:
    """``model``'s ``allOf`` list (created empty)."""
    return typing.cast(list[JSONValue], model.setdefault("allOf", []))


Price = Callable[[bool], Callable[[int], int]]
"""``swap -> n -> cost``: what a request of ``n`` items costs, counted by the judge (:meth:`~brrm.RewardJudge.cost`),
as admission counts it."""


def _priced(judge: RewardJudge, shape: str, strategy: str = "auto", least: int = 0,
            principles: int | None = None) -> Price:
    return lambda swap: lambda n: max(least, judge.cost(shape, n, strategy=strategy, swap=swap,
                                                        principles=principles))


def _principle_cases(named: JSONDict, state: ServerState) -> tuple[tuple[JSONDict | None, int | None], ...]:
    """(condition, principles) for each way a request is costed: one principle per response when it matches
    ``named``, else the judge's defaults; one unconditional case when the judge has at most one default principle
    (both ways then cost the same)."""
    several = len(state.judge.info.composition.principles) > 1
    return ((named, 1), ({"not": named}, None)) if several else ((None, None),)


def _most(state: ServerState, price: Callable[[int], int]) -> int:
    """The largest item count within the item limit whose cost (the judge's count, growing with the count) is
    within the judgment limit; 0 when not even one item fits."""
    return bisect.bisect_right(range(1, state.limits.item_limit + 1), state.limits.judgment_limit, key=price)


def _swap_rules(model: Schema, field: str, state: ServerState, price: Price, *,
                strategy: str | None = None, default: bool = False, also: JSONDict | None = None) -> None:
    """``field``'s ``maxItems`` for each ``swap`` value (absent or null: the judge's default), under ``strategy``
    (absent: ``default`` says whether it is the one used), for the requests that match ``also`` (None: all)."""
    has_swap = "swap" in _props(model)
    counts = {True: _most(state, price(True)), False: _most(state, price(False))}
    rules = _rules(model)
    for swap in ((True, False, None) if has_swap else (None,)):
        n = counts[state.swap if swap is None else swap]
        when: JSONDict = {"properties": {"swap": NULL if swap is None else {"const": swap}}} if has_swap else {}
        if has_swap and swap is not None:
            when["required"] = ["swap"]
        if strategy is not None:
            chosen: JSONDict = {"required": ["strategy"], "properties": {"strategy": {"const": strategy}}}
            picked: JSONValue = ({"anyOf": [chosen, {"not": {"required": ["strategy"]}},
                                            {"properties": {"strategy": NULL}}]} if default else chosen)
            when = {"allOf": [when, picked]}
        if also is not None:
            when = {"allOf": [when, also]} if when else also
        then: JSONDict = {"properties": {field: {"maxItems": n}}}
        rules.append({"if": when, "then": then} if when else then)


EDITS: dict[str, tuple[Callable[[Schema, ServerState], None], ...]] = {
    "JudgeOptions": (_options,),
    "ScoreItemIn": (_score_item,),
    "JudgeRequest": (lambda model, state: _swap_rules(model, "pairs", state, _priced(state.judge, "pairs")),),
    "ScoreRequest": (_score_request,),
    "RankRequest": (_rank_request,),
    "GetRewardRequest": (lambda model, state: _swap_rules(model, "query", state, _priced(state.judge, "score")),),
    "CompareRequest": (_compare_request,),
}
"""This server's rules of each request model, by name, in order (see the module docstring)."""
