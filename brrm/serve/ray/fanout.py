"""``/metrics`` and ``/ready`` of the whole application: asked of every judge replica, answered as one.

The ingress finds the judge replicas running now (Ray's named replica actors of this application), asks each its
own ``/metrics`` or ``/ready`` through the judge handle pinned to it (:data:`~brrm.serve.ray.keys.REPLICA_KWARG`,
honoured by :class:`~brrm.serve.ray.router.DigestRouter`), and answers with the sum: every counter, gauge and
histogram bucket summed across replicas (queue depth, batch sizes, statuses, requests...) plus
``brrm_replicas`` and ``brrm_replicas_ready``; ``/ready`` answers 200 when at least one replica is ready, and says
how many are. A replica that does not answer within :data:`ASK_TIMEOUT_S` counts as not ready.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from brrm.serve.ray.forward import answer_of
from brrm.serve.ray.keys import REPLICA_KWARG
from brrm.serve.ray.wire import Answer, Forwarded

ASK_TIMEOUT_S = 30.0
"""Seconds one replica has to answer its ``/metrics`` or ``/ready`` (routing included: Serve's router probes a
replica's queue length first, which took ~10 s on an overloaded 2-core test box; a dead replica leaves the list of
replicas at once, so this bounds only a live one that is stuck)."""
FANOUT_PATHS = ("/metrics", "/ready")
"""The GET routes answered for the whole application."""


def replica_ids(app: str, deployment: str) -> list[str]:
    """The unique ids of ``app``'s ``deployment`` replicas that Ray lists as live named actors."""
    import ray
    from ray.serve._private.common import REPLICA_ID_FULL_ID_STR_PREFIX as PREFIX

    head = f"{PREFIX}{app}#{deployment}#"
    names = ray.util.list_named_actors(all_namespaces=True)
    return sorted(n["name"][len(head):] for n in names if str(n["name"]).startswith(head))


async def ask_all(handle: Any, request: Forwarded, ids: list[str]) -> list[Answer | None]:
    """Each replica's answer to ``request`` (None where it gave none in time), asked one after the other: calls
    made at once from one ingress request share its Serve request id, and Ray Serve 2.60's router then hands one
    call's replica to the other (seen: one of two concurrent pinned calls never routed)."""

    async def one(rid: str) -> Answer | None:
        response = handle.forward.remote(request, **{REPLICA_KWARG: rid})
        try:
            return await asyncio.wait_for(answer_of(response), ASK_TIMEOUT_S)
        except Exception:  # gone, restarting or busy: counted as not ready
            response.cancel()
            return None

    return [await one(rid) for rid in ids]


def ready_answer(answers: list[Answer | None]) -> Answer:
    """``/ready`` of the application: 200 when any replica is ready; its queue depth and running calls summed,
    ``replicas`` and ``ready_replicas`` counted, and the first not-ready reason when none is ready."""
    bodies = [a.json() for a in answers if a is not None]
    states = [b for b in bodies if isinstance(b, dict)]
    ready = [b for b in states if b.get("ready")]
    reason = "" if ready else next((str(b.get("reason")) for b in states if b.get("reason")),
                                   "no judge replica is running yet")
    body = {"ready": bool(ready), "reason": reason, "queue_depth": sum(int(b.get("queue_depth", 0)) for b in states),
            "running": sum(int(b.get("running", 0)) for b in states),
            "warmup_attempts": max((int(b.get("warmup_attempts", 0)) for b in states), default=0),
            "replicas": len(answers), "ready_replicas": len(ready)}
    return Answer(200 if ready else 503, (("content-type", "application/json"),), json.dumps(body).encode())


def metrics_answer(answers: list[Answer | None]) -> Answer:
    """``/metrics`` of the application: every sample summed across the replicas that answered (Prometheus text)."""
    from prometheus_client.parser import text_string_to_metric_families

    kinds: dict[str, tuple[str, str]] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    got = [a for a in answers if a is not None and a.status == 200]
    for answer in got:
        for family in text_string_to_metric_families(answer.body.decode()):
            kinds.setdefault(family.name, (family.type, family.documentation))
            samples = sums.setdefault(family.name, {})
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                samples[key] = samples.get(key, 0.0) + s.value
    lines = ["# HELP brrm_replicas Judge replicas running", "# TYPE brrm_replicas gauge",
             f"brrm_replicas {len(answers)}", "# HELP brrm_replicas_ready Judge replicas that answered /metrics",
             "# TYPE brrm_replicas_ready gauge", f"brrm_replicas_ready {len(got)}"]
    for name, (kind, doc) in kinds.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        for (sample, labels), value in sums[name].items():
            shown = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{sample}{{{shown}}} {value!r}" if shown else f"{sample} {value!r}")
    body = ("\n".join(lines) + "\n").encode()
    return Answer(200, (("content-type", "text/plain; version=0.0.4; charset=utf-8"),), body)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
