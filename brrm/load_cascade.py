"""The ``cascade`` keywords of :func:`brrm.load` and :func:`brrm.load.check`: a judge cascade
(:class:`~brrm.compose.cascade.CascadeJudge`) of the judge ``load`` builds and a second judge, planned and checked
before either model loads. The door (:mod:`brrm.load`) hands in its own ``load`` and ``check``, so this module does
not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from brrm.compose.cascade import CascadeJudge, Confidence
from brrm.errors import ConfigError
from brrm.types import KINDS, RewardJudge, check_choice
from brrm.types.protocols import is_remote


@dataclass(frozen=True)
class CascadePlan:
    """What the ``cascade*`` keywords ask for, checked.

    Attributes:
        second: the second judge: a model name (hub id, local folder, ``brrm serve`` URL) or a built judge.
        kind: the second judge's kind (``auto`` where its checkpoint tells).
        options: the second judge's :func:`brrm.load` keywords, ``backend`` included (default: the first judge's
            backend name, or ``transformers`` when that is a backend object or a server).
        confidence: the rule (:meth:`Confidence.of`).
        keywords: the ``cascade*`` keywords as given and set (what a spec records to rebuild the cascade).
    """

    second: str | RewardJudge
    kind: str
    options: dict[str, Any]
    confidence: Confidence
    keywords: dict[str, Any]

    @classmethod
    def of(cls, cascade: str | RewardJudge, backend: object, *, cascade_kind: str = "auto",
           cascade_margin: float | None = None, cascade_band: float | None = None, cascade_agree: bool = False,
           cascade_options: Mapping[str, object] | None = None) -> CascadePlan:
        """The plan, every keyword checked before anything loads.

        Raises:
            ConfigError: on a second judge that is neither a non-empty name nor a judge, an unknown kind, options
                that are no mapping, or a rule that is missing, doubled or out of range.
        """
        if (isinstance(cascade, str) and not cascade.strip()) or not isinstance(cascade, str | RewardJudge):
            raise ConfigError(f"cascade must name the second judge (a hub id, a local folder or a brrm serve URL) or "
                              f"be a judge, got {cascade!r}")
        confidence = Confidence.of(margin=cascade_margin, band=cascade_band, agree=cascade_agree)
        if cascade_options is not None and not isinstance(cascade_options, Mapping):
            raise ConfigError(f"cascade_options must be a mapping of the second judge's brrm.load keywords, got "
                              f"{cascade_options!r}")
        options = dict(cascade_options or {})
        kind = check_choice("cascade_kind", options.pop("kind", cascade_kind), ("auto", *KINDS))
        named = isinstance(backend, str) and not is_remote(None, backend)
        options.setdefault("backend", backend if named else "transformers")  # a serve URL names its own
        given = {"cascade_kind": cascade_kind, "cascade_margin": cascade_margin, "cascade_band": cascade_band,
                 "cascade_agree": cascade_agree, "cascade_options": cascade_options}
        keywords = {"cascade": cascade, **{k: v for k, v in given.items() if v is not None and v is not False}}
        return cls(cascade, str(kind), options, confidence, keywords)

    def check(self, check: Callable[..., None]) -> None:
        """Check a named second judge as :func:`brrm.load.check` (``check``) does, without loading it."""
        if isinstance(self.second, str):
            check(self.second, kind=self.kind, **self.options)

    def build(self, first: RewardJudge, load: Callable[..., RewardJudge]) -> RewardJudge:
        """The cascade of ``first`` and the second judge (``load`` builds a named one); ``first`` is closed when
        that fails. Its ``info.spec`` is the first judge's with every ``cascade*`` keyword, so that ``spec.load()``
        rebuilds the cascade; None for a built second judge or options that are no JSON.

        Raises:
            ConfigError: as ``load`` for the second judge, or :class:`CascadeJudge` for the pair.
        """
        try:
            second = self.second if not isinstance(self.second, str) else load(self.second, kind=self.kind,
                                                                               **self.options)
            built = CascadeJudge(first, second, self.confidence)
        except BaseException:
            first.close()
            raise
        spec, rebuilt = first.info.spec, None
        if spec is not None and isinstance(self.second, str):
            try:
                rebuilt = replace(spec, options={**spec.options, **self.keywords})
            except ConfigError:  # options that are no JSON values: no spec
                rebuilt = None
        built.info = replace(built.info, spec=rebuilt)
        return built
