"""A judge that travels between processes: pickle its :class:`~brrm.JudgeSpec`, rebuild it lazily there.

RLHF frameworks move reward functions between processes (TRL's async GRPO worker pickles its rewards; verl
and Ray ship them to workers). A live judge holds a model, a tokenizer and maybe an engine, none of which
should be pickled. So an adapter holds a :class:`JudgeSource`: either a :class:`~brrm.JudgeSpec` — the
arguments of :func:`brrm.load` and the weights' fingerprint — which pickles as that value and is loaded on first
use in the process that calls it, or an already built judge, which pickles as its own spec
(``judge.info.spec``, set by :func:`brrm.load`), else only if the judge itself pickles (a clear error says to
pass a spec otherwise).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

from brrm.errors import ConfigError
from brrm.types import JudgeSpec, RewardJudge


class JudgeSource:
    """A judge, or the recipe of one, shared by an adapter; thread-safe lazy loading.

    Args:
        judge: a :class:`~brrm.RewardJudge` (used as is) or a :class:`~brrm.JudgeSpec` (loaded on first use).

    Raises:
        ConfigError: when ``judge`` is neither.
    """

    def __init__(self, judge: RewardJudge | JudgeSpec) -> None:
        if isinstance(judge, JudgeSpec):
            self.recipe: JudgeSpec | None = judge
            self._judge: RewardJudge | None = None
        elif isinstance(judge, RewardJudge):
            self.recipe, self._judge = None, judge
        else:
            raise ConfigError(f"judge must be a brrm.RewardJudge (from brrm.load) or a brrm.JudgeSpec, got "
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
                if self.recipe is None:
                    raise RuntimeError("a JudgeSource holds a judge or a spec")  # unreachable by construction
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
        spec = self._judge.info.spec if self._judge is not None else None
        if spec is not None:  # a loaded judge travels as its spec; the other process loads its own
            return {"recipe": spec}
        try:
            pickle.dumps(self._judge)
        except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same advice
            raise ConfigError(
                f"this reward holds a live judge, which cannot be pickled ({type(exc).__name__}: {exc}); pass "
                "brrm.JudgeSpec(model, kind=..., options={...}) instead, so each process "
                "loads its own judge"
            ) from None
        return {"judge": self._judge}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.recipe = state.get("recipe")
        self._judge = state.get("judge")
        self._lock = threading.RLock()
