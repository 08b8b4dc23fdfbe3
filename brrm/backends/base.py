"""The Backend protocol: what every model runner (transformers, vLLM, OpenAI-compatible) provides.

Judges speak to backends in token ids, so that the exact prompt tokens are under the judge's control
(no double BOS from render-then-tokenize, no chat template applied twice) and so that the released
BR-RM raw-concatenation protocol is preserved on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, cast, runtime_checkable

from brrm.constraints import Program
from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONValue

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class GenerationRequest:
    """One generation.

    Attributes:
        prompt_ids: the full prompt in token ids (already chat-templated), length >= 1.
        max_new_tokens: budget for this generation, >= 1.
        seed: seed of this request's own sampler (results do not depend on batch composition).
        program: a constraint program, or None for free generation up to a stop token.
    """

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    seed: int = 0
    program: Program | None = None


@dataclass(frozen=True)
class Completion:
    """The result of one generation.

    Attributes:
        token_ids: generated ids, without the stop token.
        text: decoded ``token_ids`` (special tokens kept, e.g. ``<think>``).
        finish_reason: ``stop`` (stop token emitted), ``length`` (budget exhausted), ``error``.
        error: the backend's error text when ``finish_reason == "error"``.
        choice_logits: for each Choice step of the program, the raw logits of its options (float32).
        think_budget_hit: a Think segment ran out of budget and was closed by force.
        forced_caps: how many pattern segments hit their token cap and were completed by force.
        cached_prompt_tokens: prompt tokens served from a prefix/KV cache instead of being recomputed; None when the
            backend does not report it (never a 0 that would read as "nothing reused").
    """

    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    error: str = ""
    choice_logits: tuple[tuple[float, ...], ...] = ()
    think_budget_hit: bool = False
    forced_caps: int = 0
    cached_prompt_tokens: int | None = None

    @classmethod
    def failed(cls, error: str) -> Completion:
        return cls((), "", "error", error=error)

    def __post_init__(self) -> None:
        for logits in self.choice_logits:
            if not all(math.isfinite(x) for x in logits):
                object.__setattr__(self, "finish_reason", "error")
                object.__setattr__(self, "error", f"non-finite choice logits {logits}")


@dataclass(frozen=True)
class BackendInfo:
    """Identity of a backend instance, recorded in results.

    Attributes:
        name: ``transformers``, ``vllm``, ``openai`` or ``fake``.
        model: the model's name (hub id or served name; the embedded model's hub id, never a cache path).
        details: engine settings (dtype, device, vLLM version, URLs, …), JSON-ready.
        fingerprint: the fingerprint of the weights loaded (:func:`brrm.fingerprint.weights_fingerprint`; set by
            :func:`brrm.load`), empty for a backend built by hand.
    """

    name: str
    model: str
    details: Mapping[str, JSONValue] = field(default_factory=dict)
    fingerprint: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared once; judges read this and never probe with ``hasattr``.

    Attributes:
        generate: ``generate`` runs free generations (a causal LM is loaded).
        programs: ``generate`` runs constraint :class:`~brrm.constraints.Program` s and reports Choice logits.
        classify: ``classify`` scores sequences with a one-label sequence-classification head.
        vocab_logit: ``classify(..., token_id=k)`` reads the raw logit of vocabulary token ``k`` at the last
            position of a causal LM (the Llama-Nemotron-Reward recipe).
        kv_reuse: ``generate(keep_kv=True)`` keeps each sequence's KV cache for a prompt that extends it
            (engines with automatic prefix caching reuse prefixes without being asked, and say False).
        chunk_size: ordered judgments per call this backend prefers, >= 1 (the transformers backend: its
            decoding batch; engines and servers: thousands, since they schedule by themselves).
        concurrent: ``generate`` may be called from several threads at once, and the requests of concurrent
            calls share the engine's running batch (vLLM: one engine stepped for all callers; servers: HTTP).
        continuous: ``generate`` takes ``then=`` (follow-up requests): a request's follow-up (a BR-RM turn 2)
            joins the running batch as soon as the request finishes, and finished rows are replaced from the
            queue (see :func:`generate_chains`; the transformers backend's ``scheduling="continuous"``).
        logprob_semantics: what ``choice_logits`` are, one of :data:`brrm.types.results.LOGPROB_SEMANTICS`
            (``raw`` unless an OpenAI-compatible server's logprobs mode is not known: ``unknown``); judges
            record it in every result's provenance.
        seeded: ``generate`` honours each request's ``seed``: sampling draws from a stream seeded by it in this
            process, so a sampled result reproduces from (record, options, seed) (the transformers and in-process
            vLLM backends). False for a backend that only *sends* the seed on (an OpenAI-compatible server may
            ignore it) and for one that does not declare it. Judges record it in every result's provenance.
    """

    generate: bool = True
    programs: bool = True
    classify: bool = False
    vocab_logit: bool = False
    kv_reuse: bool = False
    chunk_size: int = 8
    concurrent: bool = False
    continuous: bool = False
    logprob_semantics: str = "raw"
    seeded: bool = False

    def to_dict(self) -> dict[str, bool | int | str]:
        """The capabilities by name, JSON-ready."""
        return asdict(self)


class Next(NamedTuple):
    """A chain's next generation: the request, and whether to keep its KV for a follow-up that extends it."""

    request: GenerationRequest
    keep_kv: bool = False


FollowUp = Callable[[int, Completion], "Next | None"]
"""``then(chain, completion)``: called when chain ``chain``'s current request finishes (in the thread that runs
the generation); returns the chain's next request, or None when the chain is done."""
OnStep = Callable[[int, int], None]
"""``on_step(rows, tokens)``: after a decoding step, the rows in the running batch and the tokens that step added."""


def generate_chains(backend: Backend, firsts: Sequence[Next], then: FollowUp, *, temperature: float,
                    top_p: float, on_step: OnStep | None = None,
                    on_complete: Callable[[int], None] | None = None, top_k: int = 0) -> list[Completion]:
    """Run chains of dependent generations (BR-RM: turn 1, then turn 2 from turn 1's output, then retries).

    Chain ``i`` starts with ``firsts[i]``; each time its request finishes, ``then(i, completion)`` gives the next
    one (or None). A backend with ``capabilities.continuous`` runs every chain in one continuously refilled batch
    (a follow-up enters as soon as its predecessor ends); any other backend runs them in rounds of
    ``backend.generate`` calls (every chain's first request, then every follow-up, …), which gives the same
    results, later.

    ``on_step(rows, tokens)`` is called after every decoding step of a continuous backend (rows in its batch,
    tokens that step added); other backends do not call it. ``on_complete(i)``: in rounds, called the moment
    chain ``i``'s request finishes inside its round (``then`` runs when the round returns); a continuous backend
    calls ``then`` at once instead.

    Returns:
        the last completion of each chain, in order (N = len(firsts)).
    """
    last: dict[int, Completion] = {}
    if backend.capabilities.continuous:  # one call per keep_kv value of the first requests (the judge uses one)
        steerable = cast(ContinuousBackend, backend)  # what capabilities.continuous declares
        for keep in (True, False):
            chosen = [i for i, step in enumerate(firsts) if step.keep_kv is keep]
            if chosen:
                comps = steerable.generate([firsts[i].request for i in chosen], temperature=temperature,
                                           top_p=top_p, top_k=top_k, keep_kv=keep, on_step=on_step,
                                           then=_renumbered(then, chosen))
                last.update(zip(chosen, comps, strict=True))
        return [last[i] for i in range(len(firsts))]
    _in_rounds(backend, firsts, then, last, temperature=temperature, top_p=top_p, top_k=top_k,
               on_complete=on_complete)
    return [last[i] for i in range(len(firsts))]


def _renumbered(then: FollowUp, chosen: list[int]) -> FollowUp:
    """``then`` for a call that runs the chains ``chosen`` (its request ``j`` is chain ``chosen[j]``)."""
    return lambda j, c: then(chosen[j], c)


def _in_rounds(backend: Backend, firsts: Sequence[Next], then: FollowUp, last: dict[int, Completion], *,
               temperature: float, top_p: float, on_complete: Callable[[int], None] | None, top_k: int = 0) -> None:
    """:func:`generate_chains` without follow-ups in the engine: every pending chain's request in one
    ``generate`` call per round (per ``keep_kv`` value), ``last`` filled with each chain's latest completion."""
    pending = list(enumerate(firsts))
    while pending:
        following: list[tuple[int, Next]] = []
        for keep in (True, False):
            part = [(i, step.request) for i, step in pending if step.keep_kv is keep]
            if not part:
                continue
            done = None if on_complete is None else (lambda j, part=part: on_complete(part[j][0]))
            comps = backend.generate([r for _, r in part], temperature=temperature, top_p=top_p, top_k=top_k,
                                     keep_kv=keep, on_complete=done)
            for (i, _), comp in zip(part, comps, strict=True):
                last[i] = comp
                step = then(i, comp)
                if step is not None:
                    following.append((i, step))
        pending = following


@dataclass(frozen=True)
class Score:
    """One sequence's scalar output from :meth:`Backend.classify`.

    Attributes:
        value: the raw float32 head output (logit, no activation); NaN when ``error`` is set.
        error: why there is no value (a failed batch, a non-finite output); "" when ok.
    """

    value: float
    error: str = ""

    @classmethod
    def failed(cls, error: str) -> Score:
        return cls(math.nan, error)

    def __post_init__(self) -> None:
        if not self.error and not math.isfinite(self.value):
            object.__setattr__(self, "error", f"non-finite reward ({self.value}) from the head")
            object.__setattr__(self, "value", math.nan)


@runtime_checkable
class Backend(Protocol):
    """A model runner. Judges speak to it in token ids and ask only for what ``capabilities`` declares.

    Attributes:
        info: name, model id and engine details.
        capabilities: what it can do (see :class:`Capabilities`).
        tokenizer: a Hugging Face tokenizer of the model (chat template, encode/decode).
        end_of_turn_id: the token that ends an assistant turn (``<|im_end|>`` for Qwen/ChatML).
        max_context: the model's context window in tokens.
        stats: cumulative counters (prefill, cached and generated tokens, calls, …), JSON-ready ints.
    """

    info: BackendInfo
    capabilities: Capabilities
    tokenizer: Any  # a PreTrainedTokenizerBase; its unions of return types would reach every judge
    end_of_turn_id: int
    max_context: int
    stats: dict[str, int]

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float, top_p: float,
                 keep_kv: bool = False, on_complete: Callable[[int], None] | None = None,
                 top_k: int = 0) -> list[Completion]:
        """Run every request; one Completion per request, in order.

        ``keep_kv`` asks a backend with ``capabilities.kv_reuse`` to keep each sequence's KV for a follow-up
        prompt; ``on_complete(i)`` is called as soon as request ``i`` finishes (for progress bars). A backend
        with ``capabilities.continuous`` also takes ``then=`` (see :func:`generate_chains`).

        A model or transport failure of one request is that request's ``error`` completion; a programming
        error (a bug) raises.
        """
        ...

    def classify(self, sequences: Sequence[Sequence[int]], *, token_id: int | None = None) -> list[Score]:
        """One scalar per token sequence, in order: the one-label head's logit (``token_id=None``) or the raw
        logit of vocabulary token ``token_id`` at the last position.

        Raises:
            ConfigError: when the capability is not there (see ``capabilities``).
        """
        ...

    def close(self) -> None:
        """Free the model, engine, threads or connections; the backend is unusable afterwards."""
        ...


class ContinuousBackend(Backend, Protocol):
    """A :class:`Backend` with ``capabilities.continuous``: ``generate`` also takes the follow-ups ``then`` and a
    per-step callback ``on_step`` (see :func:`generate_chains`)."""

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float, top_p: float,
                 keep_kv: bool = False, on_complete: Callable[[int], None] | None = None, top_k: int = 0,
                 then: FollowUp | None = None, on_step: OnStep | None = None) -> list[Completion]:
        """As :meth:`Backend.generate`; ``then(i, completion)`` gives request ``i``'s follow-up (or None), which
        joins the running batch at once; ``on_step(rows, tokens)`` follows every decoding step."""
        ...


END_OF_TURN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that closes an assistant turn: the first known end-of-turn marker, else EOS.

    Raises:
        ConfigError: when the tokenizer has neither.
    """
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_CANDIDATES:
        if tok in vocab:
            return int(vocab[tok])
    if tokenizer.eos_token_id is None:
        raise ConfigError("tokenizer has no end-of-turn token and no eos_token; set tokenizer.eos_token")
    return int(tokenizer.eos_token_id)


def common_prefix_length(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the longest common prefix of two token-id sequences (at most ``limit``)."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    return next((i for i in range(n) if a[i] != b[i]), max(n, 0))
