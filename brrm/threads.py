"""CPU threading that degrades gracefully on a busy machine: chosen by brrm before torch initialises.

On a shared CPU (a CI runner, a notebook beside a browser, a cluster node with other jobs, the RLHF trainer's own
host) the OpenMP runtime under torch spins its worker threads while they wait at the end of every parallel
region; when the machine has given their core to another process, every matmul waits for its slowest thread.
Measured on a 2-core box at load ~8 (one pair of ``examples/pairs.jsonl`` on the embedded demo model):
1,098 s at the runtime's defaults, 107 s with ``OMP_WAIT_POLICY=PASSIVE``, 70 s on one thread.

What brrm sets, once, when ``brrm`` is imported and only for what the user has not set:

* ``OMP_WAIT_POLICY=PASSIVE`` — waiting threads sleep instead of spinning (the OpenMP specification's passive
  policy; GNU libgomp and LLVM libomp both read it when they initialise, so it must be set before torch is
  imported), after a brief spin: ``GOMP_SPINCOUNT`` = :data:`SPIN_COUNT` (libgomp, torch's OpenMP runtime on Linux:
  the spins a waiting thread makes before it sleeps; libgomp's own choice for more threads than CPUs). Measured
  with ``benchmarks/bench_threads.py``'s run on the 2-core box (one demo pair, seconds): idle — passive 27.7,
  passive after 1,000 spins 23.1, spinning (ACTIVE) 22.1; busy (a spinning process per core) — 38.2, 38.5 and
  115.8. 3,000 spins gave 45.7 busy, 10,000 gave 77.9: the brief spin buys the idle box its speed back and costs
  the busy one nothing;
* ``OMP_NUM_THREADS`` = the CPUs this process may really use (:func:`usable_cpus`: its CPU affinity and its
  cgroup's CPU quota, not the host's core count), so a container limited to 2 CPUs on a 64-core host does not
  start 64 threads.

A user's own ``OMP_NUM_THREADS`` or ``OMP_WAIT_POLICY`` always wins (brrm leaves the variable alone), as does a
later ``torch.set_num_threads`` (brrm never calls it). When torch was imported before brrm, its runtime has
already read its settings and brrm changes nothing. :data:`CHOICE` records what happened; the CLI prints it
(:meth:`Choice.describe`).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

SPIN_COUNT = 1000
"""Spins a waiting OpenMP thread makes before it sleeps (``GOMP_SPINCOUNT``; see the module docstring)."""

MARKER = "BRRM_THREADS_SET"
"""Environment variable brrm sets beside the OpenMP variables it chose (``"THREADS/POLICY"``), so a child process
(a server, a Ray worker) that inherits them knows they are brrm's choice, not the user's, and chooses again."""


@dataclass(frozen=True)
class Choice:
    """What brrm decided about CPU threading at import.

    Attributes:
        threads: intra-op threads in effect for OpenMP (``OMP_NUM_THREADS``), >= 1.
        threads_by: ``brrm`` (set from :func:`usable_cpus`), ``user`` (the environment had it) or ``torch``
            (torch was imported first; its runtime's own choice, not known here: ``threads`` is then the usable
            CPU count).
        wait_policy: ``OMP_WAIT_POLICY`` in effect (``PASSIVE``, ``ACTIVE``, or ``runtime default``); brrm's
            ``PASSIVE`` comes with ``GOMP_SPINCOUNT`` (:data:`SPIN_COUNT` unless the user set it).
        wait_by: ``brrm``, ``user`` or ``torch``, as for ``threads_by``.
        spins: ``GOMP_SPINCOUNT`` in effect when brrm chose the wait policy ("" otherwise).
    """

    threads: int
    threads_by: str
    wait_policy: str
    wait_by: str
    spins: str = ""

    def describe(self) -> str:
        """One line, e.g. ``"CPU threads 2 (set by brrm: usable CPUs), OpenMP wait policy PASSIVE after 1000 spins
        (set by brrm)"``."""
        why = {"brrm": "set by brrm: usable CPUs", "user": "OMP_NUM_THREADS", "torch": "torch imported first"}
        spins = f" after {self.spins} spins" if self.spins else ""
        return (f"CPU threads {self.threads} ({why[self.threads_by]}), OpenMP wait policy {self.wait_policy}{spins} "
                f"({'set by brrm' if self.wait_by == 'brrm' else why[self.wait_by]})")


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``), or None when unlimited or unreadable."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    try:
        q = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        p = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return q / p if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask (``os.sched_getaffinity``, else ``os.cpu_count()``), capped by
    the cgroup quota rounded up (a 1.5-CPU quota gives 2), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def choose(environ: dict[str, str] | os._Environ[str] = os.environ, *, torch_loaded: bool | None = None) -> Choice:
    """Set ``OMP_WAIT_POLICY`` and ``OMP_NUM_THREADS`` in ``environ`` where unset (see the module docstring) and
    say what is in effect. ``torch_loaded``: whether torch is imported already (default: look in ``sys.modules``)."""
    loaded = "torch" in sys.modules if torch_loaded is None else torch_loaded
    user_threads, user_wait = environ.get("OMP_NUM_THREADS", "").strip(), environ.get("OMP_WAIT_POLICY", "").strip()
    if environ.get(MARKER) == f"{user_threads}/{user_wait}":  # a child of a brrm process: inherited brrm's choice
        user_threads = user_wait = ""
    cpus = usable_cpus()
    if user_threads:
        threads, threads_by = _positive(user_threads, cpus), "user"
    elif loaded:
        threads, threads_by = cpus, "torch"
    else:
        threads, threads_by = cpus, "brrm"
        environ["OMP_NUM_THREADS"] = str(cpus)
    spins = ""
    if user_wait:
        wait, wait_by = user_wait.upper(), "user"
    elif loaded:
        wait, wait_by = "runtime default", "torch"
    else:
        wait, wait_by = "PASSIVE", "brrm"
        environ["OMP_WAIT_POLICY"] = "PASSIVE"
        spins = environ.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))
    if "brrm" in (threads_by, wait_by):
        environ[MARKER] = f"{environ.get('OMP_NUM_THREADS', '')}/{environ.get('OMP_WAIT_POLICY', '')}"
    return Choice(threads, threads_by, wait, wait_by, spins)


def _positive(text: str, default: int) -> int:
    """The first entry of an ``OMP_NUM_THREADS`` value (it may list nesting levels, ``"4,2"``), else ``default``."""
    try:
        return max(1, int(text.split(",")[0]))
    except ValueError:
        return default


CHOICE: Choice = choose()
"""What :func:`choose` decided when brrm was first imported."""
