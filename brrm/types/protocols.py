"""The one reward interface every model kind implements (:class:`RewardJudge`), and what sits beneath it.

``brrm.load(...)`` returns a :class:`RewardJudge` for a BR-RM judge, a Bradley–Terry reward model or a
principle reward model alike; the server, the RLHF adapters, audits and benchmarks call only this.
Beneath it, a model implements what it natively can — :class:`OrderedPairJudge` (BR-RM: one judgment per
presentation order) or :class:`ScalarRewardModel` (Bradley–Terry, principle models) — and
:mod:`brrm.compose` supplies the rest (swap-order debiasing, pairwise ↔ scalar, group strategies).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from brrm.errors import ConfigError
from brrm.fingerprint import weights_fingerprint
from brrm.registry import BACKEND_REGISTRY, KIND_REGISTRY, Names, kind_entry
from brrm.types.composition import Composition
from brrm.types.config import SamplingConfig, check_choice
from brrm.types.conversation import ConversationLike
from brrm.types.cost import JudgmentCost
from brrm.types.jsonvalue import json_field
from brrm.types.results import GroupResult, PairwiseJudgment, ScalarReward, Verdict
from brrm.types.single import OnResult, OnStep, Principles, Progress, SingleItems

__all__ = ["BACKENDS", "KINDS", "KIND_TRAITS", "SHAPES", "JudgeInfo", "JudgeSpec", "OnResult", "OnStep",
           "OrderedPairJudge", "Principles", "Progress", "RewardJudge", "ScalarRewardModel", "SingleItems", "Variable",
           "is_remote", "kind_trait", "set_loader"]

SHAPES = ("pairs", "score", "group")
"""What a request judges, for :meth:`RewardJudge.cost`: N pairs, N responses scored, or one group of N."""

KINDS = Names(KIND_REGISTRY)
"""Model kinds (:data:`brrm.registry.KIND_REGISTRY`, plugins included): ``brrm`` (two-turn BR-RM pairwise judge),
``bt`` (Bradley–Terry scalar reward model), ``principle`` (RLBFF principle-following reward model)."""

BACKENDS = Names(BACKEND_REGISTRY)
"""Backend names :func:`brrm.load` and :class:`JudgeSpec` accept (:data:`brrm.registry.BACKEND_REGISTRY`, plugins
included; and ``serve``: a running ``brrm serve`` URL as the model, judged through
:class:`~brrm.service.RemoteJudge`)."""

def is_remote(model: object, backend: object) -> bool:
    """Whether :func:`brrm.load` is asked for a running ``brrm serve``: ``backend="serve"``, or an http(s) URL as the
    model (which :func:`brrm.service.connect.load_remote` then checks against the backend)."""
    return backend == "serve" or (isinstance(model, str) and model.startswith(("http://", "https://")))


KIND_TRAITS: Mapping[str, Mapping[str, bool]] = KIND_REGISTRY.view(lambda entry: entry.traits)
"""The traits each model kind declares in its :class:`~brrm.registry.KindEntry` (:class:`JudgeInfo` carries the
first three): the one place a kind maps to behaviour. ``generates``: the model is a language model that generates
(a chat model's LM head), so it loads as a causal LM and cannot be a sequence classifier; False: a Bradley–Terry
model, read off a head or a logit."""


def kind_trait(kind: str, trait: str) -> bool | None:
    """``trait`` (``pairwise``, ``takes_principle``, ``needs_reference``, ``generates``) of model kind ``kind``
    (its :class:`~brrm.registry.KindEntry`), or None for a kind that does not tell before a model is read (``auto``).

    Raises:
        KeyError: for an unknown trait (a programming error).
    """
    entry = kind_entry(kind)
    return None if entry is None else entry.traits[trait]


_LOADER: list[Callable[[JudgeSpec], RewardJudge]] = []
"""The builder :meth:`JudgeSpec.load` calls: :mod:`brrm.load` registers it on import (``import brrm`` imports
it), so the spec, a value every layer may hold, does not import the layers that build judges."""


def set_loader(loader: Callable[[JudgeSpec], RewardJudge]) -> None:
    """Register the function that builds a judge from a spec (:mod:`brrm.load` does, once)."""
    _LOADER[:] = [loader]


@dataclass(frozen=True)
class JudgeSpec:
    """What to load: the arguments of :func:`brrm.load` as one value, with the fingerprint of the weights.

    Attributes:
        model: hub id, local directory, or None for the embedded demo model (as :func:`brrm.load` takes it).
        kind: ``auto``, ``brrm``, ``bt`` or ``principle``.
        backend: ``transformers``, ``vllm``, ``openai`` or ``serve`` (``model`` is then a ``brrm serve`` URL).
        options: the judge's and the backend's keyword options of :func:`brrm.load`, JSON values only
            (stored as a plain dict; ``swap``, ``temperature``, ``dtype``, ``base_url``, …).
        fingerprint: the weights' fingerprint (see :mod:`brrm.fingerprint`); computed from ``model`` when left
            empty, kept as given otherwise (a spec read back from JSON or a pickle keeps the one it was made
            with, and :meth:`load` refuses weights that changed since).

    Raises:
        ConfigError: on an unknown kind or backend, a model that is not a non-empty string or None, or an
            option value that is not JSON (naming the option).
    """

    model: str | None = None
    kind: str = "auto"
    backend: str = "transformers"
    options: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ConfigError(f"model must be a hub id, a local directory or None, got {self.model!r}",
                              field="model")
        check_choice("kind", self.kind, ("auto", *KINDS))
        check_choice("backend", self.backend, (*BACKENDS, "serve"))
        options = dict(self.options)
        for name, value in options.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ConfigError(f"option {name!r} of a JudgeSpec must be a JSON value, got {value!r}") from None
        object.__setattr__(self, "options", dict(sorted(options.items())))
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", weights_fingerprint(self.model))

    @classmethod
    def from_load(cls, model: str | None = None, /, *, kind: str = "auto", backend: str = "transformers",
                  **options: Any) -> JudgeSpec:
        """The spec of ``brrm.load(model, kind=kind, backend=backend, **options)`` (the same arguments).

        Raises:
            ConfigError: as the constructor.
        """
        return cls(model, kind=kind, backend=backend, options=options)

    def __hash__(self) -> int:
        return hash(self.to_json())

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values (``from_dict`` inverts it)."""
        return {f.name: json_field(getattr(self, f.name)) for f in fields(self)}

    def to_json(self) -> str:
        """The spec as one canonical JSON line (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeSpec:
        """The spec ``to_dict`` wrote.

        Raises:
            ConfigError: on unknown or invalid fields.
        """
        unknown = sorted(set(data) - {"model", "kind", "backend", "options", "fingerprint"})
        if unknown:
            raise ConfigError(f"unknown JudgeSpec field {unknown[0]!r}; valid: model, kind, backend, options, "
                              "fingerprint")
        return cls(**dict(data))

    @classmethod
    def from_json(cls, text: str) -> JudgeSpec:
        """The spec ``to_json`` wrote.

        Raises:
            ConfigError: when ``text`` is not a JSON object of spec fields.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"a JudgeSpec must be a JSON object: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"a JudgeSpec must be a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)

    def current_fingerprint(self) -> str:
        """The fingerprint of what ``model`` names now (cached digests; see :mod:`brrm.fingerprint`)."""
        return weights_fingerprint(self.model)

    def load(self) -> RewardJudge:
        """Build the judge this spec names (:func:`brrm.load`'s builder, registered with :func:`set_loader`), here
        or in a worker; its ``info.spec`` is this spec.

        Raises:
            ConfigError: when the weights ``model`` names now are not the ones fingerprinted (overwritten,
                a symlink switched, another hub commit), and whatever :func:`brrm.load` raises.
        """
        current = self.current_fingerprint()
        if current != self.fingerprint:
            raise ConfigError(f"the weights of {self.model!r} changed since this spec was made: fingerprint "
                              f"{current} is not {self.fingerprint}; make a new spec to judge with them")
        return _LOADER[0](self)


@dataclass(frozen=True)
class JudgeInfo:
    """What a judge is: recorded by servers, audits and benchmarks next to its results.

    Attributes:
        model: the model's name (hub id, the served name, or the embedded model's hub id; never a cache path).
        kind: one of :data:`KINDS`.
        recipe: how inputs become model calls, e.g. ``brrm``, ``sequence_classification``,
            ``qwen3_nemotron``, ``llama_nemotron``, ``qwen3_genrm``, ``llama_reward``.
        backend: ``transformers``, ``vllm``, ``openai`` or ``fake``.
        chat_template_hash: sha256 (first 16 hex) of the model's chat template.
        template_hash: sha256 (first 16 hex) over everything that shapes the prompt (brrm's templates, the
            chat template, recipe constants).
        default_strategy: what ``rank(strategy="auto")`` resolves to (``scores`` for scalar models,
            ``round_robin`` for pairwise judges).
        config: the model's typed settings: a ``BRRMConfig``, ``BTConfig`` or ``PrincipleConfig`` (frozen
            dataclasses of :mod:`brrm.judges` and :mod:`brrm.reward_models`), resolved (a recipe or format
            ``auto`` decided); None for a judge whose settings brrm knows only from a record it cannot read back
            (a server of an unknown kind, a hand-built stand-in). Read the common settings through
            :attr:`sampling` and :attr:`decoding`.
        record: the model's settings as its records carry them (JSON-ready, made by the model from ``config``;
            :meth:`to_dict` writes it under ``options`` with the composition's entries). Surfaces never read it:
            it is what stores hash and replies carry.
        composition: what composition adds around the model (:class:`~brrm.types.composition.Composition`:
            swap, voting samples, margin, principles, calibration).
        chunk_size: items per call the backend prefers (its decoding batch, or thousands for engines and
            servers); callers that stream results (the CLI) hand over this many at a time, >= 1.
        concurrent: calls may run from several threads at once and share the engine's running batch (vLLM,
            OpenAI-compatible servers); the HTTP server then runs several judge calls at a time.
        pairwise: the model judges pairs natively (BR-RM); False: it gives each response a scalar reward.
            None: the kind's trait (:data:`KIND_TRAITS`). Surfaces read this, never ``kind``.
        takes_principle: ``principles=`` steer the reward (principle models); others refuse them.
        needs_reference: ``score`` needs ``references=`` (a pairwise judge scores P(response ≻ reference)).
        fingerprint: the fingerprint of the loaded weights (:func:`brrm.fingerprint.weights_fingerprint`); empty for a
            judge over a hand-built backend.
        spec: the :class:`JudgeSpec` this judge was loaded from (``spec.load()`` rebuilds it), or
            None for a judge over a hand-built backend object.
    """

    model: str
    kind: str
    recipe: str
    backend: str
    chat_template_hash: str
    template_hash: str
    default_strategy: str
    config: object | None = None
    record: Mapping[str, Any] = field(default_factory=dict)
    composition: Composition = field(default_factory=Composition)
    chunk_size: int = 64
    concurrent: bool = False
    pairwise: bool | None = None
    takes_principle: bool | None = None
    needs_reference: bool | None = None
    fingerprint: str = ""
    spec: JudgeSpec | None = None

    def __post_init__(self) -> None:
        traits = KIND_TRAITS.get(self.kind, {})
        for trait in ("pairwise", "takes_principle", "needs_reference"):
            if getattr(self, trait) is None:
                if trait not in traits:
                    raise ConfigError(f"JudgeInfo.{trait} must be given for kind {self.kind!r} (no declared "
                                      f"trait; known kinds: {', '.join(KIND_TRAITS)})")
                object.__setattr__(self, trait, traits[trait])
        if isinstance(self.spec, Mapping):  # from to_dict()
            object.__setattr__(self, "spec", JudgeSpec.from_dict(self.spec))

    @classmethod
    def of(cls, backend: Any, **fields: Any) -> JudgeInfo:
        """The info of a judge over ``backend`` (a :class:`~brrm.backends.base.Backend`): its model, name, weights'
        fingerprint, chunk size and concurrency, with ``fields`` (kind, recipe, hashes, …; a field given wins)."""
        info, caps = backend.info, backend.capabilities
        return cls(**{"model": info.model, "backend": info.name, "fingerprint": info.fingerprint,
                      "chunk_size": caps.chunk_size, "concurrent": caps.concurrent, **fields})

    def describe(self) -> str:
        """One line for people: ``kind brrm (brrm), backend transformers``."""
        return f"kind {self.kind} ({self.recipe}), backend {self.backend}"

    @property
    def sampling(self) -> SamplingConfig | None:
        """The sampling settings of a generative judge's :attr:`config` (BR-RM, principle models); None for a
        Bradley–Terry model (a forward pass, nothing sampled) or a judge without a typed config."""
        sampling = getattr(self.config, "sampling", None)
        return sampling if isinstance(sampling, SamplingConfig) else None

    @property
    def decoding(self) -> str | None:
        """The decoding mode of :attr:`config` (BR-RM: ``constrained`` or ``faithful``; principle models: ``card``
        or ``constrained``); None for a Bradley–Terry model or a judge without a typed config."""
        decoding = getattr(self.config, "decoding", None)
        return decoding if isinstance(decoding, str) else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], config: object | None = None) -> JudgeInfo:
        """The info :meth:`to_dict` wrote (a reply's ``model`` block, a store's record), with ``config`` as its
        typed settings when the caller could read them back (the model kinds' ``from_record``).

        Raises:
            ConfigError: on a missing field, or a trait missing for an unknown kind.
        """
        given = {k: v for k, v in data.items() if k in _INFO_FIELDS}
        missing = [k for k in _REQUIRED_FIELDS if k not in given]
        if missing:
            raise ConfigError(f"a judge record needs {', '.join(missing)}")
        options = data.get("options") or {}
        composition = Composition.from_record(options)
        own = set(composition.to_dict())
        return cls(**given, config=config, record={k: v for k, v in options.items() if k not in own},
                   composition=composition)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields, the typed settings as their record (``options``: :attr:`record` with the
        composition's entries; ``config`` itself is not written), and the spec's own ``to_dict()``."""
        values = {k: json_field(getattr(self, k)) for k in _INFO_FIELDS}
        head = {k: values.pop(k) for k in _REQUIRED_FIELDS}  # the options follow the required fields
        return {**head, "options": {**self.record, **self.composition.to_dict()}, **values}


_INFO_FIELDS = ("model", "kind", "recipe", "backend", "chat_template_hash", "template_hash", "default_strategy",
                "chunk_size", "concurrent", "pairwise", "takes_principle", "needs_reference", "fingerprint", "spec")
"""The fields :meth:`JudgeInfo.from_dict` takes from a record as they are (the settings come from ``options``)."""

_REQUIRED_FIELDS = _INFO_FIELDS[:7]
"""Those without a default (``model`` … ``default_strategy``)."""


@runtime_checkable
class RewardJudge(Protocol):
    """The one reward interface: pairwise judgments, scalar rewards and group rankings from any model kind.

    Every implementation has these signatures and defaults. Batch calls take data positionally (N items,
    lengths checked) and options by keyword, and return one result per item in input order; a failed item
    is that item's status, never an exception or a number. Conversations are :class:`~brrm.types.Conversation`
    objects, prompt strings, or lists of ``{"role", "content"}`` messages ending with a user (or tool) turn.

    Methods:
        judge_pairs: ``judge_pairs(conversations, responses_a, responses_b, /, *, swap=None, ids=None,
            labels=None, principles=None) -> list[PairwiseJudgment]``; ``swap=None`` uses the judge's own
            setting; with swap both presentation orders are judged and disagreement is a tie
            (``consistent=False``).
        score: ``score(conversations, responses, /, *, principles=None, references=None, ids=None)
            -> list[ScalarReward]``: the model's reward (scalar models), or P(response ≻ reference) in [0, 1]
            (pairwise judges, which need ``references``).
        rank: ``rank(conversation, responses, /, *, strategy="auto", reference=None, swap=None,
            principles=None) -> GroupResult``: per-response rewards, ranking and win matrix of one group.
        rank_groups: ``rank_groups(conversations, groups, /, *, strategy="auto", references=None, swap=None,
            principles=None) -> list[GroupResult]``: many groups, their model calls batched together.
        judge: ``judge(conversation, response_a, response_b, /, *, swap=None) -> PairwiseJudgment``: one pair.
        score_one: ``score_one(conversation, response, /, *, principle=None, reference=None) -> ScalarReward``:
            one response.
        with_options: ``with_options(**overrides) -> RewardJudge``: a variant on the same loaded backend with
            other settings (the keywords of :func:`brrm.load` that do not load anything: decoding, budgets,
            seed, swap, margin, principle, …); the variant shares the backend, so closing either closes both.
        judgment_cost: ``judgment_cost(shape, n, /, *, strategy="auto", swap=None, principles=None) ->
            JudgmentCost``: the work a request makes, counted by the judge before it runs
            (:class:`~brrm.types.cost.JudgmentCost`: units, samples, turns, a line for people): ``shape``
            ``pairs`` (n pairs), ``score`` (n responses) or ``group`` (one group of n responses); a unit is one
            ordered judgment of a pairwise judge, one scored sequence of a scalar model; ``principles``: how many
            principles each response is scored on when the request names its own (a principle model; None: the
            judge's default principles). Admission, budgets and progress ask this; no surface counts by itself.
        cost: ``cost(shape, n, /, *, strategy="auto", swap=None, principles=None) -> int``:
            ``judgment_cost(...).total``.
        close: ``close()``: free the model (engines, threads); also on leaving a ``with`` block.

    The batch methods take ``progress``: a callback called with the number of items just finished
    (:data:`Progress`); ``judge_pairs`` and ``score`` also ``on_result`` (each item's result as soon as it is
    final, :data:`OnResult`), and ``judge_pairs`` ``on_step`` (decoding steps, :data:`OnStep`).

    Raises (every method):
        ConfigError: on mismatched lengths, an invalid conversation, a response that is not a string, or an
            option the judge cannot honour (e.g. ``references`` missing for a pairwise judge's ``score``),
            before any model call.
    """

    info: JudgeInfo

    def judge_pairs(self, conversations: Sequence[ConversationLike],
                    responses_a: Sequence[str], responses_b: Sequence[str],
                    /, *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Principles = None,
                    progress: Progress = None, on_result: OnResult = None,
                    on_step: OnStep = None) -> list[PairwiseJudgment]: ...

    def score(self, conversations: Sequence[ConversationLike],
              responses: Sequence[str], /, *, principles: Principles = None,
              references: Sequence[str] | None = None, ids: Sequence[str] | None = None,
              progress: Progress = None, on_result: OnResult = None) -> list[ScalarReward]: ...

    def rank(self, conversation: ConversationLike, responses: Sequence[str], /, *, strategy: str = "auto",
             reference: str | None = None, swap: bool | None = None, principles: Principles = None,
             progress: Progress = None) -> GroupResult: ...

    def rank_groups(self, conversations: Sequence[ConversationLike], groups: Sequence[Sequence[str]], /, *,
                    strategy: str = "auto", references: Sequence[str] | None = None, swap: bool | None = None,
                    principles: Principles = None, progress: Progress = None) -> list[GroupResult]: ...

    def judge(self, conversation: ConversationLike, response_a: str, response_b: str, /, *,
              swap: bool | None = None) -> PairwiseJudgment: ...

    def score_one(self, conversation: ConversationLike, response: str, /, *, principle: str | None = None,
                  reference: str | None = None) -> ScalarReward: ...

    def with_options(self, **overrides: Any) -> RewardJudge: ...

    def judgment_cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
                      principles: int | None = None) -> JudgmentCost: ...

    def cost(self, shape: str, n: int, /, *, strategy: str = "auto", swap: bool | None = None,
             principles: int | None = None) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> RewardJudge: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class ScalarRewardModel(Protocol):
    """A model that gives each (conversation, response) a scalar reward (Bradley–Terry, principle models)."""

    info: JudgeInfo

    def score(self, conversations: Sequence[ConversationLike],
              responses: Sequence[str], /, *, principles: Principles = None,
              ids: Sequence[str] | None = None) -> list[ScalarReward]:
        """One reward per (conversation, response), in input order."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class OrderedPairJudge(Protocol):
    """A model that judges one presentation order of a pair (BR-RM): response A is shown first.

    Swap-order debiasing is not its job: :mod:`brrm.compose` asks for both orders in one call and combines.
    A model that draws separate samples for self-consistency voting declares it with a class attribute
    ``votes = True`` (its ``judge_ordered`` then takes ``samples=k``); without it, voting is refused.
    """

    info: JudgeInfo

    def judge_ordered(self, conversations: Sequence[ConversationLike],
                      first: Sequence[str], second: Sequence[str], /, *,
                      ids: Sequence[str] | None = None) -> list[PairwiseJudgment]:
        """One judgment per ordered pair, with the winner in the caller's frame (A = ``first``)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Variable(Protocol):
    """A model that makes a variant of itself with other settings on the same backend (brrm's BR-RM, principle
    and Bradley–Terry models); :meth:`RewardJudge.with_options` builds on it."""

    def with_options(self, **options: Any) -> Any:
        """This model with ``options`` applied (validated), sharing its backend."""
        ...
