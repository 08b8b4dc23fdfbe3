"""An arena's matchups judged on a Ray actor pool (``brrm arena --ray``), through the audit's Ray machinery
(:func:`brrm.audit.ray_runner.map_on_ray`): the driver plans the matchups and works out from the audit store what
is pending exactly as a local run does (:mod:`brrm.arena.resume`); each actor builds the judge once from its
:class:`~brrm.JudgeSpec` (``JudgeSpec.load``, which refuses weights that changed since the spec was made) and
judges its batch with the same call as a local run; the driver commits each batch to the store as it arrives
(one writer), so a run killed on the cluster resumes with only the uncommitted batches pending.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from brrm.arena.judging import outcome
from brrm.audit.ray_runner import actor_setup
from brrm.service.items import PairItem, PairsCall
from brrm.types import JudgeSpec

if TYPE_CHECKING:
    import numpy as np


class ArenaActor:
    """One judge of the pool; judges one batch of matchups per call.

    Args:
        spec: the judge to build (``spec.load()``, once per actor).
        swap: judge both presentation orders (applied only when the judge is pairwise, as
            :func:`brrm.arena.judging.default_swap` decides locally).
    """

    def __init__(self, spec: JudgeSpec, swap: bool) -> None:
        actor_setup()
        self.judge = spec.load()
        self.swap = swap and bool(self.judge.info.pairwise)
        self.info = json.dumps(self.judge.info.to_dict())

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{"key", "id", "record"}`` columns in (``record``: JSON of ``prompt``, ``response_a``,
        ``response_b``); ``{"key", "result", "info"}`` out: each matchup's :func:`~brrm.arena.judging.outcome`
        and the judge's info, as JSON text."""
        import numpy as np

        from brrm.service.run import run

        records = [json.loads(r) for r in batch["record"]]
        items = [PairItem(r["prompt"], r["response_a"], r["response_b"], id=str(i))
                 for r, i in zip(records, batch["id"], strict=True)]
        call = PairsCall(swap=self.swap if self.judge.info.pairwise else None)
        results = run(self.judge, items, call=call, chunk_size=self.judge.info.chunk_size)
        outs = [json.dumps(outcome(self.judge.info, j, self.swap), ensure_ascii=False) for j in results]
        return {"key": np.asarray(batch["key"], dtype=object), "result": np.asarray(outs, dtype=object),
                "info": np.asarray([self.info] * len(outs), dtype=object)}
