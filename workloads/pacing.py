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
import time

from stragglerlab.workloads.tracer import now


class ComputePacer:
    """Pad compute ops to at least their thread CPU time over the rank's current share."""

    def __init__(self, cores: float | None) -> None:
        self.cores = cores
        """The share in cores the op's pace follows; None disables pacing. The slow-worker
        injector lowers it with the quota it writes (cgroup['cores_now'])."""
        self.padded_s = 0.0
        """Seconds slept so far (reported in the run's faults/pacing record)."""
        self.ops = 0
        """Ops seen so far."""
        self.ops_padded = 0
        """Ops that slept."""
        self.samples: list[tuple[float, float, float]] = []
        """(thread CPU s, wall s before pacing, share) per op, for the run's pacing record."""

    @contextlib.contextmanager
    def op(self, cores: float | None = None):
        """Time the body's thread CPU and wall time; sleep up to cpu / cores after it.
        cores: the share now, when it differs from the rank's own (ignored if pacing is off)."""
        share = None if self.cores is None else (cores or self.cores)
        if share is None or share <= 0:
            yield
            return
        cpu0, wall0 = time.thread_time(), now()
        yield
        cpu, wall = time.thread_time() - cpu0, now() - wall0
        self.samples.append((cpu, wall, share))
        left = cpu / share - wall
        self.ops += 1
        if left > 0:
            time.sleep(left)
            self.padded_s += left
            self.ops_padded += 1
