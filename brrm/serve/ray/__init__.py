"""brrm's judge as a Ray Serve application: replicas, autoscaling and restarts from Ray Serve, one HTTP API.

``build_app(spec, replicas=..., autoscale=..., gpus_per_replica=..., cpus_per_replica=...)`` makes the
application (:mod:`brrm.serve.ray.app`); ``brrm serve --ray`` deploys it, ``brrm serve --ray --print-config``
writes its Serve config, and ``brrm.load("ray://APP")`` judges with a running one from inside the cluster
(:mod:`brrm.serve.ray.client`). Single-flight and ``Idempotency-Key`` hold across ingress replicas because every
request is routed to the judge replica its digest picks (:mod:`brrm.serve.ray.router`). Needs the ``ray`` extra.
"""

from __future__ import annotations

from brrm.serve.ray.app import APP_NAME, build_app, from_args, serve_config
from brrm.serve.ray.sizing import RaySizing, parse_autoscale

__all__ = ["APP_NAME", "RaySizing", "build_app", "from_args", "parse_autoscale", "serve_config"]
