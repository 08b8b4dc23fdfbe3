"""One registry mechanism for what brrm builds by name: model kinds, backends and benchmarks.

A :class:`Registry` maps a name to a ``"module:object"`` reference and imports the module only when that name is
asked for (as lm-evaluation-harness's ``Registry`` does), so ``import brrm`` imports no kind, backend or benchmark.
Each kind, backend or benchmark module exports its one entry (a :class:`KindEntry`, a
:class:`~brrm.backends.entry.BackendEntry`, a :class:`~brrm.bench.base.Benchmark` class); the built-in ones are
one line each in :data:`KIND_REGISTRY`, :data:`BACKEND_REGISTRY` and :data:`BENCHMARK_REGISTRY` below.

Other installed packages add entries through Python entry points, read once and only when a registry is listed
or asked for a name it does not have (:func:`plugin_refs`): the groups ``brrm.kinds``, ``brrm.backends`` and
``brrm.benchmarks``, each entry point named as the kind, backend or benchmark, its value the entry's
``"module:object"``. In a plugin's ``pyproject.toml``::

    [project.entry-points."brrm.kinds"]
    mykind = "mypkg.kind:KIND"
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from brrm.errors import ConfigError

T = TypeVar("T")
V = TypeVar("V")

GROUPS = ("brrm.kinds", "brrm.backends", "brrm.benchmarks")
"""The entry-point groups other packages register in: model kinds, backends, benchmarks."""


def resolve(ref: str, *, what: str = "reference") -> Any:
    """The object ``"module:object"`` names (``object`` may be dotted: ``"pkg.mod:Class.attr"``), imported.

    Args:
        ref: ``"module:object"``.
        what: how error messages name ``ref`` (e.g. ``--factory``).

    Raises:
        ConfigError: when ``ref`` is not ``module:object``, or the module or object is missing.
    """
    module, sep, name = ref.partition(":")
    if not module or not sep or not name:
        raise ConfigError(f"{what} {ref!r} is not MODULE:OBJECT")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise ConfigError(f"{what} {ref!r}: {exc}") from None
    return obj


_PLUGINS: dict[str, dict[str, str]] = {}


def plugin_refs(group: str) -> dict[str, str]:
    """The entry points of other installed packages in ``group`` (one of :data:`GROUPS`): name -> ``"module:object"``,
    read from every installed distribution once (one scan for all groups, cached; :func:`forget_plugins` reads
    them again)."""
    if not _PLUGINS:
        from importlib.metadata import entry_points

        found = entry_points()
        for each in GROUPS:
            _PLUGINS[each] = {ep.name: ep.value for ep in found.select(group=each)}
    return _PLUGINS.get(group, {})


def forget_plugins() -> None:
    """Read the entry points again on the next look-up (after a package was installed or put on ``sys.path``)."""
    _PLUGINS.clear()
    for registry in _REGISTRIES:
        registry.forget()


_REGISTRIES: list[Registry[Any]] = []


class Registry(Mapping[str, T], Generic[T]):
    """Names -> entries, each imported when first asked for: the built-in references, then other packages' entry
    points (a plugin cannot replace a built-in name), then entries added with :meth:`register`.

    A registry is a read-only mapping (``names in registry``, ``registry[name]``, ``registry.items()``; iterating
    reads the entry points); :meth:`entry` is the look-up that names the valid choices on an unknown name.
    """

    def __init__(self, what: str, group: str, builtins: Mapping[str, str]) -> None:
        self.what = what
        self.group = group
        self._builtins = dict(builtins)
        self._added: dict[str, str | object] = {}
        self._loaded: dict[str, T] = {}
        _REGISTRIES.append(self)

    def refs(self) -> dict[str, str | object]:
        """Every name -> its reference (or the object :meth:`register` was given), built-ins first."""
        out: dict[str, str | object] = {**plugin_refs(self.group), **self._added}
        return {**self._builtins, **{k: v for k, v in out.items() if k not in self._builtins}}

    def names(self) -> tuple[str, ...]:
        """Every name, built-ins first (in their table's order), then plugins and registered entries."""
        return tuple(self.refs())

    def _ref(self, name: str) -> str | object | None:
        if name in self._builtins:  # no entry-point scan for a built-in name
            return self._builtins[name]
        return self.refs().get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._ref(name) is not None

    def __getitem__(self, name: str) -> T:
        if name not in self._loaded:
            ref = self._ref(name)
            if ref is None:
                raise KeyError(name)
            self._loaded[name] = resolve(ref, what=f"{self.what} {name!r}") if isinstance(ref, str) else ref  # type: ignore[assignment]
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __eq__(self, other: object) -> bool:  # a registry is a place, not a value: never import to compare
        return self is other

    __hash__ = object.__hash__

    def entry(self, name: str) -> T:
        """The entry called ``name``.

        Raises:
            ConfigError: for an unknown name, naming the valid ones.
        """
        if name not in self:
            raise ConfigError(f"{self.what} {name!r} is not valid; expected one of {', '.join(self.names())}")
        return self[name]

    def register(self, name: str, ref: str | object) -> None:
        """Add ``name`` (a ``"module:object"`` or the entry itself) for this process: tests, notebooks; an installed
        package uses its entry point instead. A later registration of the same name replaces the earlier one.

        Raises:
            ConfigError: when ``name`` is built in.
        """
        if name in self._builtins:
            raise ConfigError(f"{self.what} {name!r} is built in and cannot be replaced")
        self._added[name] = ref
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Remove what :meth:`register` added under ``name`` (nothing when it added none)."""
        self._added.pop(name, None)
        self._loaded.pop(name, None)

    def forget(self) -> None:
        """Drop the imported entries of names that are not built in (read again on the next look-up)."""
        for name in [n for n in self._loaded if n not in self._builtins]:
            del self._loaded[name]

    def view(self, get: Callable[[T], V]) -> Mapping[str, V]:
        """A live mapping name -> ``get(entry)`` (e.g. each backend's options class)."""
        return _View(self, get)


class _View(Mapping[str, V], Generic[T, V]):
    def __init__(self, registry: Registry[T], get: Callable[[T], V]) -> None:
        self._registry, self._get = registry, get

    def __getitem__(self, name: str) -> V:
        return self._get(self._registry[name])

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry)

    def __len__(self) -> int:
        return len(self._registry)


class Names(Sequence[str]):
    """A registry's names as a live tuple-like sequence (equal to the tuple of its names), for
    :data:`brrm.KINDS` and :data:`brrm.types.BACKENDS`: plugins are listed once installed."""

    def __init__(self, registry: Registry[Any]) -> None:
        self._registry = registry

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self._registry.names()[index]

    def __len__(self) -> int:
        return len(self._registry.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Names) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._registry.names())


@dataclass(frozen=True)
class KindEntry:
    """Everything brrm knows of one model kind, exported by the kind's own module as ``KIND``.

    Attributes:
        traits: ``pairwise`` (it judges pairs natively), ``takes_principle`` (``principles=`` steer its reward),
            ``needs_reference`` (``score`` needs ``references=``), ``generates`` (a language model that generates,
            loaded as a causal LM; False: read off a classification head or a logit). :class:`JudgeInfo` carries
            the first three; surfaces read them, never the kind's name.
        options: its options dataclasses as ``"module:Class"`` (or the classes), in keyword order: their
            :func:`~brrm.types.options.option` fields are its :func:`brrm.load` keywords and CLI flags; the first is
            its typed config (with ``from_record``).
        builder: ``"module:function"`` (or the function) ``builder(name, options, calibration) -> maker``: checks
            every judge option before anything loads and returns ``maker(backend, source) -> RewardJudge``.
        group: the title of its flags' group in ``--help`` (kinds may share one).
        recipes: ``"module:NAME"`` of the tuple of values its ``recipe`` keyword takes besides ``auto``; None for a
            kind without one.
        detect: ``"module:function"`` of ``detect(name, config) -> recipe | None`` (``config``: the checkpoint's
            ``config.json`` as a dict, or None): a recipe when the config shows a checkpoint of this kind; None: no
            detection (the kind must be named, or known by id in :mod:`brrm.recipes`).
    """

    traits: Mapping[str, bool]
    options: tuple[str | type, ...]
    builder: str | Callable[..., Any]
    group: str
    recipes: str | None = None
    detect: str | None = None

    def option_classes(self) -> tuple[type, ...]:
        """:attr:`options`, imported."""
        return tuple(resolve(ref) if isinstance(ref, str) else ref for ref in self.options)

    def build(self) -> Callable[..., Any]:
        """:attr:`builder`, imported."""
        return resolve(self.builder) if isinstance(self.builder, str) else self.builder


KIND_REGISTRY: Registry[KindEntry] = Registry("kind", "brrm.kinds", {
    "brrm": "brrm.judges.brrm_kind:KIND",
    "bt": "brrm.reward_models.bt_kind:KIND",
    "principle": "brrm.judges.principle_kind:KIND",
})
"""Model kinds: ``brrm`` (two-turn BR-RM pairwise judge), ``bt`` (Bradley–Terry scalar reward model),
``principle`` (RLBFF principle-following reward model); each value the kind module's :class:`KindEntry`."""

BACKEND_REGISTRY: Registry[Any] = Registry("backend", "brrm.backends", {
    "transformers": "brrm.backends.options:TRANSFORMERS",
    "vllm": "brrm.backends.options:VLLM",
    "openai": "brrm.backends.options:OPENAI",
})
"""Backends: each value a :class:`~brrm.backends.entry.BackendEntry` (typed there, in
:data:`brrm.backends.registry.BACKEND_REGISTRY`)."""

BENCHMARK_REGISTRY: Registry[Any] = Registry("benchmark", "brrm.benchmarks", {
    "llmbar": "brrm.bench.llmbar:LLMBar",
    "judgebench": "brrm.bench.judgebench:JudgeBench",
    "rm-bench": "brrm.bench.rmbench:RMBench",
    "rmb": "brrm.bench.rmb:RMB",
    "autoj": "brrm.bench.autoj:AutoJ",
    "mt-bench": "brrm.bench.mtbench:MTBench",
    "pandalm": "brrm.bench.pandalm:PandaLM",
    "rewardbench": "brrm.bench.rewardbench:RewardBench",
    "rewardbench2": "brrm.bench.rewardbench2:RewardBench2",
    "evalbiasbench": "brrm.bench.evalbiasbench:EvalBiasBench",
})
"""Benchmarks (``brrm bench NAME``): each value a :class:`~brrm.bench.base.Benchmark` subclass."""


def kind_entry(kind: str) -> KindEntry | None:
    """The entry of model kind ``kind``, or None for a name that is no kind (``auto``, an unknown one)."""
    return KIND_REGISTRY[kind] if kind in KIND_REGISTRY else None
