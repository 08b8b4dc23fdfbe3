"""A local Ray instance for the Ray tests (tests/test_*_ray.py): one per test module, shared by its tests.

Starting Ray costs more than most of what a test then asks of it: the GCS, the raylet, the dashboard head and
agents, and on a dataset's first run Ray Data's own actors (stats, autoscaling coordinator, location tracker),
about 10-15 s of CPU before any judge loads. A test module starts one instance through :func:`local_ray` in a
module-scoped fixture; brrm uses a running instance as it is (:func:`brrm.audit.ray_runner.map_on_ray`), so the
code under test is the code a user runs, with the instance that :func:`brrm.audit.ray_runner._init` would start:
workers at the driver's niceness (:data:`~brrm.audit.ray_runner.WORKER_NICENESS`, so a busy machine does not
starve them), no dashboard, no log forwarding.

The instance is local to this machine: a new one (``address="local"``, never a cluster named by ``RAY_ADDRESS``),
whose node address is the loopback, so every Ray server binds 127.0.0.1 (Ray binds its node address, found by
routing towards the outside unless told to use the loopback), and it is shut down when the module ends, a test
failing or not. Each test's own ``pytest.mark.timeout`` bounds the start (in the first test's set-up) and the
shut-down (in the last one's tear-down).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TypeVar

import pytest

T = TypeVar("T")
RAY_REASON = "Ray is an optional extra: pip install -e '.[ray]'"

LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch (read at import, by each of its processes) that makes the loopback this node's address."""


STARTUP_TIMEOUT = "timed out during startup"
"""Ray's error when a node it starts has not registered with the GCS within 30 s: a constant in Ray's own code
(``ray/_private/node.py``, Ray 2.60; no setting changes it), which a 2-core box under heavy load can pass."""
START_ATTEMPTS = 3
"""How many times a test's Ray instance or cluster is started before its start-up timeout fails the test."""


def started(start: Callable[[], T], stop: Callable[[], None]) -> T:
    """``start()``, tried again (after ``stop()``) when a node of it passed Ray's fixed start-up wait
    (:data:`STARTUP_TIMEOUT`), at most :data:`START_ATTEMPTS` times: how long the box takes to start Ray decides no
    test's verdict. Any other error, and the last attempt's, is raised."""
    for attempt in range(START_ATTEMPTS):
        try:
            return start()
        except Exception as exc:
            if STARTUP_TIMEOUT not in str(exc) or attempt == START_ATTEMPTS - 1:
                raise
            stop()
    raise AssertionError("unreachable")


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[ModuleType]:
    """A new local Ray instance on 127.0.0.1 with ``num_cpus`` CPUs for the ``with`` block; yields the ``ray``
    module. Skips (as ``pytest.importorskip``) where Ray is not installed.

    Raises:
        RuntimeError: when this process already has a Ray instance (a test that did not shut its own down).
    """
    ray = pytest.importorskip("ray", reason=RAY_REASON)
    from ray._private import ray_constants

    from brrm.audit.ray_runner import WORKER_NICENESS

    if ray.is_initialized():
        raise RuntimeError("a Ray instance is already running in this test process")
    try:
        with pytest.MonkeyPatch.context() as patch:  # for ray.init only; its processes keep what they inherited
            patch.setenv(LOOPBACK_ONLY, "0")
            patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # this process has read it already
            patch.delenv("RAY_ADDRESS", raising=False)
            context = started(lambda: ray.init(
                address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", include_dashboard=False,
                log_to_driver=False, logging_level="WARNING", _system_config=dict(WORKER_NICENESS)), ray.shutdown)
        address = context.address_info["node_ip_address"]
        if address != "127.0.0.1":
            raise RuntimeError(f"the test Ray instance runs on {address}, not on 127.0.0.1")
        yield ray
    finally:
        ray.shutdown()
