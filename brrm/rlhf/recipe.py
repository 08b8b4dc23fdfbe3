"""A judge that travels between processes: pickle what built it (:class:`JudgeRecipe`), rebuild it lazily there.

RLHF frameworks move reward functions between processes (TRL's async GRPO worker pickles its rewards; verl
and Ray ship them to workers). A live judge holds a model, a tokenizer and maybe an engine, none of which
should be pickled. So an adapter holds a :class:`JudgeSource`: either a :class:`JudgeRecipe` — the arguments
of :func:`brrm.load` — which pickles as those arguments and is loaded on first use in the process that calls
it, or an already built judge, which pickles only if the judge itself pickles (a clear error says to pass a
recipe otherwise).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from brrm.errors import ConfigError
from brrm.types import RewardJudge


@dataclass(frozen=True)
class JudgeRecipe:
    """The arguments of :func:`brrm.load`, kept so that a judge can be rebuilt in another process.

    Attributes:
        model: hub id or local directory; None for the embedded demo model.
        kind: ``auto``, ``brrm``, ``bt`` or ``principle`` (as :func:`brrm.load`).
        backend: ``transformers``, ``vllm`` or ``openai`` (a backend *object* cannot travel; build the judge
            yourself and pass it instead).
        options: :func:`brrm.load` options (e.g. ``{"swap": True, "temperature": 0}``), JSON-like values.

    Raises:
        ConfigError: when ``backend`` is not a name or ``options`` is not a mapping with str keys.
    """

    model: str | None = None
    kind: str = "auto"
    backend: str = "transformers"
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.backend, str):
            raise ConfigError("JudgeRecipe.backend must be a backend name ('transformers', 'vllm', 'openai'); "
                              "to use a backend object, build the judge with brrm.load and pass the judge")
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise ConfigError(f"JudgeRecipe.options must be a mapping of option names to values, got "
                              f"{self.options!r}")
        object.__setattr__(self, "options", dict(self.options))

    def load(self) -> RewardJudge:
        """``brrm.load(model, kind=kind, backend=backend, **options)``.

        Raises:
            ConfigError, BackendUnavailable: as :func:`brrm.load`.
        """
        from brrm.load import load

        return load(self.model, kind=self.kind, backend=self.backend, **self.options)


class JudgeSource:
    """A judge, or the recipe of one, shared by an adapter; thread-safe lazy loading.

    Args:
        judge: a :class:`~brrm.RewardJudge` (used as is) or a :class:`JudgeRecipe` (loaded on first use).

    Raises:
        ConfigError: when ``judge`` is neither.
    """

    def __init__(self, judge: RewardJudge | JudgeRecipe) -> None:
        if isinstance(judge, JudgeRecipe):
            self.recipe: JudgeRecipe | None = judge
            self._judge: RewardJudge | None = None
        elif isinstance(judge, RewardJudge):
            self.recipe, self._judge = None, judge
        else:
            raise ConfigError(f"judge must be a brrm.RewardJudge (from brrm.load) or a brrm.rlhf.JudgeRecipe, got "
                              f"{type(judge).__name__}")
        self._lock = threading.RLock()

    @property
    def loaded(self) -> bool:
        """Whether the judge is built in this process."""
        return self._judge is not None

    def get(self) -> RewardJudge:
        """The judge, loading it from the recipe on first use."""
        with self._lock:
            if self._judge is None:
                assert self.recipe is not None
                self._judge = self.recipe.load()
            return self._judge

    @property
    def lock(self) -> threading.RLock:
        """Held around each judge call: one model call at a time per source (backends are not thread-safe)."""
        return self._lock

    def close(self) -> None:
        """Close a judge this source loaded from its recipe (a judge passed in belongs to the caller)."""
        with self._lock:
            if self.recipe is not None and self._judge is not None:
                self._judge.close()
                self._judge = None

    def __getstate__(self) -> dict[str, Any]:
        if self.recipe is not None:
            return {"recipe": self.recipe}
        try:
            pickle.dumps(self._judge)
        except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same advice
            raise ConfigError(
                f"this reward holds a live judge, which cannot be pickled ({type(exc).__name__}: {exc}); pass "
                "brrm.rlhf.JudgeRecipe(model, kind=..., options={...}) instead, so each process loads its own judge"
            ) from None
        return {"judge": self._judge}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.recipe = state.get("recipe")
        self._judge = state.get("judge")
        self._lock = threading.RLock()
