"""Scale-out on Ray Data: the pending items of an audit judged by an actor pool, written by the driver.

The driver (the ``brrm audit`` process) plans the audit and works out what is pending exactly as a local run
does (:mod:`brrm.audit.runner`), so resume is the same on one machine or a cluster. The pending items become
a Ray dataset (``ray.data.from_items``: each item's key and normalized record as JSON); ``map_batches`` runs
them through an actor pool of judges, each built once per actor by :func:`brrm.load` with the same model and
options (``--actors``, ``--num-gpus-per-actor``), judging with the same code as a local run
(:func:`brrm.audit.judging.judge_records`). The driver iterates the results as batches finish and writes
each batch to the store in one transaction: actors never touch the store, so it keeps a single writer,
and a batch lost with a dead actor or driver is simply pending on the next run.

On a GPU cluster, give each actor one GPU and a vLLM-backed judge (``--backend vllm --num-gpus-per-actor 1``),
or point CPU actors at a fleet of vLLM servers (``--backend openai --base-url …``). The driver never loads
the model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from brrm.audit.plan import AuditItem
from brrm.errors import BackendUnavailable, install_extra
from brrm.types import JudgeSpec, check_float, check_int
from brrm.types.jsonvalue import JSONDict

if TYPE_CHECKING:
    import numpy as np

    from brrm.audit.options import AuditOptions



RAY_HINT = install_extra("ray") + ", ray[data]==2.60.0"

DEFAULT_BATCH = 64
"""Items per actor call (and per store transaction) on Ray when ``--chunk-size`` is not given."""

PASS_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE",
            "BRRM_CACHE_DIR", "HF_HOME", "OMP_NUM_THREADS")
"""Environment variables the driver hands to its actors when set (offline mode, caches)."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a Ray audit runs.

    Attributes:
        address: a Ray cluster address (``auto``, ``ray://head:10001``); None starts a local instance. When Ray
            is already initialized in this process, that instance is used as is.
        actors: judge actors; None: the cluster's GPUs / ``num_gpus_per_actor`` (at least 1), or 1 without GPUs.
        num_gpus_per_actor: GPUs each actor holds, >= 0 (1 for one vLLM engine per GPU).
        num_cpus_per_actor: CPUs each actor holds, > 0.
        init_kwargs: extra ``ray.init`` arguments for a local instance (e.g. ``num_cpus``).

    Raises:
        ConfigError: naming the option and its valid range.
    """

    address: str | None = None
    actors: int | None = None
    num_gpus_per_actor: float = 0.0
    num_cpus_per_actor: float = 1.0
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)  # ray.init's keywords (typed by Ray)

    def __post_init__(self) -> None:
        if self.actors is not None:
            check_int("actors", self.actors, low=1)
        check_float("num_gpus_per_actor", self.num_gpus_per_actor, low=0)
        check_float("num_cpus_per_actor", self.num_cpus_per_actor, low=0, low_open=True)


NICENESS = "BRRM_DRIVER_NICENESS"
"""Environment variable that carries the driver's CPU niceness to its actors (:func:`actor_setup`)."""
WORKER_NICENESS = {"worker_niceness": 0}
"""Ray's ``_system_config`` for a local instance brrm starts: its workers add nothing to the niceness they inherit
(the driver's), instead of Ray's default 15 (see :func:`actor_setup`)."""


def actor_setup(environ: MutableMapping[str, str] = os.environ) -> int:
    """What every brrm actor does first: no torch.compile (``TORCH_COMPILE_DISABLE=1`` unless set), and run at its
    driver's CPU priority (:data:`NICENESS`).

    Ray starts worker processes at niceness 15 (its ``worker_niceness`` setting) so that they yield to the driver;
    brrm's actors do all of a run's judging, and a niceness-15 process gets a few percent of a core beside
    normal-priority work: measured on the 2-core box, an arena on one actor that takes 17 s idle had not finished
    after 300 s beside one spinning process per core. Lowering a niceness needs privilege (root, ``CAP_SYS_NICE`` or
    ``RLIMIT_NICE``); where it is refused the actor stays as Ray started it (a local instance that brrm starts runs
    its workers at the driver's niceness anyway: :data:`WORKER_NICENESS`).

    Returns:
        the niceness this process runs at afterwards.
    """
    environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    now = os.getpriority(os.PRIO_PROCESS, 0)
    want = environ.get(NICENESS, "")
    if not want.lstrip("-").isdigit() or int(want) >= now:
        return now
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(want))
    except OSError:  # PermissionError: no privilege to raise this process's priority
        return now
    return int(want)


class JudgeActor:
    """One judge of the pool (``brrm.load`` once per actor); judges one batch of items per call.

    Args:
        spec: the :class:`brrm.JudgeSpec` of the judge (its weights are checked against the fingerprint).
        shape, strategy: as :class:`brrm.audit.runner.AuditOptions`.
    """

    def __init__(self, spec: JudgeSpec, shape: str, strategy: str | None) -> None:
        actor_setup()
        self.judge = spec.load()
        self.shape, self.strategy = shape, strategy
        self.info = json.dumps(self.judge.info.to_dict())

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{"key", "record"}`` columns in; ``{"key", "result", "info"}`` out (JSON text)."""
        import numpy as np

        from brrm.audit.judging import judge_records

        records = [json.loads(r) for r in batch["record"]]
        results = judge_records(self.judge, self.shape, records, strategy=self.strategy)
        return {"key": np.asarray(batch["key"], dtype=object),
                "result": np.asarray([json.dumps(r, ensure_ascii=False) for r in results], dtype=object),
                "info": np.asarray([self.info] * len(results), dtype=object)}


def judge_on_ray(spec: JudgeSpec, pending: Sequence[AuditItem], options: AuditOptions,
                 ray_options: RayOptions) -> Iterator[tuple[list[AuditItem], list[JSONDict], JSONDict]]:
    """Judge pending items on a Ray actor pool; yields ``(items, results, judge info)`` as batches finish.

    Raises:
        BackendUnavailable: when Ray is not installed (with the install hint).
    """
    by_key = {it.item_hash: it for it in pending}
    rows = [{"key": it.item_hash, "record": json.dumps(it.record, ensure_ascii=False)} for it in pending]
    constructor = {"spec": spec, "shape": options.shape, "strategy": options.strategy}
    for out in map_on_ray(JudgeActor, constructor, rows, options.chunk_size or DEFAULT_BATCH, ray_options):
        keys = [str(k) for k in out["key"]]
        yield [by_key[k] for k in keys], [json.loads(r) for r in out["result"]], json.loads(out["info"][0])


def map_on_ray(actor: type, constructor: Mapping[str, object], rows: Sequence[Mapping[str, str]], batch: int,
               ray_options: RayOptions) -> Iterator[Mapping[str, np.ndarray]]:
    """Run ``rows`` (text columns) through a pool of ``actor(**constructor)`` on Ray Data, ``batch`` rows per
    call; yields each finished output batch (numpy columns) as it arrives, so the caller (the one writer of its
    store) commits it before the next. A Ray instance is started (and shut down) here unless one is running.

    Raises:
        BackendUnavailable: when Ray is not installed (with the install hint).
    """
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise BackendUnavailable("--ray needs Ray Data", hint=RAY_HINT) from exc
    import logging

    started_here = not ray.is_initialized()
    if started_here:
        _init(ray, ray_options, logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # the caller's own bar and summary lines report progress
        env = passed_env(cpus_per_actor=ray_options.num_cpus_per_actor)
        ds = ray.data.from_items(list(rows), override_num_blocks=max(1, -(-len(rows) // batch))).map_batches(
            actor, fn_constructor_kwargs=dict(constructor), batch_size=batch, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=_actors(ray, ray_options)),
            num_cpus=ray_options.num_cpus_per_actor, num_gpus=ray_options.num_gpus_per_actor or None,
            runtime_env={"env_vars": env} if env else None)
        yield from ds.iter_batches(batch_size=None, batch_format="numpy")
    finally:
        if started_here:
            ray.shutdown()


def _init(ray: ModuleType, ray_options: RayOptions, level: int) -> None:
    """``ray.init`` for ``ray_options``; a new local instance gets :data:`WORKER_NICENESS` (Ray refuses a system
    config when ``address=None`` finds a running cluster, ``RAY_ADDRESS`` or a ``ray start`` head: then it
    connects without one)."""
    kwargs = {"address": ray_options.address, "include_dashboard": False, "log_to_driver": False,
              "logging_level": level, **dict(ray_options.init_kwargs)}
    if ray_options.address is None and "_system_config" not in kwargs:
        try:
            ray.init(**kwargs, _system_config=WORKER_NICENESS)
            return
        except ValueError as exc:  # "When connecting to an existing cluster, _system_config must not be provided."
            if "_system_config" not in str(exc):
                raise
    ray.init(**kwargs)


def passed_env(environ: Mapping[str, str] = os.environ, *, cpus_per_actor: float = 1.0) -> dict[str, str]:
    """The environment an actor gets on top of the driver's: the :data:`PASS_ENV` variables set here, with an
    ``OMP_NUM_THREADS`` that brrm chose for the driver (:mod:`brrm.threads`: this machine's usable CPUs, which Ray
    workers on this node would inherit) replaced by the actor's own CPUs, ``cpus_per_actor`` (at least 1), as Ray
    sets for a worker whose environment does not say. A user's own ``OMP_NUM_THREADS`` is passed on as it is; and
    this process's niceness as :data:`NICENESS` (:func:`actor_setup`)."""
    from brrm.threads import MARKER

    env = {k: environ[k] for k in PASS_ENV if k in environ}
    chosen = f"{environ.get('OMP_NUM_THREADS', '')}/{environ.get('OMP_WAIT_POLICY', '')}"
    if environ.get(MARKER) == chosen:
        env["OMP_NUM_THREADS"] = str(max(1, int(cpus_per_actor)))
    env[NICENESS] = str(os.getpriority(os.PRIO_PROCESS, 0))
    return env


def _actors(ray: ModuleType, opts: RayOptions) -> int:
    if opts.actors is not None:
        return opts.actors
    if opts.num_gpus_per_actor > 0:
        return max(1, int(ray.cluster_resources().get("GPU", 0) // opts.num_gpus_per_actor))
    return 1
