"""Constraint programs run as a chain of engine requests ("phases"), for backends without token-level control.

vLLM (offline or behind an OpenAI-compatible server) cannot force tokens or switch grammars in the middle
of one request, so a :class:`~brrm.constraints.Program` is run segment by segment, each segment one
request whose prompt is the original prompt plus everything generated so far (prefix caching makes the
re-submitted part nearly free). The phases reproduce the token-level semantics of the transformers
backend (:class:`~brrm.backends.transformers.steering.ProgramState`) exactly:

* ``Think(budget)`` — free text, the end-of-turn tokens banned, ``max_tokens = budget``, stopped by
  ``</think>``, after which the tokens of ``close``'s tail (``"\n\n"``) are appended. If the budget runs
  out, all of ``close``'s tokens are appended instead (``think_budget_hit``).
* ``Literal(text)`` — its tokens are appended without an engine call (jump-forward).
* ``Pattern(regex, cap, force)`` — a structured-output regex request with ``max_tokens = cap + 1`` (the
  engine ends a finished regex with its EOS, which is dropped). Added/special tokens are banned, as in
  the outlines-core vocabulary of the transformers backend. If ``cap`` tokens did not finish the
  regex, ``force``'s tokens are appended when ``text + force`` matches the regex; if the text already
  entered the closing literal, the remaining suffix of ``force`` is generated under a literal regex;
  otherwise the run fails loudly (never unconstrained).
* ``Choice(options)`` — one token among the options (``allowed_token_ids``), with the options' logits
  requested through ``logprob_token_ids`` (raw logits with vLLM's ``logprobs_mode="raw_logits"``; the
  default raw log-probabilities differ from them by one constant, so P(option) is the same). The choice is
  always sent in its own temperature-1, top-p-1, no-top-k step (:func:`~brrm.backends.blackbox.request.
  sampling_fields`), so an engine that reports logprobs *after* its sampler's processing reports the same
  softmax as the raw logits; the option is then picked here from the reported values with the judge's own
  decoding (:func:`pick_choice`: argmax when greedy, else a seeded sample of softmax(values / T) under top-k
  and top-p among the options, as the transformers backend samples a masked choice).
* after the last segment the end-of-turn token counts as one generated token, as in the transformers
  backend (a turn whose budget cannot hold it ends ``length``).

Every completed pattern is checked locally against its regex (Python ``re``), so a server that silently
ignores the structured-output request (old ``guided_*`` fields) gives ``finish_reason="error"``, never an
unconstrained "success".
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar
from typing import Literal as TypingLiteral

from brrm.backends.base import Completion, GenerationRequest, Score, end_of_turn_id
from brrm.backends.blackbox.regex import EMPTY, continuation, matches, to_regex, viable
from brrm.constraints import Choice, Literal, Pattern, Segment, Think, single_token_id
from brrm.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

S = TypeVar("S", Think, Pattern)
T = TypeVar("T")

PhaseKind = TypingLiteral["free", "think", "pattern", "choice", "grammar"]
BAN_BIAS = -100.0
"""Logit bias that bans a token (the most negative value vLLM and the OpenAI API accept)."""

class TokenInfo:
    """What the phase runner needs from a Hugging Face tokenizer (computed once per backend).

    Attributes:
        end_of_turn_id: ``<|im_end|>`` for Qwen/ChatML.
        stop_ids: end-of-turn and the tokenizer's EOS (sorted, 1–2 ids).
        banned_in_patterns: added and special tokens other than the stops; they never appear inside
            pattern text (the transformers backend's outlines-core vocabulary excludes them too).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.end_of_turn_id = end_of_turn_id(tokenizer)
        eos = tokenizer.eos_token_id
        self.stop_ids = tuple(sorted({self.end_of_turn_id} | ({int(eos)} if eos is not None else set())))
        # added_tokens_decoder: a property of transformers' tokenizers, absent on some slow and wrapped ones
        added = set(getattr(tokenizer, "added_tokens_decoder", {})) | set(tokenizer.all_special_ids)
        self.banned_in_patterns = tuple(sorted(int(i) for i in added if i not in self.stop_ids))
        self._cache: dict[tuple[str, str], object] = {}
        # fast tokenizers are not safe for concurrent calls ("Already borrowed"); the OpenAI backend's
        # worker threads share this object
        self._lock = threading.Lock()

    def _cached(self, kind: str, text: str, make: Callable[[], T]) -> T:
        """``make()`` (a tokenizer call) under the lock, once per ``(kind, text)``."""
        with self._lock:
            if (kind, text) not in self._cache:
                self._cache[kind, text] = make()
            return self._cache[kind, text]  # type: ignore[return-value]

    def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of forced ``text`` in mid-sequence position (:func:`brrm.constraints.compile.forced_ids`;
        cached)."""
        from brrm.constraints.compile import forced_ids

        return self._cached("encode", text, lambda: forced_ids(self.tokenizer, text))

    def label(self, text: str, after: str = "") -> int:
        """Id of ``text`` as the model would emit it after ``after`` (see :func:`brrm.constraints.label_token_id`)."""
        from brrm.constraints import label_token_id

        return self._cached("label", f"{after}\0{text}", lambda: label_token_id(self.tokenizer, text, after))

    def single(self, text: str) -> int:
        """Id of ``text`` as exactly one token (raises ConfigError otherwise)."""
        return self._cached("single", text, lambda: single_token_id(self.tokenizer, text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept."""
        with self._lock:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


@dataclass(frozen=True)
class Phase:
    """One engine request of a program run (backend-neutral).

    Attributes:
        prompt_ids: the request's prompt plus everything generated so far.
        max_tokens: new-token limit of this request, >= 1.
        seed: sampler seed of this request (derived from the request seed and the phase index).
        kind: ``free``, ``think``, ``pattern``, ``choice`` or ``grammar`` (a whole turn under one llguidance
            grammar: :mod:`brrm.backends.blackbox.grammar`).
        regex: the structured-output regex (``pattern`` only).
        grammar: the structured-output Lark grammar (``grammar`` only).
        stop_ids: token ids that end the request (kept in the engine's output, dropped by the runner).
        ignore_eos: do not stop at the model's EOS (only ``stop_ids`` stop).
        banned_ids: tokens given a logit bias of :data:`BAN_BIAS`.
        allowed_ids: the only tokens allowed (``choice``).
        logprob_ids: tokens whose (raw) logits are reported at every step (``choice``).
        top_logprobs: also report this many of the step's highest logits (1 for a choice's vocabulary max).
        with_max: record the step's largest logit after the options' (``choice``).
        top: record the step's ``top`` largest logits, descending, last (``choice``; needs ``top_logprobs >= top``).
    """

    prompt_ids: tuple[int, ...]
    max_tokens: int
    seed: int
    kind: PhaseKind
    regex: str = ""
    grammar: str = ""
    stop_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    banned_ids: tuple[int, ...] = ()
    allowed_ids: tuple[int, ...] = ()
    logprob_ids: tuple[int, ...] = ()
    top_logprobs: int = 0
    with_max: bool = False
    top: int = 0


@dataclass(frozen=True)
class PhaseResult:
    """What the engine returned for one phase.

    Attributes:
        token_ids: generated ids as the engine reports them (a final stop/EOS id included).
        finish_reason: ``stop`` (stop id or EOS), ``length`` (max_tokens) or ``error``.
        error: the engine's or transport's error text when ``finish_reason == "error"``.
        step_logprobs: per generated step, ``{token id: value}`` for the phase's ``logprob_ids``.
        cached_tokens: prompt tokens served from the prefix cache; None when the engine did not report it.
    """

    token_ids: tuple[int, ...]
    finish_reason: str
    error: str = ""
    step_logprobs: tuple[dict[int, float], ...] = ()
    cached_tokens: int | None = None


def vocab_score(result: PhaseResult, token_id: int, missing: str) -> Score:
    """The logit of ``token_id`` a one-step phase reported, as a :class:`~brrm.backends.base.Score` (a failed one,
    with the engine's error or ``missing``, when the phase failed or did not report it)."""
    step = result.step_logprobs[0] if result.step_logprobs else {}
    reported = result.finish_reason != "error" and token_id in step
    return Score(step[token_id]) if reported else Score.failed(result.error or missing)


def phase_seed(seed: int, index: int) -> int:
    """Seed of phase ``index`` (phase 0 uses the request's own seed), in [0, 2**63)."""
    return seed % (1 << 63) if index == 0 else (seed * 1_000_003 + index * 7_919) % (1 << 63)


def _fullmatch(regex: str, text: str) -> bool | None:
    """``re.fullmatch`` of ``regex`` on ``text``; None when Python cannot compile the regex."""
    try:
        return re.fullmatch(regex, text) is not None
    except re.error:
        return None


def pick_choice(values: Sequence[float], seed: int, temperature: float, top_p: float = 1.0, top_k: int = 0) -> int:
    """Index of the option a choice step picks from its options' raw logits ``values`` (finite floats).

    ``temperature`` 0: the first largest value (greedy). Otherwise an exact sample of softmax(values / T)
    restricted to the ``top_k`` largest (0 = no cut) and then to the top-``top_p`` nucleus, by the Gumbel-max
    trick with noise from ``random.Random(seed)`` (the phase's seed, so a request's pick is reproducible).
    """
    if temperature == 0 or len(values) == 1:
        return max(range(len(values)), key=lambda i: (values[i], -i))
    scaled = [v / temperature for v in values]
    order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
    keep = set(order[:top_k] if 0 < top_k < len(order) else order)
    if top_p < 1.0:
        top = max(scaled)
        weights = {i: math.exp(scaled[i] - top) for i in keep}
        total, cum, nucleus = sum(weights.values()), 0.0, set()
        for i in (j for j in order if j in keep):
            if cum / total > top_p:
                break
            nucleus.add(i)
            cum += weights[i]
        keep = nucleus
    rng = random.Random(seed)
    noisy = {i: scaled[i] - math.log(-math.log(max(rng.random(), 1e-300))) for i in range(len(scaled))}
    return max(keep, key=lambda i: (noisy[i], -i))


def choice_values(step: Mapping[int, float], options: Sequence[int], with_max: bool, top: int) -> tuple[float, ...]:
    """A choice step's values as ``Completion.choice_logits`` lays them out: the options' reported logits, then the
    step's largest (``with_max``: the best of what the engine reported, its top-1 included), then its ``top``
    largest, descending (the engine's top ones; the options are either among them or below)."""
    values = tuple(float(step[o]) for o in options) + ((max(step.values()),) if with_max else ())
    return values + tuple(sorted(step.values(), reverse=True)[:top])


@dataclass
class ProgramRun:
    """One request's progress through its program, phase by phase.

    Usage: ``while (phase := run.next_phase()) is not None: run.feed(engine(phase))``, then
    :meth:`completion`. ``fail`` ends the run with an error at any time. ``temperature``, ``top_p`` and
    ``top_k`` are the judge's decoding, with which a choice's option is picked from the reported logits
    (:func:`pick_choice`); the engine samples the choice step itself at temperature 1.
    """

    request: GenerationRequest
    info: TokenInfo
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    generated: list[int] = field(default_factory=list)
    segment: int = 0
    phases: int = 0
    choice_logits: list[tuple[float, ...]] = field(default_factory=list)
    think_budget_hit: bool = False
    forced_caps: int = 0
    cached: int | None = None
    finish: str = ""
    error: str = ""
    step_regex: str = ""  # past a pattern's cap: the regex of what may follow (see _after_cap)
    seg_start: int = 0  # index in generated where the current segment began
    current: Phase | None = None

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.generated)

    def _segment(self, kind: type[S]) -> S:
        """The current segment of the request's program, a ``kind`` (the phase just fed was built from it)."""
        assert self.request.program is not None
        seg = self.request.program.segments[self.segment]
        assert isinstance(seg, kind), (seg, kind)
        return seg

    def fail(self, error: str) -> None:
        self.finish, self.error, self.current = "error", error, None

    def next_phase(self) -> Phase | None:
        """The next request to run, or None when the run is finished."""
        if self.finish:
            return None
        try:
            self.current = self._build()
        except ConfigError as exc:
            self.fail(str(exc))
        if self.current is not None:
            self.phases += 1
        return self.current

    def _build(self) -> Phase | None:
        """The next phase of the run (None when it finished), appending what needs no engine call on the way."""
        req = self.request
        if self.finish:
            return None
        if not req.prompt_ids or req.max_new_tokens < 1:
            raise ConfigError("a request needs >= 1 prompt token and max_new_tokens >= 1")
        prompt = tuple(req.prompt_ids) + tuple(self.generated)
        seed = phase_seed(req.seed, self.phases)
        if req.program is None:
            return Phase(prompt, req.max_new_tokens, seed, "free", stop_ids=self.info.stop_ids, ignore_eos=True)
        segments = req.program.segments
        if self.segment >= len(segments):
            self._end_of_turn()
            return None
        if self.remaining < 1:
            self.finish = "length"
            return None
        seg = segments[self.segment]
        if isinstance(seg, Literal):
            if self._append(self.info.encode(seg.text)):
                self._next_segment()
            return self._build()
        if isinstance(seg, Think) and seg.budget <= 0:
            self._force_close(seg)
            return self._build()
        return self._segment_phase(seg, prompt, seed)

    def _segment_phase(self, seg: Segment, prompt: tuple[int, ...], seed: int) -> Phase:
        """The engine request of a Think, Pattern or Choice segment (with budget left) at ``prompt``."""
        info = self.info
        if isinstance(seg, Think):
            return Phase(prompt, min(seg.budget, self.remaining), seed, "think",
                         stop_ids=(info.single("</think>"),), ignore_eos=True, banned_ids=info.stop_ids)
        if isinstance(seg, Pattern):
            if self.step_regex:  # past the cap: one token at a time (see _after_cap)
                return Phase(prompt, 1, seed, "pattern", regex=self.step_regex, stop_ids=(info.end_of_turn_id,),
                             banned_ids=info.banned_in_patterns)
            cap = seg.cap if seg.cap and seg.force else self.remaining
            return Phase(prompt, min(cap, self.remaining) + 1, seed, "pattern", regex=seg.regex,
                         stop_ids=(info.end_of_turn_id,), banned_ids=info.banned_in_patterns)
        assert isinstance(seg, Choice), seg
        ids = tuple(info.label(o, seg.after) for o in seg.options)
        return Phase(prompt, 1, seed, "choice", ignore_eos=True, allowed_ids=ids, logprob_ids=ids,
                     top_logprobs=max(seg.top, 1 if seg.with_max else 0), top=seg.top, with_max=seg.with_max)

    def _end_of_turn(self) -> None:
        """After the last segment the end-of-turn token is generated (it is not part of ``token_ids``)."""
        self.finish = "stop" if self.remaining >= 1 else "length"

    def _append(self, ids: Sequence[int]) -> bool:
        """Append ``ids`` within the budget; False (and finish ``length``) when they did not all fit."""
        fit = list(ids)[: max(self.remaining, 0)]
        self.generated.extend(fit)
        if len(fit) < len(ids):
            self.finish = "length"
            return False
        return True

    def _next_segment(self) -> None:
        self.segment += 1
        self.step_regex = ""
        self.seg_start = len(self.generated)

    def _force_close(self, seg: Think) -> None:
        self.think_budget_hit = True
        if self._append(self.info.encode(seg.close)):
            self._next_segment()

    def feed(self, result: PhaseResult) -> None:
        """Consume the engine's result for the phase last returned by :meth:`next_phase`."""
        phase, self.current = self.current, None
        if phase is None:
            raise RuntimeError("feed() without a pending phase")
        if self.phases == 1:
            self.cached = result.cached_tokens
        if result.finish_reason == "error":
            self.fail(result.error or "the engine reported an error")
            return
        handler = {
            "free": self._feed_free,
            "think": self._feed_think,
            "pattern": self._feed_pattern,
            "choice": self._feed_choice,
        }[phase.kind]
        handler(phase, result)

    def _feed_free(self, phase: Phase, result: PhaseResult) -> None:
        ids = list(result.token_ids)
        stopped = result.finish_reason == "stop" and bool(ids)
        self.generated.extend(ids[:-1] if stopped else ids[: phase.max_tokens])
        self.finish = "stop" if stopped else "length"

    def _feed_think(self, phase: Phase, result: PhaseResult) -> None:
        seg = self._segment(Think)
        ids = list(result.token_ids)[: phase.max_tokens]
        closed = result.finish_reason == "stop" and bool(ids)
        if closed and ids[-1] != phase.stop_ids[0]:  # a server-side default stop id ended the turn
            self.generated.extend(ids[:-1])
            self.finish = "stop"
            return
        self.generated.extend(ids)
        if closed:  # the model closed its thinking: the canonical tail of ``close`` follows
            tail = seg.close.split("</think>", 1)[1] if "</think>" in seg.close else ""
            if self._append(self.info.encode(tail) if tail else ()):
                self._next_segment()
        elif self.remaining < 1 or len(ids) < phase.max_tokens:  # turn budget or engine context exhausted
            self.finish = "length"
        else:
            self._force_close(seg)

    def _feed_pattern(self, phase: Phase, result: PhaseResult) -> None:
        seg = self._segment(Pattern)
        ids = list(result.token_ids)
        stepping = bool(self.step_regex)
        limit = phase.max_tokens if stepping else phase.max_tokens - 1  # a whole pattern ends with EOS
        stopped = result.finish_reason == "stop" and bool(ids)
        content = (ids[:-1] if stopped else ids)[:limit]
        self.generated.extend(content)
        text = self._segment_text()
        done = matches(seg.regex, text) if stepping else stopped and len(ids) - 1 <= limit
        if done:
            if _fullmatch(seg.regex, text) is False:
                self.fail(
                    f"the engine's output {text[-200:]!r} does not match the constraint regex "
                    f"{seg.regex[:200]!r}: it did not apply the structured-output request"
                )
                return
            self._next_segment()
        elif self.remaining < 1 or len(content) < limit:  # turn budget or engine context exhausted
            self.finish = "length"
        else:
            self._after_cap(seg, text)

    def _segment_text(self) -> str:
        """Text of the current segment, decoded in context (tokenizers that merge spaces stay exact)."""
        before = self.info.decode(self.generated[: self.seg_start])
        full = self.info.decode(self.generated)
        return (
            full[len(before) :]
            if full.startswith(before)
            else self.info.decode(self.generated[self.seg_start :])
        )

    def _after_cap(self, seg: Pattern, text: str) -> None:
        """Past the cap: append ``force`` when the text can take it, else generate one more token.

        Mirrors the transformers backend: at every step past the cap the forced completion is emitted
        as soon as it is a valid continuation; until then the model writes one token at a time under the
        pattern's continuation regex (:mod:`brrm.backends.blackbox.regex`), which the engine can start afresh.
        """
        try:
            if seg.force and viable(seg.regex, text + seg.force) and self._clean_force(seg):
                self.forced_caps += 1
                if not self._append(self.info.encode(seg.force)):
                    return
                text = self._segment_text()
                if matches(seg.regex, text):
                    self._next_segment()
                    return
            rest = continuation(seg.regex, text)
        except ValueError as exc:
            self.fail(f"pattern {seg.regex[:80]!r} passed its cap and cannot be continued: {exc}")
            return
        if rest == EMPTY:
            self.fail(f"the engine's output {text[-120:]!r} left the pattern {seg.regex[:80]!r}")
            return
        self.step_regex = to_regex(rest)

    def _clean_force(self, seg: Pattern) -> bool:
        """Force now only where it keeps the canonical tokenization (as the transformers backend does), or once
        :data:`~brrm.constraints.compile.FORCE_GRACE` tokens past the cap."""
        from brrm.constraints.compile import FORCE_GRACE
        from brrm.tokens import encoder

        seg_ids = self.generated[self.seg_start:]
        if len(seg_ids) >= seg.cap + FORCE_GRACE:
            return True
        tail = self.info.decode(seg_ids[-4:]) if seg_ids else ""
        return encoder(self.info.tokenizer).clean_seam(tail, seg.force)

    def _feed_choice(self, phase: Phase, result: PhaseResult) -> None:
        ids = list(result.token_ids)
        if not ids or ids[0] not in phase.allowed_ids:
            self.fail(
                f"the engine returned {ids[:1]} for a choice among {list(phase.allowed_ids)}: it did not "
                "apply allowed_token_ids"
            )
            return
        step = result.step_logprobs[0] if result.step_logprobs else {}
        if any(i not in step for i in phase.logprob_ids):
            self.fail(
                f"the engine reported no logits for the choice options {list(phase.logprob_ids)} "
                f"(got {sorted(step)})"
            )
            return
        values = choice_values(step, phase.logprob_ids, phase.with_max, phase.top)
        self.choice_logits.append(values)
        options = values[: len(phase.logprob_ids)]
        self.generated.append(phase.logprob_ids[pick_choice(options, phase.seed, self.temperature, self.top_p,
                                                            self.top_k)])
        self._next_segment()

    def completion(self) -> Completion:
        """The finished run as a :class:`~brrm.backends.base.Completion`."""
        if self.finish == "error" or not self.finish:
            return Completion.failed(self.error or "the program run did not finish")
        return Completion(
            token_ids=tuple(self.generated),
            text=self.info.decode(self.generated),
            finish_reason="stop" if self.finish == "stop" else "length",
            choice_logits=tuple(self.choice_logits),
            think_budget_hit=self.think_budget_hit,
            forced_caps=self.forced_caps,
            cached_prompt_tokens=self.cached,
        )
