"""A :class:`~brrm.types.RewardJudge` over a running ``brrm serve``: the one HTTP client of brrm's own server.

``RemoteJudge("http://HOST:8000")`` reads the server's judge (``GET /v1/models``) and then answers every
``RewardJudge`` call with the server's endpoints — ``judge_pairs`` → ``POST /v1/judge``, ``score`` →
``POST /v1/score``, ``rank`` / ``rank_groups`` → ``POST /v1/rank`` (one request per group, sent concurrently so
the server's scheduler coalesces them) — returning the same typed results a local judge returns (decoded by
:mod:`brrm.types.codec`). Batches larger than the server takes per request (its ``item_limit``) are split.

Failures follow the interface's rule: a mistake of the caller's (the server answers 400/413/422) raises
:class:`~brrm.errors.ConfigError` with the server's message, before or instead of any judging; an overloaded
server (429/503) is retried after its ``Retry-After`` (at most ``retries`` times; a 503 ``backend_failing``, a
failing backend, never sooner than 1 s, and the server does not bisect a retried request again); a transport
error, a timeout or a server error makes every item of that request a ``backend_error`` result with the reason —
never an exception, never a number. Each request carries its own ``Idempotency-Key``, reused on its retries (after
429/503, after a timeout or dropped connection, and after a gateway's bare 5xx: Ray Serve's proxy when the ingress
replica holding the request died, a load balancer), so a retry never makes the server judge it twice
(:mod:`brrm.service.transport`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar, cast

from brrm.errors import ConfigError
from brrm.service.transport import post_json
from brrm.types import (
    Conversation,
    GroupResult,
    JudgeInfo,
    PairwiseJudgment,
    ScalarReward,
    Status,
    Verdict,
    check_float,
    check_int,
    check_same_length,
)
from brrm.types.codec import group_from_dict, judgment_from_dict, reward_from_dict
from brrm.types.config import check_text
from brrm.types.conversation import ConversationLike
from brrm.types.cost import JudgmentCost
from brrm.types.jsonvalue import JSONDict, JSONValue
from brrm.types.protocols import OnResult, OnStep, Principles, Progress, SingleItems

if TYPE_CHECKING:
    import httpx

R = TypeVar("R")


class RemoteJudge(SingleItems):
    """A judge served by ``brrm serve`` at ``url``, used like any :func:`brrm.load` judge.

    Args:
        url: the server's base URL (``http://HOST:PORT``).
        api_key: the server's ``--api-key`` (sent as ``Authorization: Bearer``); None: none.
        timeout_s: per-request deadline in seconds (sent as ``timeout_s`` and used as the HTTP timeout), > 0.
        retries: how many times a request is retried after a 429/503 answer or a transport failure (a timeout, a
            dropped connection, a gateway's 5xx without brrm's error body), under its own Idempotency-Key, >= 0.
        concurrency: requests in flight at once (``rank_groups``, split batches), >= 1.
        transport: the httpx transport requests go through (None: HTTP; :mod:`brrm.serve.ray.client` passes one
            that calls a Ray Serve app's handle).

    Raises:
        ConfigError: on an invalid argument, or a server that cannot be reached or is not a brrm server
            (checked once here, with ``GET /v1/models``).
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 600.0, retries: int = 3,
                 concurrency: int = 8, transport: httpx.BaseTransport | None = None) -> None:
        import httpx

        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be an http(s) URL of brrm serve, got {url!r}")
        self.url, self.timeout_s = url.rstrip("/"), check_float("timeout_s", timeout_s, low=0, low_open=True)
        self.retries, self.concurrency = check_int("retries", retries, low=0), check_int("concurrency", concurrency,
                                                                                          low=1)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout_s + 5, transport=transport)
        self._api_key, self._retries_setting, self._transport = api_key, retries, transport
        model = self._models()
        self.info = _served_info(self.url, model)
        limits = model.get("limits")
        limit = limits.get("item_limit", 64) if isinstance(limits, dict) else 64
        self.item_limit = limit if isinstance(limit, int) and limit >= 1 else 64
        self.options: JSONDict = {}  # per-request judge options (with_options)
        self.swap: bool | None = None

    def _models(self) -> JSONDict:
        import httpx

        try:
            resp = self._client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise ConfigError(f"brrm serve at {self.url} cannot be reached: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise ConfigError(f"brrm serve at {self.url} answered GET /v1/models with HTTP {resp.status_code}: "
                              f"{resp.text[:300]}")
        data = resp.json().get("data") if resp.headers.get("content-type", "").startswith("application/json") else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise ConfigError(f"{self.url} is not a brrm server (GET /v1/models has no model)")
        return data[0]

    # ------------------------------------------------------------------------------------------ RewardJudge
    def judge_pairs(self, conversations: Sequence[ConversationLike], responses_a: Sequence[str],
                    responses_b: Sequence[str], /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]:
        """``POST /v1/judge``; see :class:`~brrm.types.RewardJudge`.

        Raises:
            ConfigError: on mismatched lengths, an invalid conversation or response, principles (the server's
                ``/v1/judge`` takes none), or the server refusing the request.
        """
        if principles is not None:
            raise ConfigError("principles: brrm serve's /v1/judge takes none; score principle models with score()")
        n = _same_length(conversations=conversations, responses_a=responses_a, responses_b=responses_b, ids=ids,
                         labels=labels)
        items: list[JSONDict] = [{**_context(conversations[k], f"conversations[{k}]"),
                  "response_a": _text(responses_a[k], f"responses_a[{k}]"),
                  "response_b": _text(responses_b[k], f"responses_b[{k}]"),
                  **({"id": str(ids[k])} if ids is not None else {}),
                  **({"label": _label(labels[k])} if labels is not None and labels[k] is not Verdict.NONE else {})}
                 for k in range(n)]
        swap = self.swap if swap is None else swap
        extra: JSONDict = {**({} if swap is None else {"swap": bool(swap)}),
                           **({"options": self.options} if self.options else {})}
        out = self._batched("/v1/judge", "pairs", items, extra, "judgments", progress)
        results = [judgment_from_dict(d) if isinstance(d, Mapping) else _failed_judgment(d, items[k])
                   for k, d in enumerate(out)]
        return _reported(results, on_result)

    def score(self, conversations: Sequence[ConversationLike], responses: Sequence[str], /, *,
              principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None,
              progress: Progress = None, on_result: OnResult = None) -> list[ScalarReward]:
        """``POST /v1/score``; see :class:`~brrm.types.RewardJudge`.

        Raises:
            ConfigError: on mismatched lengths, invalid inputs, per-request options (``with_options``; the
                server's ``/v1/score`` takes none), or the server refusing the request (e.g. ``references`` missing
                for a pairwise judge).
        """
        if self.options:
            raise ConfigError(f"options {', '.join(sorted(self.options))}: brrm serve's /v1/score takes no "
                              "per-request options (they apply to judge_pairs and rank); score with a judge "
                              "made without them")
        n = _same_length(conversations=conversations, responses=responses, references=references, ids=ids)
        per = _principles(principles, n)
        items: list[JSONDict] = [{**_context(conversations[k], f"conversations[{k}]"),
                  "response": _text(responses[k], f"responses[{k}]"),
                  **({"reference": _text(references[k], f"references[{k}]")} if references is not None else {}),
                  **({"principle": per[k]} if per is not None else {}),
                  **({"id": str(ids[k])} if ids is not None else {})} for k in range(n)]
        out = self._batched("/v1/score", "items", items, {}, "rewards", progress)
        return _reported([reward_from_dict(d) if isinstance(d, Mapping) else
                          ScalarReward.failed(Status.BACKEND_ERROR, str(d), id=str(items[k].get("id", ""))) for k, d in
                          enumerate(out)], on_result)

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]:
        """One ``POST /v1/rank`` per group, sent concurrently; see :class:`~brrm.types.RewardJudge`.

        Raises:
            ConfigError: on mismatched lengths, invalid inputs, principles, or the server refusing a group.
        """
        if principles is not None:
            raise ConfigError("principles: brrm serve's /v1/rank takes none")
        n = _same_length(conversations=conversations, groups=groups, references=references)
        bodies: list[JSONDict] = [{**_context(conversations[g], f"conversations[{g}]"),
                   "responses": [_text(r, f"groups[{g}][{i}]") for i, r in enumerate(groups[g])],
                   "strategy": strategy, "timeout_s": self.timeout_s,
                   **({"options": self.options} if self.options else {}),
                   **({"reference": _text(references[g], f"references[{g}]")} if references is not None else {}),
                   **({} if (swap if swap is not None else self.swap) is None
                      else {"swap": bool(swap if swap is not None else self.swap)})} for g in range(n)]
        done = [0]

        def one(body: JSONDict) -> GroupResult:
            reply = self._post("/v1/rank", body)
            done[0] += 1
            if progress is not None:
                progress(done[0] / n)
            size = len(cast(list[str], body["responses"]))
            if isinstance(reply, str):
                return _failed_group(reply, size, strategy)
            result = self._same_weights(_with_reply_provenance(reply.get("result"), reply))
            if not isinstance(result, dict):
                return _failed_group("brrm serve's /v1/rank reply has no result", size, strategy)
            return group_from_dict(result)

        with ThreadPoolExecutor(min(self.concurrency, max(n, 1))) as pool:
            return list(pool.map(one, bodies))

    def with_options(self, **overrides: object) -> RemoteJudge:
        """A variant over the same server whose requests carry other settings: ``swap``, and the per-request
        judge options ``brrm serve`` takes (``max_new_tokens``, ``max_total_tokens``, ``decoding``, ``seed``;
        each within the server's own) that the served judge's kind can vary (:meth:`request_options`: none for a
        Bradley–Terry model). It opens its own connections; closing it leaves the server running.

        Raises:
            ConfigError: on another option (or one the served kind cannot vary), naming the valid ones, or a value
                that is not an int or a string.
        """
        own = dict(overrides)
        swap = own.pop("swap", self.swap)
        valid = self.request_options()
        unknown = sorted(set(own) - set(valid))
        if unknown:
            raise ConfigError(f"option {unknown[0]!r} cannot be varied over brrm serve for this judge "
                              f"({self.info.describe()}); valid: {', '.join(('swap', *valid))}")
        values: JSONDict = {}
        for name, value in own.items():
            if not isinstance(value, int | str) or isinstance(value, bool):
                raise ConfigError(f"option {name!r} must be an int or a string, got {value!r}")
            values[name] = value
        if swap is not None and not isinstance(swap, bool):
            raise ConfigError(f"swap must be a bool or None, got {swap!r}")
        variant = RemoteJudge(self.url, api_key=self._api_key, timeout_s=self.timeout_s, retries=self.retries,
                              concurrency=self.concurrency, transport=self._transport)
        variant.options, variant.swap = {**self.options, **values}, swap
        return variant

    def request_options(self) -> tuple[str, ...]:
        """The per-request judge options (:func:`brrm.load_options.request_options`) the served judge can vary:
        those its kind (the ``kind`` of ``GET /v1/models``) takes — none for a Bradley–Terry model, whose requests
        never carry them (``swap`` is always accepted: it changes nothing for a scalar model)."""
        from brrm.load_options import judge_option_names, request_options
        from brrm.types import KINDS

        names = tuple(o.keyword for o in request_options())
        if self.info.kind not in KINDS:  # a server that names no known kind: its own checks decide
            return names
        takes = judge_option_names(self.info.kind)
        return tuple(name for name in names if name in takes)

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> JudgmentCost:
        """The work a request makes on the server, as the served judge's own ``judgment_cost`` counts it: a
        pairwise judge's ordered judgments (times two with swap, times its ``samples``), a scalar model's scored
        sequences (each response once per principle: ``principles`` when the request names its own, else the
        served judge's defaults).

        Raises:
            ConfigError: on an unknown shape or strategy, n < 0, ``principles`` < 1, or ``principles`` for a judge
                that takes none.
        """
        from brrm.compose import pairwise_cost, scalar_judge_cost

        composition = self.info.composition
        if composition.cascade:  # a served cascade: both stages, from its record
            from brrm.compose.cascade import described_cost

            return described_cost(self.info, shape, n, strategy=strategy, swap=self.swap if swap is None else swap,
                                  principles=principles)
        if not self.info.pairwise:
            return scalar_judge_cost(self.info, shape, n, strategy=strategy, principles=principles)
        both = bool(composition.swap if swap is None and self.swap is None
                    else (self.swap if swap is None else swap))
        return pairwise_cost(shape, n, strategy=strategy, swap=both, samples=composition.samples,
                             principles=principles)

    def get_reward(self, queries: Sequence[str], prompts: Sequence[str] | None,
                   labels: Sequence[JSONValue] | None) -> JSONDict:
        """OpenRLHF's ``POST /get_reward`` (its reply as the server gives it: ``rewards``, ``scores``,
        ``extra_logs``, ``statuses``, ``reasons``), retried like every request after ``Retry-After``.

        Raises:
            ConfigError: the server refused the request (4xx). RuntimeError: the server failed (5xx), stayed busy,
                or could not be reached.
        """
        body: JSONDict = {"query": list[JSONValue](queries)}
        if prompts is not None:
            body["prompts"] = list[JSONValue](prompts)
        if labels is not None:
            body["labels"] = list(labels)
        reply = self._post("/get_reward", body)
        if isinstance(reply, str):
            raise RuntimeError(reply)
        return reply

    def close(self) -> None:
        """Close the HTTP connections (the server and its model keep running)."""
        self._client.close()

    def __enter__(self) -> RemoteJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shape = "pairwise" if self.info.pairwise else "scalar"
        return f"RemoteJudge({self.url!r}, model={self.info.model!r}, {shape})"

    # ------------------------------------------------------------------------------------------ transport
    def _batched(self, path: str, field: str, items: list[JSONDict], extra: JSONDict, key: str,
                 progress: Progress) -> list[JSONDict | str]:
        """Each item's result dict, or the reason its request failed; requests of at most ``item_limit``."""
        chunks = [items[i:i + self.item_limit] for i in range(0, len(items), self.item_limit)]
        done = [0]

        def one(chunk: list[JSONDict]) -> list[JSONDict | str]:
            reply = self._post(path, {field: list[JSONValue](chunk), "timeout_s": self.timeout_s, **extra})
            done[0] += len(chunk)
            if progress is not None:
                progress(done[0] / max(len(items), 1))
            if isinstance(reply, str):
                return [reply] * len(chunk)
            results = reply.get(key)
            if not isinstance(results, list) or len(results) != len(chunk):
                count = len(results) if isinstance(results, list) else 0
                return [f"brrm serve returned {count} {key} for {len(chunk)} item{'s' if len(chunk) != 1 else ''}"
                        ] * len(chunk)
            out: list[JSONDict | str] = []
            for r in results:
                merged = self._same_weights(_with_reply_provenance(r, reply))
                out.append(merged if isinstance(merged, dict) else f"brrm serve returned a {type(r).__name__}, "
                           "not a result object")
            return out

        if not chunks:
            return []
        with ThreadPoolExecutor(min(self.concurrency, len(chunks))) as pool:
            return [r for part in pool.map(one, chunks) for r in part]

    def _same_weights(self, result: JSONValue) -> JSONValue:
        """``result`` when every fingerprint in its provenance is the one this judge was loaded for.

        Raises:
            ConfigError: when the server now judges with other weights (restarted on other weights behind the same
                URL): its results are not this judge's, so none is returned as if it were.
        """
        for found in _fingerprints(result):
            if found != self.info.fingerprint:
                raise ConfigError(f"the brrm serve at {self.url} now judges with other weights (fingerprint "
                                  f"{found}; this judge was loaded for {self.info.fingerprint}): load it again")
        return result

    def _post(self, path: str, body: JSONDict) -> JSONDict | str:
        """The reply's JSON, or a reason (a transport or server failure); raises for the caller's mistakes. One
        idempotency key per call, reused on its retries (:func:`~brrm.service.transport.post_json`)."""
        return post_json(self._client, path, body, retries=self.retries, where=self.url)


# ------------------------------------------------------------------------------------------ helpers
def _reported(results: list[R], on_result: OnResult) -> list[R]:
    """``results``, each passed to ``on_result`` first (a remote call knows them all when it returns)."""
    if on_result is not None:
        for i, r in enumerate(results):
            on_result(i, r)
    return results


def _same_length(**lists: Sequence[object] | None) -> int:
    """The batch's length (:func:`~brrm.types.check_same_length` over the inputs given)."""
    return check_same_length(**{k: v for k, v in lists.items() if v is not None})


def _context(value: ConversationLike, where: str) -> JSONDict:
    """The request's ``prompt`` (a lone user turn) or ``conversation``, validated here first."""
    conv = Conversation.coerce(value, where=where)
    if len(conv.messages) == 1 and conv.messages[0].role == "user" and not conv.messages[0].tool_calls:
        return {"prompt": conv.messages[0].content}
    return {"conversation": cast(list[JSONValue], conv.to_list())}  # messages are JSON (Message.to_dict)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {type(value).__name__}")
    return check_text(where, value)


def _label(value: object) -> str:
    if not isinstance(value, Verdict):
        raise ConfigError(f"labels must be brrm.Verdict values, got {value!r}")
    return "tie" if value is Verdict.TIE else value.value


def _principles(principles: Principles, n: int) -> list[str] | None:
    if principles is None or isinstance(principles, str):
        return None if principles is None else [principles] * n
    out = list(principles)
    if len(out) != n:
        raise ConfigError(f"principles has {len(out)} entries for {n} items")
    return [_text(p, f"principles[{k}]") for k, p in enumerate(out)]


RESULT_CHILDREN = ("sub_judgments", "rewards", "judgments")
"""The keys of a result dict that hold its sub-results (swap sub-judgments, a group's rewards and judgments)."""


def result_nodes(node: JSONValue) -> Iterator[JSONDict]:
    """Every result dict in ``node`` (a result dict as a reply carries it): itself, then its sub-results', depth
    first; none when ``node`` is not a dict."""
    if isinstance(node, dict):
        yield node
        for key in RESULT_CHILDREN:
            children = node.get(key)
            for child in children if isinstance(children, list) else ():
                yield from result_nodes(child)


def _fingerprints(result: JSONValue) -> set[str]:
    """The weight fingerprints named in a result dict's provenance (and its sub-results')."""
    provs = [node.get("provenance") for node in result_nodes(result)]
    return {str(p["fingerprint"]) for p in provs if isinstance(p, dict) and isinstance(p.get("fingerprint"), str)
            and p["fingerprint"]}


def _with_reply_provenance(result: JSONValue, reply: Mapping[str, JSONValue]) -> JSONValue:
    """A result dict (changed in place) with the reply's shared provenance (``brrm serve`` writes ``model``,
    ``backend``, ``template_hash`` and ``decoding`` once per reply) filled back into each nested ``provenance``."""
    shared = reply.get("provenance")
    if isinstance(shared, dict):
        for node in result_nodes(result):
            if isinstance(node.get("provenance"), dict):
                node["provenance"] = {**shared, **cast(JSONDict, node["provenance"])}
    return result


def _served_info(url: str, model: JSONDict) -> JudgeInfo:
    """The served judge's :class:`JudgeInfo` from its ``/v1/models`` entry (its spec loads on the server only);
    ``concurrent`` is True (requests may be sent from many threads at once: the server coalesces them).

    Raises:
        ConfigError: when a field has the wrong type (not a brrm server's answer).
    """
    texts = {k: model.get(k, "") for k in ("model", "kind", "recipe", "backend", "chat_template_hash",
                                           "template_hash", "default_strategy", "fingerprint")}
    traits = {k: model.get(k) for k in ("pairwise", "takes_principle", "needs_reference")}
    options, chunk = model.get("options") or {}, model.get("chunk_size", 64)
    if not (all(isinstance(v, str) for v in texts.values()) and all(v is None or isinstance(v, bool)
                                                                     for v in traits.values())
            and isinstance(options, dict) and isinstance(chunk, int) and not isinstance(chunk, bool)):
        raise ConfigError(f"{url} is not a brrm server (GET /v1/models has malformed judge fields)")
    from brrm.load_options import config_from_record

    s = {k: str(v) for k, v in texts.items()}
    b = {k: v if isinstance(v, bool) else None for k, v in traits.items()}
    return JudgeInfo.from_dict({**s, **b, "options": options, "chunk_size": max(1, chunk), "concurrent": True},
                               config=config_from_record(s["kind"], options))


def _failed_judgment(reason: str, item: Mapping[str, JSONValue]) -> PairwiseJudgment:
    return PairwiseJudgment(Verdict.NONE, Status.BACKEND_ERROR, reason=str(reason), id=str(item.get("id", "")))


def _failed_group(reason: str, n: int, strategy: str) -> GroupResult:
    zeros = tuple(tuple(0 for _ in range(n)) for _ in range(n))
    return GroupResult(strategy=strategy, rewards=tuple(ScalarReward.failed(Status.BACKEND_ERROR, reason, id=str(k))
                                                        for k in range(n)),
                       reward_range=(-math.inf, math.inf), wins=zeros, ties=zeros, n_judgments=0, n_scored=0,
                       failed=0, ranking=())
