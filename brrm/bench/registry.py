"""The benchmarks ``brrm bench NAME`` knows, by name (each module imported only when asked for)."""

from __future__ import annotations

import importlib

from brrm.bench.base import Benchmark
from brrm.errors import ConfigError

BENCHMARKS = {
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
}
"""Registry name -> ``module:class``."""

ALIASES = {"rmbench": "rm-bench", "auto-j": "autoj", "autoj-evalp": "autoj", "mtbench": "mt-bench",
           "reward-bench": "rewardbench", "judge-bench": "judgebench",
           "reward-bench-2": "rewardbench2", "rb2": "rewardbench2",
           "evalbias": "evalbiasbench", "eval-bias-bench": "evalbiasbench", "biasbench": "evalbiasbench"}

OPTIONS = {"rewardbench": ("weighting",), "rewardbench2": ("strategy", "revision")}
"""The constructor options (CLI flags) each benchmark takes; the others take none."""


def names() -> tuple[str, ...]:
    """The registry names, in help order."""
    return tuple(BENCHMARKS)


def get_benchmark(name: str, **options: str | None) -> Benchmark:
    """The benchmark called ``name`` (or an alias), built with its options (:data:`OPTIONS`).

    Raises:
        ConfigError: for an unknown name (listing the valid ones) or an option the benchmark does not take.
    """
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in BENCHMARKS:
        raise ConfigError(f"benchmark {name!r} is not known; expected one of {', '.join(BENCHMARKS)}")
    module, cls = BENCHMARKS[key].split(":")
    factory = getattr(importlib.import_module(module), cls)
    given = {k: v for k, v in options.items() if v is not None}
    wrong = [k for k in given if k not in OPTIONS.get(key, ())]
    if wrong:
        owners = " / ".join(b for b, opts in OPTIONS.items() if wrong[0] in opts)
        raise ConfigError(f"{', '.join(f'--{k}' for k in wrong)} applies to {owners} only, not {key}")
    bench: Benchmark = factory(**given)
    return bench
