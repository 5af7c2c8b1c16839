"""Compute ops at the rank's nominal device rate, whatever CFS quota it carries in.

A rank isolated by a CPU quota (`run.cpu_isolation`) gets `cores` of a core per
CFS period. A rank that waited (for a P2P tensor, a collective) starts its next op
with the current period's quota unspent and runs that part at a full core's speed,
while a rank that computes back to back waits out every period: the same op is up
to one period (8.9 ms with 16 ranks on 2 cores) faster after a wait. 1F1B runs some
stages' ops back to back (stage 0's forwards after a backward, the last stage's
backwards after its forward), so those stages are systematically slower, which a
GPU does not do (benchmarks/README.md, "Timing noise"). Pacing undoes the carry-in:
after the op, if its wall time is under its own CPU time over the rank's share, the
op sleeps the difference, so every op takes at least `cpu / cores` seconds. Ops the
quota already held to that rate are untouched.

    pacer = ComputePacer(cores=0.1125)        # None: no quota, nothing to pace
    with pacer.op():
        out = model(x)
"""

from __future__ import annotations

import contextlib
import os
import time

from stragglerlab.workloads.cpu_share import default_cores
from stragglerlab.workloads.tracer import now


def pace_share(run, device_type: str, cgroup: dict | None, world_size: int) -> float | None:
    """The share a rank's compute ops are paced to (`run.pace_compute`, CPU ranks), else
    None: the rank's quota, or without isolation the share a quota would have given it.
    run: the scenario's RunConfig."""
    if not run.pace_compute or device_type != "cpu":
        return None
    return (cgroup["cores"] if cgroup else run.cores_per_rank
            or default_cores(os.cpu_count() or 1, world_size))


class ComputePacer:
    """Pad compute ops to at least their thread CPU time over the rank's current share."""

    def __init__(self, cores: float | None, margin: float = 1.0) -> None:
        self.cores = cores
        """The rank's share in cores; None disables pacing."""
        self.margin = margin
        """Paced ops last margin x CPU time / share (run.pace_margin)."""
        self.samples: list[tuple[float, float, float]] = []
        """(thread CPU s, wall s before pacing, paced share) per op: the run's pacing record."""

    @property
    def ops(self) -> int:
        """Ops paced so far."""
        return len(self.samples)

    def _pads(self) -> list[float]:
        return [cpu / share - wall for cpu, wall, share in self.samples if cpu / share > wall]

    @property
    def ops_padded(self) -> int:
        """Ops that slept."""
        return len(self._pads())

    @property
    def padded_s(self) -> float:
        """Seconds slept so far."""
        return float(sum(self._pads()))

    @contextlib.contextmanager
    def op(self, cores: float | None = None):
        """Time the body's thread CPU and wall time; sleep up to margin x cpu / share after
        it. cores: the share now, when it differs from the rank's own (the slow-worker
        injector writes a lower quota while it acts); ignored when pacing is off."""
        if self.cores is None:
            yield
            return
        share = (cores or self.cores) / self.margin
        cpu0, wall0 = time.thread_time(), now()
        yield
        cpu, wall = time.thread_time() - cpu0, now() - wall0
        self.samples.append((cpu, wall, share))
        if cpu / share > wall:
            time.sleep(cpu / share - wall)
