"""Request and response bodies of ``brrm serve`` (pydantic models: validation, and the OpenAPI schema at
``/openapi.json`` with an example per endpoint).

Shapes are the contract other tools code against; fields may be added, never renamed. Results are the
dictionaries :meth:`PairwiseJudgment.to_dict`, :meth:`ScalarReward.to_dict` and :meth:`GroupResult.to_dict` write
(the same the CLI writes): a missing probability or reward is ``null`` and its ``status`` / ``reason`` say why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, create_model, model_validator

from brrm.types.strategies import STRATEGIES

Role = Literal["system", "user", "assistant", "tool"]
StrategyName = Literal[STRATEGIES]  # type: ignore[valid-type]

def _examples(example: JsonValue) -> dict[str, JsonValue]:
    """``json_schema_extra`` with one request example (shown in ``/docs`` and the OpenAPI schema)."""
    return {"examples": [example]}


def _integral(value: object) -> object:
    """A float with no fractional part as the int it equals (JSON Schema's ``integer`` counts ``1.0`` as 1); any
    other value as is, for strict validation."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _label(value: object) -> object:
    """A gold label as :data:`_integral` takes it; a boolean is refused (``true == 1`` in Python, not in JSON)."""
    if isinstance(value, bool):
        raise ValueError("a label is A, B, tie, 1 or 2, not a boolean")
    return _integral(value)


Count = Annotated[int, Field(ge=1), BeforeValidator(_integral)]
"""A JSON integer >= 1: an int, or a float with no fractional part; never a string or a boolean."""

STRICT = ConfigDict(extra="forbid", strict=True)
"""Request bodies: unknown fields refused, and no type coercion (``"swap": 0`` is not a boolean, ``"1"`` not a
number), so the body the server accepts is exactly the one its JSON schema describes."""


NULL: dict[str, JsonValue] = {"type": "null"}
USER_TURN: dict[str, JsonValue] = {"contains": {"type": "object", "required": ["role"],
                                                "properties": {"role": {"const": "user"}}}}
"""JSON Schema of a conversation with a user turn (its last-turn rule has no JSON Schema form: said in words)."""
LAST_TURN = ("The conversation must end with a user or tool turn (the judged responses are sent separately); "
             "otherwise 422.")
ONE_CONTEXT: dict[str, JsonValue] = {"oneOf": [
    {"required": ["prompt"], "properties": {"prompt": {"type": "string"}, "conversation": NULL}},
    {"required": ["conversation"], "properties": {"conversation": {"type": "array"}, "prompt": NULL}}]}
"""JSON Schema of :class:`_Context`'s rule: exactly one of ``prompt`` and ``conversation``."""

_CONV: list[JsonValue] = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]


class ChatMessage(BaseModel):
    """One turn before the judged response(s)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"anyOf": [
        {"properties": {"role": {"const": "assistant"}}},  # tool calls only on assistant turns
        {"properties": {"tool_calls": {"anyOf": [NULL, {"type": "array", "maxItems": 0}]}}}]})
    role: Role
    content: str
    tool_calls: list[dict[str, JsonValue]] | None = Field(default=None, description="assistant turns only")


class _Context(BaseModel):
    """Exactly one of ``conversation`` (messages ending with a user or tool turn) or ``prompt`` (one user turn)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=ONE_CONTEXT)
    conversation: list[ChatMessage] | None = Field(default=None, min_length=1, description=LAST_TURN,
                                                   json_schema_extra=USER_TURN)
    prompt: str | None = None

    @model_validator(mode="after")
    def _one_context(self) -> _Context:
        if (self.conversation is None) == (self.prompt is None):
            raise ValueError("give exactly one of 'conversation' (a list of messages) or 'prompt' (a string)")
        return self


TIMEOUT_FLOOR_S = 0.1
"""The shortest per-request ``timeout_s`` accepted, in seconds: below it no request could even be queued and
parsed on a loaded server (``timeout_s: 5e-324`` would be a certain 504), so it is refused as invalid input."""


class Timeout(BaseModel):
    model_config = STRICT
    """A per-request deadline, capped by the server's (``--deadline``)."""

    timeout_s: float | None = Field(default=None, ge=TIMEOUT_FLOOR_S, le=86_400, allow_inf_nan=False,
                                    description=f"seconds for queueing and judging, >= {TIMEOUT_FLOOR_S} (a shorter "
                                                "deadline is refused with 422, never clamped); capped by the "
                                                "server deadline")


def _judge_options() -> type[BaseModel]:
    """The ``options`` object of a request, generated from the options marked per-request
    (:func:`brrm.load_options.request_options`): an integer option as a JSON integer in its marked range (taken as
    :data:`Count` takes it), a word option as one of its choices; every one optional (null: the server's own)."""
    from brrm.load_options import request_options

    fields: dict[str, Any] = {}
    for option in request_options():
        kind: Any = (Annotated[int, Field(ge=option.mark.low, le=option.mark.high), BeforeValidator(_integral)]
                     if option.type is int else Literal[option.choices])  # type: ignore[valid-type]
        bound = ", at most the server's own" if option.mark.bounded else ""
        fields[option.keyword] = (kind | None, Field(default=None, description=option.help + bound))
    return create_model("JudgeOptions", __config__=STRICT, __doc__="Per-request settings of the served judge (BR-RM "
                        "judges; budgets and seed also for the generative principle models), each within the server's "
                        "own.", **fields)


if TYPE_CHECKING:
    class JudgeOptions(BaseModel):
        """Per-request settings (see :func:`_judge_options`)."""
else:
    JudgeOptions = _judge_options()


class PairIn(_Context):
    """One pair to judge."""

    id: str | None = None
    response_a: str
    response_b: str
    label: Annotated[Literal["A", "B", "tie", "1", "2", 1, 2], BeforeValidator(_label)] | None = Field(
        default=None, description="gold label, echoed with 'correct': A, B, tie, or 1 / 2 (as in LLMBar; 1 = A)")


class JudgeRequest(Timeout):
    """``POST /v1/judge``: pairs judged in order."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_examples({
        "pairs": [{"id": "p1", "prompt": "What is 2+2?", "response_a": "4", "response_b": "5", "label": "A"},
                  {"conversation": _CONV, "response_a": "Four.", "response_b": "2+2 is 22."}],
        "swap": True}))
    pairs: list[PairIn] = Field(min_length=1)
    swap: bool | None = Field(default=None, description="judge both orders (default: the server's setting)")
    options: JudgeOptions | None = None


class ScoreItemIn(_Context):
    """One response to score."""

    id: str | None = None
    response: str
    principle: str | None = Field(default=None, description="principle models: the principle to judge against")
    reference: str | None = Field(default=None, description="pairwise judges: the reference response")


class ScoreRequest(Timeout):
    """``POST /v1/score``: one reward per item, in order."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_examples({
        "items": [{"id": "r1", "prompt": "Name a primary colour.", "response": "Red."},
                  {"conversation": _CONV, "response": "4"}]}))
    items: list[ScoreItemIn] = Field(min_length=1)


class RankRequest(_Context, Timeout):
    """``POST /v1/rank``: one group of responses ranked by a strategy."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={**ONE_CONTEXT, **_examples({
        "prompt": "Name a prime number above 10.", "responses": ["11", "12", "13"], "strategy": "circular"})})
    responses: list[str] = Field(min_length=1)
    strategy: StrategyName = "auto"
    reference: str | None = None
    swap: bool | None = None
    options: JudgeOptions | None = None


class GetRewardRequest(BaseModel):
    """``POST /get_reward``: OpenRLHF's remote reward request (``query`` = templated prompt + response)."""

    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=_examples({
        "query": ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|endoftext|>"],
        "prompts": ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"],
        "labels": ["4"]}))
    query: list[str] = Field(min_length=1)
    prompts: list[str] | None = None
    labels: list[JsonValue] | None = Field(default=None, description="one per query; a pairwise judge's reference "
                                                                     "answers (strings)")


class TextPart(BaseModel):
    """One part of a NeMo Gym message's list content (its ``text`` is joined; other keys are kept and unused)."""

    model_config = ConfigDict(extra="allow", strict=True)
    text: str = ""


class HistoryMessage(BaseModel):
    """One turn of NeMo Gym's ``conversation_history`` (content: a string or a list of text parts)."""

    model_config = ConfigDict(extra="allow", strict=True)
    role: Role
    content: str | list[TextPart] = ""


def _output(text: str) -> JsonValue:
    """A Responses API object whose one message says ``text`` (the ``/compare`` example)."""
    return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


class CompareRequest(Timeout):
    """``POST /compare``: NeMo Gym ``genrm_compare``'s request."""

    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=_examples({
        "conversation_history": [{"role": "user", "content": "Name a prime number above 10."}],
        "response_objs": [_output(t) for t in ("11", "12")],
        "principle": None}))
    conversation_history: list[HistoryMessage] = Field(min_length=1, description=LAST_TURN,
                                                       json_schema_extra=USER_TURN)
    response_objs: list[dict[str, JsonValue]] = Field(min_length=1, description="Responses API objects; one whose "
                                                      "'output' is not a list is that response's invalid_input")
    principle: str | None = None
    strategy: Literal["circular", "all_pairs"] | None = Field(default=None,
                                                              description="default: the server's --compare-strategy")
    swap: bool | None = None
    options: JudgeOptions | None = None


class _Reply(BaseModel):
    """A judging route's answer: the model and provenance blocks once (:mod:`brrm.serve.replies`), then its items."""

    model: dict[str, JsonValue]
    provenance: dict[str, JsonValue] | None


class JudgeResponse(_Reply):
    """``POST /v1/judge``'s answer: the model and provenance blocks once, one judgment per pair in order."""

    judgments: list[dict[str, JsonValue]]


class ScoreResponse(_Reply):
    """``POST /v1/score``'s answer: one reward per item, in order."""

    rewards: list[dict[str, JsonValue]]


class RankResponse(_Reply):
    """``POST /v1/rank``'s answer: the group's result."""

    result: dict[str, JsonValue]


class GetRewardResponse(BaseModel):
    """OpenRLHF's reply (:func:`brrm.serve.openrlhf.reply`)."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]
    statuses: list[str]
    reasons: list[str]
    counts: dict[str, int]


class CompareResponse(BaseModel):
    """NeMo Gym ``GenRMCompareResponse`` (``comparison_results`` and ``metrics`` null for fewer than two
    responses), plus per-response statuses and reasons."""

    rewards: list[float]
    comparison_results: list[dict[str, JsonValue]] | None
    metrics: dict[str, float] | None
    statuses: list[str]
    reasons: list[str]


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    """``/ready``: 200 when ready, 503 (the same body) with the reason otherwise."""

    ready: bool
    reason: str
    queue_depth: int
    running: int
    warmup_attempts: int


class ModelsResponse(BaseModel):
    """``/v1/models``: the served model (OpenAI's list shape) with brrm's info and public limits."""

    object: Literal["list"]
    data: list[dict[str, JsonValue]]


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse, "description": what, **({"headers": RETRY_AFTER} if code in (429, 503) else {})}
    for code, what in (
        (400, "a body that cannot be read (not UTF-8, a non-numeric Content-Length), or an invalid Idempotency-Key"),
        (413, "body, item count, cost in judgments or a field over its limit"),
        (422, "invalid input (the message names the field and the valid values), or an Idempotency-Key already "
              "used for another request (the message names the key)"),
        (429, "queue full (error type queue_full); see Retry-After"),
        (503, "the backend is failing (error type backend_failing: every item failed alone, or its circuit breaker "
              "is open; see Retry-After), a stalled call still inside a backend that takes one call at a time "
              "(unavailable, with Retry-After), shutting down or stuck (unavailable), or a miscount "
              "(backend_error)"),
        (504, "the request's deadline passed"))}
"""Error answers every judging endpoint may give (documented in the OpenAPI schema; 401 is added to every
operation but ``/health`` when the server has an API key)."""
