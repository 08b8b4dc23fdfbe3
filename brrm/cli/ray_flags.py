"""The ``--ray`` flags that ``brrm audit`` and ``brrm arena`` share (Ray Data actor pools,
:mod:`brrm.audit.ray_runner`), and the :class:`~brrm.audit.ray_runner.RayOptions` they make."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from brrm.errors import ConfigError, install_extra

if TYPE_CHECKING:
    from brrm.audit.ray_runner import RayOptions


def add_ray_args(p: argparse.ArgumentParser, *, writer: str) -> None:
    """``--ray [ADDRESS]``, ``--actors``, ``--num-gpus-per-actor``, ``--num-cpus-per-actor``; ``writer`` says what
    this process still writes (the driver is the store's one writer)."""
    r = p.add_argument_group(f"Ray ({install_extra('ray')})")
    r.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="judge on a Ray actor pool: a cluster address (e.g. auto, ray://head:10001) or none for a "
                        f"local Ray instance; this process still writes {writer}")
    r.add_argument("--actors", type=int, default=None,
                   help="judge actors (default: GPUs / --num-gpus-per-actor, else 1)")
    r.add_argument("--num-gpus-per-actor", type=float, default=0.0, help="GPUs each actor holds (default 0)")
    r.add_argument("--num-cpus-per-actor", type=float, default=1.0, help="CPUs each actor holds (default 1)")


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The Ray options the flags ask for, or None without ``--ray``.

    Raises:
        ConfigError: for ``--actors`` or ``--num-gpus-per-actor`` without ``--ray``, or an out-of-range value
            (naming the option).
    """
    if args.ray is None:
        if args.actors is not None or args.num_gpus_per_actor:
            raise ConfigError("--actors and --num-gpus-per-actor apply with --ray")
        return None
    from brrm.audit.ray_runner import RayOptions

    return RayOptions(address=None if args.ray == "local" else args.ray, actors=args.actors,
                      num_gpus_per_actor=args.num_gpus_per_actor, num_cpus_per_actor=args.num_cpus_per_actor)
