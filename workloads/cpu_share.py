"""The CPU share a rank gets when `run.cores_per_rank` does not say.

The launcher and the cluster run size the ranks' cgroup quotas by it, and the
engine paces compute to it when a rank runs without a quota. Its own module,
free of torch and Ray, so the engine and the drivers import it without
importing each other.

    cores = run.cores_per_rank or default_cores(os.cpu_count() or 1, world)
"""

from __future__ import annotations

CPU_HEADROOM = 0.9
"""Share of a host's cores dealt out to its ranks: quotas are caps, not guarantees, so
the rest is left to Ray, the driver and the OS instead of being taken from the ranks."""


def default_cores(host_cpus: int, ranks: int) -> float:
    """Cores per rank when `ranks` ranks share a host of `host_cpus` cores."""
    return CPU_HEADROOM * host_cpus / ranks
