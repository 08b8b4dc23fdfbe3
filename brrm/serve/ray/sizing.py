"""How wide a Ray Serve judge runs (:class:`RaySizing`) and the Ray Serve deployment options it makes.

The same options go into :func:`brrm.serve.ray.build_app` (``Deployment.options``) and into the Serve config that
``brrm serve --ray --print-config`` writes (its ``deployments:`` entries), so a Python app and a ``serve deploy``
of the printed file run the same sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from brrm.errors import ConfigError
from brrm.types import check_float, check_int

JUDGE = "BrrmJudge"
"""The judge replicas' deployment name (each holds one whole judge: both turns of a judgment run on it)."""
INGRESS = "BrrmIngress"
"""The HTTP ingress deployment's name (forwards each request to a judge replica, routed by its digest)."""
ROUTER = "brrm.serve.ray.router.DigestRouter"
"""The judge deployment's Ray Serve request router (import path, as a Serve config names it)."""

UPSCALE_DELAY_S = 10.0
"""Seconds the judge replicas' queue must stay over the target before Serve adds a replica (Serve's default: 30)."""
DOWNSCALE_DELAY_S = 120.0
"""Seconds the queue must stay under the target before Serve removes a replica (Serve's default: 600)."""


@dataclass(frozen=True)
class RaySizing:
    """How many judge replicas run, and what each holds.

    Attributes:
        replicas: a fixed number of judge replicas, >= 1 (ignored when ``autoscale`` is set).
        autoscale: ``(min, max)`` judge replicas, 1 <= min <= max: Ray Serve adds replicas while each holds more
            than ``target_ongoing`` requests and removes them when idle (its ``autoscaling_config``); None: fixed.
        gpus_per_replica: GPUs each judge replica holds (Ray ``num_gpus``), >= 0.
        cpus_per_replica: CPUs each judge replica holds (Ray ``num_cpus``), > 0.
        ingress_replicas: HTTP ingress replicas, >= 1 (they hold no model: 0.1 CPU each).
        target_ongoing: requests per judge replica Serve's autoscaler aims at, > 0 (default 8: a replica batches
            requests itself, so a few waiting is its normal state).
        upscale_delay_s, downscale_delay_s: the autoscaler's delays (:data:`UPSCALE_DELAY_S`,
            :data:`DOWNSCALE_DELAY_S`), >= 0.
        autoscaling: more ``autoscaling_config`` keys for Ray Serve, as it names them (e.g. ``metrics_interval_s``).
        judge_resources, ingress_resources: Ray custom resources each judge / ingress replica holds (e.g.
            ``{"rm_node": 1}`` to keep the judge on the nodes that have it).

    Raises:
        ConfigError: naming the field and its valid range.
    """

    replicas: int = 1
    autoscale: tuple[int, int] | None = None
    gpus_per_replica: float = 0.0
    cpus_per_replica: float = 1.0
    ingress_replicas: int = 1
    target_ongoing: float = 8.0
    upscale_delay_s: float = UPSCALE_DELAY_S
    downscale_delay_s: float = DOWNSCALE_DELAY_S
    autoscaling: Mapping[str, Any] = field(default_factory=dict)
    judge_resources: Mapping[str, float] = field(default_factory=dict)
    ingress_resources: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("replicas", self.replicas, low=1)
        check_int("ingress_replicas", self.ingress_replicas, low=1)
        check_float("gpus_per_replica", self.gpus_per_replica, low=0)
        check_float("cpus_per_replica", self.cpus_per_replica, low=0, low_open=True)
        check_float("target_ongoing", self.target_ongoing, low=0, low_open=True)
        check_float("upscale_delay_s", self.upscale_delay_s, low=0)
        check_float("downscale_delay_s", self.downscale_delay_s, low=0)
        if self.autoscale is not None:
            low, high = self.autoscale
            check_int("autoscale min", low, low=1)
            check_int("autoscale max", high, low=1)
            if low > high:
                raise ConfigError(f"autoscale: min {low} is above max {high}")

    def judge_options(self) -> dict[str, Any]:
        """The judge deployment's ``Deployment.options`` keywords (JSON values; Serve config keys too)."""
        actor: dict[str, Any] = {"num_cpus": self.cpus_per_replica}
        if self.gpus_per_replica:
            actor["num_gpus"] = self.gpus_per_replica
        if self.judge_resources:
            actor["resources"] = dict(self.judge_resources)
        out: dict[str, Any] = {"ray_actor_options": actor}
        if self.autoscale is None:
            out["num_replicas"] = self.replicas
        else:
            out["autoscaling_config"] = {
                "min_replicas": self.autoscale[0], "max_replicas": self.autoscale[1],
                "initial_replicas": self.autoscale[0], "target_ongoing_requests": self.target_ongoing,
                "upscale_delay_s": self.upscale_delay_s, "downscale_delay_s": self.downscale_delay_s,
                **dict(self.autoscaling)}
        return out

    def ingress_options(self) -> dict[str, Any]:
        """The ingress deployment's ``Deployment.options`` keywords."""
        actor: dict[str, Any] = {"num_cpus": 0.1}
        if self.ingress_resources:
            actor["resources"] = dict(self.ingress_resources)
        return {"num_replicas": self.ingress_replicas, "ray_actor_options": actor}


def parse_autoscale(text: str, *, flag: str = "--autoscale") -> tuple[int, int]:
    """``"MIN:MAX"`` as two ints.

    Raises:
        ConfigError: naming ``flag`` when the text is not two whole numbers >= 1 with MIN <= MAX.
    """
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ConfigError(f"{flag} {text!r} is not MIN:MAX (two whole numbers, e.g. 1:4)")
    pair = int(low), int(high)
    if pair[0] < 1 or pair[0] > pair[1]:
        raise ConfigError(f"{flag} {text!r}: MIN must be >= 1 and MAX >= MIN")
    return pair
