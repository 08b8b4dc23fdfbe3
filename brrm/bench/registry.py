"""The benchmarks ``brrm bench NAME`` knows, by name: :data:`brrm.registry.BENCHMARK_REGISTRY` (each module imported
only when asked for; other packages add theirs through the ``brrm.benchmarks`` entry points). Adding a benchmark is
one module with its :class:`~brrm.bench.base.Benchmark` subclass and one line in that registry."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from brrm.bench.base import Benchmark
from brrm.errors import ConfigError
from brrm.registry import BENCHMARK_REGISTRY, Registry

BENCHMARKS: Registry[type[Benchmark]] = BENCHMARK_REGISTRY
"""Registry name -> :class:`Benchmark` subclass."""

ALIASES = {"rmbench": "rm-bench", "auto-j": "autoj", "autoj-evalp": "autoj", "mtbench": "mt-bench",
           "reward-bench": "rewardbench", "judge-bench": "judgebench",
           "reward-bench-2": "rewardbench2", "rb2": "rewardbench2",
           "evalbias": "evalbiasbench", "eval-bias-bench": "evalbiasbench", "biasbench": "evalbiasbench"}
"""Other spellings of the registry names (optional: a benchmark needs none)."""


def names() -> tuple[str, ...]:
    """The registry names, in help order."""
    return BENCHMARKS.names()


def options_of(cls: type[Benchmark]) -> tuple[str, ...]:
    """The options (CLI flags) a benchmark takes: its constructor's keywords."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(n for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self" and p.kind in named)


def get_benchmark(name: str, **options: str | None) -> Benchmark:
    """The benchmark called ``name`` (or an alias), built with its options (its constructor's keywords).

    Raises:
        ConfigError: for an unknown name (listing the valid ones) or an option the benchmark does not take.
    """
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in BENCHMARKS:
        raise ConfigError(f"benchmark {name!r} is not known; expected one of {', '.join(BENCHMARKS)}")
    factory = BENCHMARKS[key]
    given = {k: v for k, v in options.items() if v is not None}
    wrong = [k for k in given if k not in options_of(factory)]
    if wrong:
        raise ConfigError(f"{', '.join(f'--{k}' for k in wrong)} applies to {_owners(wrong[0], BENCHMARKS)} only, "
                          f"not {key}")
    return factory(**given)


def _owners(option: str, benchmarks: Mapping[str, type[Benchmark]]) -> str:
    """The benchmarks whose constructor takes ``option`` (each imported), as ``a / b``."""
    return " / ".join(b for b, cls in benchmarks.items() if option in options_of(cls))
