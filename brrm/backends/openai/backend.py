"""Remote backend: one or more OpenAI-compatible servers (``vllm serve``), through the completions API.

* **Protocol.** Prompts are sent as token ids to ``POST {base_url}/completions`` (``return_token_ids``), so
  the BR-RM raw-concatenation protocol and the judge's exact prompt tokens are preserved; no chat template
  is applied by the server.
* **Constraints.** Programs run as chains of requests (:mod:`brrm.backends.blackbox.phases`): patterns through
  the ``structured_outputs`` field (never the removed ``guided_*`` fields, which vLLM ignores silently),
  choices through ``allowed_token_ids`` + ``logprob_token_ids`` (token-id keys via
  ``return_tokens_as_token_ids``). Every constrained output is checked locally, so a server that ignores
  a field yields ``finish_reason="error"`` instead of an unconstrained result. Verdict logits are raw
  logits when the server runs ``--logprobs-mode raw_logits``, else raw log-probabilities (one constant
  apart, so P(A ≻ B) is the same). The verdict is scored in its own temperature-1, top-p-1 step, so a
  server reporting processed logprobs gives the same P; a server whose mode was not declared
  (``logprobs_mode="unknown"``, the default) makes results record ``logprob_semantics="unknown"``.
* **Seeds.** Each request carries its item's ``seed``, but an OpenAI-compatible server may ignore it (vLLM honours
  it; others may not, and none says so in its answer), so results record ``seeded: false`` in their provenance: a
  sampled result from a server is not promised to reproduce.
* **Scale-out.** Requests run on a thread pool; each program run is sent round-robin over the base URLs, except
  that a prompt extending a sequence already run on a server goes back to that server (turn 2 finds turn 1's
  prefix cache there). Each server has an adaptive concurrency limit (:mod:`~brrm.backends.openai.limiter`:
  from ``initial_concurrency`` requests in flight, +1 per window of successes up to ``max_concurrency``, halved
  on a 429 or 503), shared by every call of the backend. Retries with exponential backoff (never sooner than an
  answer's ``Retry-After``, which also pauses every call to that server) on 429, 5xx, timeouts and connection
  errors move to the next URL. A request that still fails becomes ``Completion.failed(reason)`` — never an
  exception that loses the rest of the batch.

HTTP is httpx's (:mod:`~brrm.backends.openai.transport`): one client per backend, closed with it, whose pool keeps
connections alive between requests.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from brrm.backends.base import BackendInfo, Capabilities, Completion, GenerationRequest, Score
from brrm.backends.blackbox.phases import Phase, PhaseResult, ProgramRun, TokenInfo, vocab_score
from brrm.backends.blackbox.request import sampling_fields
from brrm.backends.openai.limiter import ConcurrencyPolicy, LimitState
from brrm.backends.openai.routing import Router
from brrm.backends.openai.transport import RequestFailed, Transport
from brrm.backends.options import SERVER_LOGPROBS_MODES, OpenAIOptions, set_options
from brrm.errors import BackendUnavailable, ConfigError
from brrm.types.jsonvalue import JSONDict, JSONValue

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class OpenAIBackend:
    """The judges' backend over OpenAI-compatible vLLM servers (see the module docstring).

    Args:
        base_urls: server URLs, e.g. ``["http://10.0.0.5:8000/v1"]`` (``/v1`` is appended if missing).
        model: the served model name sent in every request.
        tokenizer: the model's Hugging Face tokenizer (the judges build prompts with it).
        max_context: the server's context window in tokens (``max_model_len``).
        max_concurrency: the most requests in flight per server, >= 1: the ceiling of its adaptive limit.
        initial_concurrency: requests in flight per server at start, in [1, max_concurrency]; default 16, or
            ``max_concurrency`` when that is lower.
        timeout_s: per-request socket timeout in seconds, > 0.
        http_retries: retries of a retryable failure, >= 0 (each on the next server).
        backoff_s, max_backoff_s: first retry delay and its cap, seconds (doubling, ±25 % jitter).
        api_key: sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY`` if set.
        chunk_size: ordered judgments per judge chunk, >= 1.
        logprobs_mode: the servers' ``--logprobs-mode`` as declared (one of
            :data:`~brrm.backends.options.SERVER_LOGPROBS_MODES`); ``unknown`` makes results record
            ``logprob_semantics="unknown"``, any known mode ``raw``.

    Raises:
        ConfigError: on an empty URL list or an out-of-range option.
        BackendUnavailable: when httpx is not installed.
    """

    DEFAULT_CONCURRENCY = ConcurrencyPolicy()
    """The defaults of ``initial_concurrency`` (16) and ``max_concurrency`` (64)."""

    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_context: int,
        max_concurrency: int = DEFAULT_CONCURRENCY.maximum,
        initial_concurrency: int | None = None,
        timeout_s: float = 600.0,
        http_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        api_key: str | None = None,
        chunk_size: int = 4096,
        logprobs_mode: str = "unknown",
    ) -> None:
        _check_settings(base_urls, logprobs_mode, (timeout_s, backoff_s, max_backoff_s),
                        max_concurrency=max_concurrency, http_retries=http_retries, chunk_size=chunk_size,
                        max_context=max_context)
        self.transport = Transport(
            base_urls,
            timeout_s=timeout_s,
            max_retries=http_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            concurrency=ConcurrencyPolicy(
                min(self.DEFAULT_CONCURRENCY.initial, max_concurrency) if initial_concurrency is None
                else initial_concurrency, max_concurrency),
        )
        self.model = model
        self.tokenizer = tokenizer
        self.tokens = TokenInfo(tokenizer)
        self.end_of_turn_id = self.tokens.end_of_turn_id
        self.max_context = max_context
        self.max_concurrency = max_concurrency
        self.workers = max_concurrency * len(self.transport.limits)
        self.capabilities = Capabilities(generate=True, programs=True, classify=True, vocab_logit=True,
                                         kv_reuse=False, chunk_size=chunk_size, concurrent=True,
                                         logprob_semantics="unknown" if logprobs_mode == "unknown" else "raw",
                                         seeded=False)  # the seed is sent; a server may ignore it
        self.router = Router(len(self.transport.base_urls))
        self.info = BackendInfo(
            "openai", model, {"base_urls": list(self.transport.base_urls), "max_context": max_context,
                              "logprobs_mode": logprobs_mode}
        )
        self.stats = {"requests": 0, "phases": 0, "failed": 0, "cached_tokens": 0, "generated_tokens": 0}
        self._stats_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def from_options(cls, source: str, options: OpenAIOptions, *, name: str | None = None,
                     task: str = "generate") -> OpenAIBackend:
        """The backend :func:`brrm.load` builds: ``options`` (:class:`~brrm.backends.options.OpenAIOptions`) as
        :meth:`connect` takes them (``base_url``: one URL or several), for ``source``'s tokenizer. ``task`` is
        accepted for the registry's one signature: a server both generates and scores.

        Raises:
            ConfigError, BackendUnavailable: as :meth:`connect`.
        """
        del task
        given = set_options(options)
        urls = given.pop("base_url", None)
        return cls.connect(source, base_urls=[urls] if isinstance(urls, str) else list(urls or ()), name=name,
                           **given)

    @classmethod
    def connect(
        cls,
        model: str,
        *,
        base_urls: Sequence[str] | str | None = None,
        base_url: str | None = None,
        tokenizer: str | None = None,
        served_model_name: str | None = None,
        max_context: int | None = None,
        trust_remote_code: bool = False,
        name: str | None = None,
        **options: Any,
    ) -> OpenAIBackend:
        """Connect to servers and load the tokenizer (the ``--backend openai`` path of the CLI).

        Args:
            model: the model's hub id or local directory (its tokenizer is loaded from there) and, unless
                ``served_model_name`` is given, the name sent to the server. When the server serves exactly
                one model under another name, that one is used.
            base_urls, base_url: one or more server URLs.
            tokenizer: tokenizer path when it is not ``model``.
            served_model_name: the server's model name.
            max_context: context window; default: the server's ``max_model_len`` from ``GET /v1/models``.
            trust_remote_code: passed to ``AutoTokenizer``.
            **options: constructor options (max_concurrency, initial_concurrency, timeout_s, http_retries,
                backoff_s, api_key, …).

        Raises:
            ConfigError: without a URL, or when the server does not serve the requested model.
            BackendUnavailable: when no server answers ``GET /v1/models``.
        """
        options.pop("batch_size", None), options.pop("dtype", None), options.pop("device", None)
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls or [])
        urls += [base_url] if base_url else []
        if not urls:
            raise ConfigError(
                "the openai backend needs at least one server URL (--base-url http://HOST:PORT/v1)"
            )
        probe = Transport(
            urls,
            timeout_s=30.0,
            max_retries=2,
            backoff_s=0.5,
            max_backoff_s=2.0,
            api_key=options.get("api_key") or os.environ.get("OPENAI_API_KEY"),
        )
        try:
            listing = probe.call(0, "GET", "/models")
        except RequestFailed as exc:
            raise BackendUnavailable(
                f"no OpenAI-compatible server answered: {exc}",
                hint="start one (python -m vllm.entrypoints.openai.api_server --model …) or fix --base-url",
            ) from exc
        finally:
            probe.close()
        served, served_len = _pick_model(listing, served_model_name or model)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer or model, trust_remote_code=trust_remote_code)
        backend = cls(urls, served, tok, max_context=max_context or served_len or 32768, **options)
        if name:
            backend.info = BackendInfo("openai", name, backend.info.details)
        return backend

    # ----------------------------------------------------------------------------------------- generate
    def generate(
        self,
        requests: Sequence[GenerationRequest],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        keep_kv: bool = False,
        on_complete: Callable[[int], None] | None = None,
        top_k: int = 0,
    ) -> list[Completion]:
        """Run every request; one Completion per request, in order. Never raises for one bad request.

        Args:
            requests: prompts in token ids with budgets, seeds and optional programs.
            temperature: >= 0 (0 = greedy). top_p: in (0, 1]. top_k: >= 0 (0 = no cut; sent as -1).
            keep_kv: ignored (servers cache prefixes themselves).
            on_complete: called (from a worker thread) with a request's index when it finishes.
        """
        del keep_kv
        pool = self._executor()
        futures = [pool.submit(self._run, r, temperature, top_p, top_k) for r in requests]
        if on_complete is not None:
            for i, fut in enumerate(futures):
                fut.add_done_callback(_report(on_complete, i))
        out = [fut.result() for fut in futures]  # transport failures are error completions already; a bug raises
        with self._stats_lock:
            self.stats["requests"] += len(out)
            self.stats["failed"] += sum(c.finish_reason == "error" for c in out)
        return out

    def _run(self, request: GenerationRequest, temperature: float, top_p: float, top_k: int = 0) -> Completion:
        run = ProgramRun(request, self.tokens, temperature, top_p, top_k)
        server = self.router.pick(request.prompt_ids)
        while (phase := run.next_phase()) is not None:
            run.feed(self.complete(phase, temperature, top_p, server=server, top_k=top_k))
        self.router.remember(tuple(request.prompt_ids), server)
        self.router.remember(tuple(request.prompt_ids) + tuple(run.generated), server)
        return run.completion()

    def complete(self, phase: Phase, temperature: float, top_p: float, *, server: int = 0,
                 top_k: int = 0) -> PhaseResult:
        """One phase as one completions request (with retries); failures come back as ``error`` results."""
        try:
            data = self.transport.call(server, "POST", "/completions", self._body(phase, temperature, top_p, top_k))
            result = _parse_choice(data)
        except RequestFailed as exc:
            return PhaseResult((), "error", error=str(exc))
        with self._stats_lock:
            self.stats["phases"] += 1
            self.stats["cached_tokens"] += result.cached_tokens or 0
            self.stats["generated_tokens"] += len(result.token_ids)
        return result

    def _body(self, phase: Phase, temperature: float, top_p: float, top_k: int = 0) -> dict[str, object]:
        """The completions body of ``phase``: its sampling fields
        (:func:`~brrm.backends.blackbox.request.sampling_fields`; ``top_k`` -1 when it does not cut, so the
        server's generation-config default does not apply), the prompt as token ids, token ids back, and the
        options' logits keyed by token id."""
        body: dict[str, object] = {"model": self.model, "prompt": list(phase.prompt_ids),
                                   **sampling_fields(phase, temperature, top_p, top_k),
                                   "return_token_ids": True, "stream": False}
        body.setdefault("top_k", -1)
        if phase.logprob_ids:
            body.update(logprobs=max(len(phase.logprob_ids), phase.top_logprobs), return_tokens_as_token_ids=True)
        if phase.regex:
            body["structured_outputs"] = {"regex": phase.regex}
        return body

    def classify(self, sequences: Sequence[Sequence[int]], *, token_id: int | None = None) -> list[Score]:
        """One scalar per token sequence, in order.

        ``token_id=None``: the server's one-label classifier through vLLM's pooling API (``POST /classify``
        with token-id input and ``use_activation: false``, so the raw logit, not a sigmoid). ``token_id=k``:
        the raw logit of vocabulary token ``k`` at the last position, from a one-token completion with
        ``logprob_token_ids`` (raw logits when the server runs ``--logprobs-mode raw_logits``). A request
        that fails is that item's error; the rest go on.
        """
        pool = self._executor()
        if token_id is None:
            return list(pool.map(self._classify_one, sequences))
        return list(pool.map(self._vocab_logit, sequences, [token_id] * len(sequences)))

    def _executor(self) -> ThreadPoolExecutor:
        """The worker pool, made once even when several threads call at once (a server's concurrent requests): as
        many threads as every server's ceiling together; the servers' limits decide how many send at once."""
        with self._stats_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="brrm-openai")
            return self._pool

    def _classify_one(self, seq: Sequence[int]) -> Score:
        body = {"model": self.model, "input": [list(seq)], "use_activation": False}
        try:
            data = self.transport.call(self.router.pick(seq), "POST", "/classify", body)
            rows = _object(data).get("data")
            probs = _object(rows[0] if isinstance(rows, list) and rows else None)["probs"]
            if not isinstance(probs, list):
                raise TypeError(f"probs is {probs!r}")
            values = [_float(x) for x in probs]
        except RequestFailed as exc:
            return Score.failed(str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return Score.failed(f"the /classify answer has no probs: {type(exc).__name__}: {exc}")
        if len(values) != 1:
            return Score.failed(f"the classifier returned {len(values)} values; a reward needs exactly one label")
        return Score(values[0])

    def _vocab_logit(self, seq: Sequence[int], token_id: int) -> Score:
        phase = Phase(tuple(seq), 1, 0, "choice", ignore_eos=True, logprob_ids=(token_id,))
        res = self.complete(phase, 0.0, 1.0, server=self.router.pick(seq))
        return vocab_score(res, token_id, f"the server reported no logit of token {token_id}")

    def concurrency(self) -> tuple[LimitState, ...]:
        """Each server's adaptive concurrency limit now (limit, in flight, peak, halvings, pause), in URL order."""
        return self.transport.concurrency()

    def close(self) -> None:
        """Stop the worker threads and close the HTTP client with its pooled connections."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.transport.close()

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_choice(data: JSONValue) -> PhaseResult:
    """PhaseResult from a completions answer (vLLM's ``token_ids`` and token-id logprob keys).

    Raises:
        RequestFailed: when the answer lacks what brrm asked for (not a vLLM server, or an old one).
    """
    choices = _object(data).get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        raise RequestFailed(f"the answer has no choices: {str(data)[:300]}")
    ids = choice.get("token_ids")
    if not isinstance(ids, list):
        raise RequestFailed(
            "the server returned no token_ids: it needs vLLM's return_token_ids (vLLM >= 0.10)"
        )
    token_ids = tuple(_int(i, "token_ids") for i in ids)
    details = _object(_object(_object(data).get("usage")).get("prompt_tokens_details"))
    reported = details.get("cached_tokens")  # absent where the server does not report prefix-cache hits
    cached = None if reported is None else _int(reported, "cached_tokens")
    finish = choice.get("finish_reason")
    if finish != "stop" and finish != "length":
        return PhaseResult(
            token_ids,
            "error",
            error=f"the server finished with finish_reason={finish!r}",
            cached_tokens=cached,
        )
    steps = tuple({int(k.split(":", 1)[1]): _float(v) for k, v in _object(entry).items() if k.startswith("token_id:")}
                  for entry in _array(_object(choice.get("logprobs")).get("top_logprobs")))
    return PhaseResult(token_ids, finish, step_logprobs=steps, cached_tokens=cached)


def _object(value: JSONValue) -> JSONDict:
    """``value`` when it is a JSON object, else ``{}`` (an absent or null member)."""
    return value if isinstance(value, dict) else {}


def _array(value: JSONValue) -> list[JSONValue]:
    """``value`` when it is a JSON array, else ``[]`` (an absent or null member)."""
    return value if isinstance(value, list) else []


def _int(value: JSONValue, what: str) -> int:
    """A JSON integer (or its decimal string) as an int.

    Raises:
        RequestFailed: for anything else.
    """
    if isinstance(value, int | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return int(value)
    raise RequestFailed(f"the answer's {what} holds {value!r}, not an integer")


def _float(value: JSONValue) -> float:
    """A JSON number as a float.

    Raises:
        RequestFailed: for anything else.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise RequestFailed(f"the answer's logprobs hold {value!r}, not a number")


def _pick_model(listing: JSONValue, wanted: str) -> tuple[str, int]:
    """(served model name, its max_model_len or 0) from a ``GET /v1/models`` answer.

    Raises:
        ConfigError: when ``wanted`` is not served and the server serves other than exactly one model.
    """
    models = [m for m in _array(_object(listing).get("data")) if isinstance(m, dict)]
    by_id = {str(m.get("id")): _int(m.get("max_model_len") or 0, "max_model_len") for m in models}
    if wanted in by_id:
        return wanted, by_id[wanted]
    if len(by_id) == 1:
        return next(iter(by_id.items()))
    raise ConfigError(
        f"the server does not serve {wanted!r}; it serves {sorted(by_id)} (pass served_model_name)"
    )


def _check_settings(base_urls: Sequence[str], logprobs_mode: str, times: tuple[float, float, float],
                    **counts: int) -> None:
    """Check the constructor's settings before anything connects: ``counts`` (``http_retries`` >= 0, the rest >= 1),
    ``logprobs_mode`` (one of :data:`SERVER_LOGPROBS_MODES`), ``base_urls`` (a non-empty list) and ``times``
    (``timeout_s`` > 0, 0 <= ``backoff_s`` <= ``max_backoff_s``, in seconds).

    Raises:
        ConfigError: naming the first invalid setting.
    """
    for name, value in counts.items():
        _check_int(name, value, 0 if name == "http_retries" else 1)
    if logprobs_mode not in SERVER_LOGPROBS_MODES:
        raise ConfigError(f"logprobs_mode must be one of {list(SERVER_LOGPROBS_MODES)}, got {logprobs_mode!r}")
    if isinstance(base_urls, str) or not base_urls:
        raise ConfigError(f"base_urls must be a non-empty list of URLs, got {base_urls!r}")
    timeout_s, backoff_s, max_backoff_s = times
    if not timeout_s > 0 or backoff_s < 0 or max_backoff_s < backoff_s:
        raise ConfigError(f"need timeout_s > 0 and 0 <= backoff_s <= max_backoff_s, got {timeout_s}, {backoff_s}, "
                          f"{max_backoff_s}")


def _check_int(name: str, value: object, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")


def _report(callback: Callable[[int], None], index: int) -> Callable[[Future[Completion]], None]:
    """A future's done-callback that reports its request index."""
    return lambda _future: callback(index)
