"""The OpenAPI schema of one ``brrm serve`` process: FastAPI's schema of the request and response models, made to
state exactly what *this* server accepts and answers.

The pydantic models (:mod:`brrm.serve.schemas`) describe every server; what depends on the served judge and the
limits is added here, once, when the schema is first asked for:

* the context of a pair, item or group is ``oneOf`` a ``prompt`` string or a ``conversation`` (with at least one
  user turn); tool calls only on assistant turns;
* per-request ``options`` only where the judge can vary them (BR-RM and generative principle models), each budget
  at most the server's; a Bradley–Terry server's schema allows only their absence (``null``);
* ``reference`` required by a pairwise judge's ``/v1/score`` and absent from a scalar model's; ``principle`` only
  for principle models; ``/v1/rank`` strategies the judge runs, ``reference`` exactly with that strategy;
* ``maxItems`` from the item limit and the cost limit (per strategy and ``swap``), ``maxLength`` from the field
  limit;
* 401 and the bearer scheme when the server has an API key;
* the optional ``Idempotency-Key`` header on every judging POST (:mod:`brrm.serve.idempotency`).

Two rules of the server have no JSON Schema form (JSON Schema cannot name an array's last item or compare two
arrays' lengths), so they are stated in the descriptions, and the server answers them 422 naming the field: a
conversation ends with a user or tool turn; ``/get_reward``'s ``prompts`` and ``labels`` have one entry per
``query``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, MutableMapping

from brrm.errors import ConfigError
from brrm.load_options import request_options
from brrm.serve.idempotency import HEADER, KEY_PATTERN, MAX_ENTRIES, MAX_REPLY_BYTES, TTL_S
from brrm.serve.limits import COMPARE_STRATEGIES
from brrm.serve.nemo_gym import comparison_pairs
from brrm.serve.state import ServerState
from brrm.service.items import CallOptions
from brrm.types import RewardJudge
from brrm.types.jsonvalue import JSONDict, JSONValue
from brrm.types.strategies import STRATEGIES

Schema = MutableMapping[str, JSONValue]
NULL: JSONDict = {"type": "null"}
PRINCIPLE_FREE = ("/v1/judge", "/v1/rank", "/get_reward")
"""The judging paths whose requests name no principle: a principle model without a default principle answers each
request there 422 (:data:`~brrm.serve.state.NO_DEFAULT_PRINCIPLE`), so its schema leaves them out."""
LAST_TURN = ("The conversation must end with a user or tool turn (the judged responses are sent separately); "
             "otherwise 422.")
ONE_PER_QUERY = "One entry per query (otherwise 422)."
JUDGING = ("/v1/judge", "/v1/score", "/v1/rank", "/get_reward", "/compare")
OPEN_PATHS = ("/health",)


def server_schema(schema: dict[str, JSONValue], state: ServerState) -> dict[str, JSONValue]:
    """``schema`` (FastAPI's) with the judge's and the limits' rules (see the module docstring); returned."""
    parts = _obj(_obj(schema, "components"), "schemas")
    for name in ("PairIn", "ScoreItemIn", "RankRequest"):
        _one_context(_obj(parts, name))
    _message_rules(_obj(parts, "ChatMessage"))
    _obj(_obj(parts, "CompareRequest"), "properties")["conversation_history"] = {
        "type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/HistoryMessage"},
        "contains": _user_turn(), "description": LAST_TURN}
    _options(_obj(parts, "JudgeOptions"), state)
    _judge_fields(parts, state)
    _count_limits(parts, state)
    _examples(parts, state)
    for node in _walk(schema):
        if node.get("type") == "string" and "enum" not in node and "const" not in node:
            node["maxLength"] = state.limits.max_field_chars
    _idempotency(schema)
    _auth(schema, state)
    if state.needs_principle:  # nothing there can be scored: not offered
        for path in PRINCIPLE_FREE:
            _obj(schema, "paths").pop(path, None)
    return schema


IDEMPOTENCY = (f"Optional (IETF httpapi draft 'The Idempotency-Key HTTP Header Field'): 1 to 255 visible ASCII "
               f"characters, e.g. a quoted UUID (else 400). A retry with the same key and "
               f"the same body is answered the stored reply (header Idempotent-Replayed: true) without a second model "
               f"run; one arriving while the first runs waits for it; the same key with another body is refused "
               f"(422, naming the key). 2xx replies up to {MAX_REPLY_BYTES} bytes are kept {TTL_S:g} s, at most "
               f"{MAX_ENTRIES} of them (least recently used dropped first); failures are not kept.")


def _idempotency(schema: Schema) -> None:
    """The ``Idempotency-Key`` header parameter on the POST operation of every judging path."""
    for path in JUDGING:
        operation = _obj(_obj(schema, "paths"), path).get("post")
        if not isinstance(operation, dict):
            continue
        parameters = operation.setdefault("parameters", [])
        if isinstance(parameters, list):
            parameters.append({"name": HEADER, "in": "header", "required": False, "description": IDEMPOTENCY,
                               "schema": {"type": "string", "pattern": KEY_PATTERN}})  # 1 to MAX_KEY_CHARS


def _obj(node: Schema, key: str) -> Schema:
    value = node.setdefault(key, {})
    if not isinstance(value, MutableMapping):
        raise TypeError(f"OpenAPI schema: {key!r} is not an object")
    return value


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


def _user_turn() -> JSONDict:
    return {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}}


def _one_context(model: Schema) -> None:
    """Exactly one of ``prompt`` (a string) and ``conversation`` (messages with a user turn)."""
    props = _obj(model, "properties")
    conversation = _obj(props, "conversation")
    for option in _options_of(conversation):
        if option.get("type") == "array":
            option["contains"] = _user_turn()
    conversation["description"] = LAST_TURN
    model["oneOf"] = [
        {"required": ["prompt"], "properties": {"prompt": {"type": "string"}, "conversation": NULL}},
        {"required": ["conversation"], "properties": {"conversation": {"type": "array"}, "prompt": NULL}}]


def _message_rules(model: Schema) -> None:
    """Tool calls only on assistant turns (an empty list or null elsewhere)."""
    model["anyOf"] = [{"properties": {"role": {"const": "assistant"}}},
                      {"properties": {"tool_calls": {"anyOf": [NULL, {"type": "array", "maxItems": 0}]}}}]


def _options(model: Schema, state: ServerState) -> None:
    """Each per-request option the judge can vary (a budget with the server's own as its maximum; a word option
    with only the choices the judge takes, said in its description); ``null`` otherwise. Whether it can is asked
    of the judge: a variant with the option's least value, or with each of a word option's choices."""
    props = _obj(model, "properties")
    for request_option in request_options():
        name, mark = request_option.keyword, request_option.mark
        tried = request_option.choices if request_option.type is str else (mark.low if mark.low is not None else 0,)
        valid = [value for value in tried if _varies(state, name, value)]
        if not valid:
            props[name] = NULL
            continue
        top = request_option.current(state.judge.info) if mark.bounded else None
        for option in _options_of(_obj(props, name)):
            if option.get("type") == "integer" and isinstance(top, int):
                option["maximum"] = top
            if "enum" in option and len(valid) < len(tried):  # a principle model's decoding: no "faithful"
                option["enum"] = list(valid)
                node, takes = _obj(props, name), ", ".join(map(str, valid))
                node["description"] = f"{node.get('description', '')} This server's judge takes: {takes}."


def _varies(state: ServerState, name: str, value: str | int) -> bool:
    """Whether the judge takes ``value`` as option ``name`` of a request (a variant with it can be built)."""
    try:
        state.variants.get(CallOptions.of({name: value}))
    except ConfigError:
        return False
    return True


def _judge_fields(parts: Schema, state: ServerState) -> None:
    """``reference``, ``principle`` and the ``/v1/rank`` strategies as the judge takes them."""
    info = state.judge.info
    item = _obj(parts, "ScoreItemIn")
    if state.pairwise:
        _obj(item, "properties")["reference"] = {"type": "string", "description": "the reference response (a "
                                                 "pairwise judge scores P(response beats reference))"}
        required = item.setdefault("required", [])
        if isinstance(required, list):
            required.append("reference")
    else:
        _obj(item, "properties")["reference"] = NULL
    if not info.takes_principle:
        _obj(item, "properties")["principle"] = NULL
        _obj(_obj(parts, "CompareRequest"), "properties")["principle"] = NULL
    else:
        for model in (item, _obj(parts, "CompareRequest")):
            for option in _options_of(_obj(_obj(model, "properties"), "principle")):
                if option.get("type") == "string":
                    option["pattern"] = _not_blank()  # the judge refuses an empty or blank principle
        _principle_rules(parts, len(info.composition.principles))
    rank = _obj(parts, "RankRequest")
    strategies: list[JSONValue] = [s for s in STRATEGIES if not (state.pairwise and s == "scores")]
    _obj(_obj(rank, "properties"), "strategy")["enum"] = strategies
    _rules(rank).append({"if": {"required": ["strategy"], "properties": {"strategy": {"const": "reference"}}},
                         "then": {"required": ["reference"], "properties": {"reference": {"type": "string"}}},
                         "else": {"properties": {"reference": NULL}}})


@functools.cache
def _not_blank() -> str:
    """A regex pattern that matches a string with a character Python's ``str.strip`` keeps (a principle
    :func:`~brrm.types.config.check_principle` takes); written from Python's own whitespace, which differs from
    ECMA's ``\\s`` (it counts U+001C-U+001F and U+0085, not U+FEFF). Every whitespace character is in the BMP.
    Built once, when a principle model's schema is first asked for (a scan of the BMP: not at import)."""
    return "[^" + "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace()) + "]"


def _every_named() -> JSONDict:
    """A ``/v1/score`` request whose every item names its principle."""
    return {"properties": {"items": {"items": _named()}}}


def _principle_rules(parts: Schema, defaults: int) -> None:
    """What a principle model with ``defaults`` default principles refuses: without a default, a ``/v1/score`` item
    or a ``/compare`` request that names no principle; with several, a ``/v1/score`` request in which some items
    name one and others do not (every item names its own, or none does)."""
    every = _every_named()
    none: JSONDict = {"properties": {"items": {"items": {"properties": {"principle": NULL}}}}}
    if not defaults:
        _rules(_obj(parts, "ScoreRequest")).append(every)
        _rules(_obj(parts, "CompareRequest")).append(_named())
    elif defaults > 1:
        _rules(_obj(parts, "ScoreRequest")).append({"anyOf": [every, none]})


EXAMPLE_REFERENCE = "Blue."
"""The reference response a pairwise judge's ``/v1/score`` example items carry (scored: P(response beats it))."""
EXAMPLE_PRINCIPLE = "The response is correct."
"""The principle the examples name on a principle model without a default one."""


def _examples(parts: Schema, state: ServerState) -> None:
    """Each request example made one that this server's schema takes and its judge answers: ``/v1/score`` items
    with a ``reference`` for a pairwise judge, a ``principle`` where the model has no default one (its ``/compare``
    example too), and every example list cut to the server's ``maxItems``."""
    for name in ("JudgeRequest", "ScoreRequest", "RankRequest", "GetRewardRequest", "CompareRequest"):
        component = _obj(parts, name)
        examples = component.get("examples")
        if not isinstance(examples, list):
            continue
        component["examples"] = [_example(name, example, component, state) for example in examples]


def _example(name: str, example: JSONValue, component: Schema, state: ServerState) -> JSONValue:
    """``example`` of request model ``name`` for this server (see :func:`_examples`)."""
    if not isinstance(example, dict):
        return example
    out = dict(example)
    items = out.get("items")
    if name == "ScoreRequest" and isinstance(items, list):
        extra: JSONDict = {"reference": EXAMPLE_REFERENCE} if state.pairwise else {}
        if state.needs_principle:
            extra["principle"] = EXAMPLE_PRINCIPLE
        out["items"] = [{**item, **extra} if isinstance(item, dict) else item for item in items]
    if name == "CompareRequest" and state.needs_principle:
        out["principle"] = EXAMPLE_PRINCIPLE
    props = component.get("properties")
    for field, value in list(out.items()):
        node = props.get(field) if isinstance(props, dict) else None
        bound = node.get("maxItems") if isinstance(node, dict) else None
        if isinstance(value, list) and isinstance(bound, int):
            out[field] = value[:max(1, bound)]
    return out


def _rules(model: Schema) -> list[JSONValue]:
    """``model``'s ``allOf`` list (created empty)."""
    rules = model.setdefault("allOf", [])
    if not isinstance(rules, list):
        raise TypeError("OpenAPI schema: allOf is not a list")
    return rules


def _count_limits(parts: Schema, state: ServerState) -> None:
    """``maxItems`` of each counted field: the item limit, and the cost limit for every strategy and ``swap``, each
    cost counted by the judge (:meth:`~brrm.RewardJudge.cost`), as admission counts it."""
    judge = state.judge

    def priced(shape: str, strategy: str = "auto", least: int = 0,
               principles: int | None = None) -> Callable[[bool], Callable[[int], int]]:
        return lambda swap: lambda n: max(least, judge.cost(shape, n, strategy=strategy, swap=swap,
                                                            principles=principles))

    _swap_rules(_obj(parts, "JudgeRequest"), "pairs", state, priced("pairs"))
    several = len(judge.info.composition.principles) > 1
    for also, principles in _principle_cases(_every_named(), several):
        _swap_rules(_obj(parts, "ScoreRequest"), "items", state, priced("score", principles=principles), also=also)
    _swap_rules(_obj(parts, "GetRewardRequest"), "query", state, priced("score"))
    rank = _obj(parts, "RankRequest")
    for strategy in STRATEGIES:
        resolved = ("round_robin" if state.pairwise else "scores") if strategy == "auto" else strategy
        if state.pairwise and resolved == "scores":
            continue
        _swap_rules(rank, "responses", state, priced("group", resolved, least=1), strategy=strategy,
                    default=strategy == "auto")  # at least 1: the group's slot
    compare = _obj(parts, "CompareRequest")
    for strategy in COMPARE_STRATEGIES:
        for also, principles in _principle_cases(_named(), several):
            _swap_rules(compare, "response_objs", state, _compare_price(judge, strategy, principles),
                        strategy=strategy, default=strategy == state.limits.compare_strategy, also=also)


def _named() -> JSONDict:
    """An object that names its principle (a string): then each response is scored on that one alone."""
    return {"required": ["principle"], "properties": {"principle": {"type": "string"}}}


def _principle_cases(named: JSONDict, several: bool) -> tuple[tuple[JSONDict | None, int | None], ...]:
    """(condition, principles) for each way a request is costed: one principle per response when it matches
    ``named``, else the judge's defaults; one unconditional case when the judge has at most one default principle
    (both ways then cost the same)."""
    return ((named, 1), ({"not": named}, None)) if several else ((None, None),)


def _compare_price(judge: RewardJudge, strategy: str,
                   principles: int | None = None) -> Callable[[bool], Callable[[int], int]]:
    """``swap -> n -> cost`` of a ``/compare`` request of ``n`` responses under ``strategy`` (``principles``: 1
    when the request names its principle, None: the judge's defaults)."""
    return lambda swap: lambda n: judge.cost("pairs", len(comparison_pairs(strategy, n)), swap=swap,
                                             principles=principles)


def _most(state: ServerState, price: Callable[[int], int]) -> int:
    """The largest item count within the item limit whose cost (the judge's count) is within the judgment limit;
    0 when not even one item fits."""
    low, high = 0, state.limits.item_limit
    while low < high:
        mid = (low + high + 1) // 2
        if price(mid) <= state.limits.judgment_limit:
            low = mid
        else:
            high = mid - 1
    return low


def _swap_rules(model: Schema, field: str, state: ServerState, price: Callable[[bool], Callable[[int], int]], *,
                strategy: str | None = None, default: bool = False, also: JSONDict | None = None) -> None:
    """``field``'s ``maxItems`` for each ``swap`` value (absent or null: the judge's default), under ``strategy``
    (absent: ``default`` says whether it is the one used), for the requests that match ``also`` (None: all)."""
    has_swap = "swap" in _obj(model, "properties")
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


def _auth(schema: dict[str, JSONValue], state: ServerState) -> None:
    """With an API key: the bearer scheme, required (401) on every operation but the open paths."""
    if not state.limits.api_key:
        return
    _obj(_obj(schema, "components"), "securitySchemes")["bearer"] = {"type": "http", "scheme": "bearer"}
    for path, operations in _obj(schema, "paths").items():
        if path in OPEN_PATHS or not isinstance(operations, dict):
            continue
        for operation in operations.values():
            if isinstance(operation, dict):
                operation["security"] = [{"bearer": []}]
                _obj(operation, "responses")["401"] = {
                    "description": "missing or wrong API key",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
