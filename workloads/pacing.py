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

`run.pace_rate: warmup` (and `auto`, the default) replaces the CPU-time target by a
nominal one, because the CPU time of the same work varies on a vCPU (CV 6-11 % for one
matmul here: benchmarks/bench_cpu_noise.py). Ops given a `slot` (the engine: forward or
backward of its stage) and their modelled `work` (the engine: the stage's multiply-adds on
that microbatch, stragglerlab/scenarios/partition.py) keep their time before padding per unit of
work, less host stalls, at the share then (core-seconds; at least their thread CPU time),
save while an injector slows the rank. `settle` (the engine: once, after the last warm-up
step, the cold first step's times dropped) takes each slot's median over the latest
`window` of them (0: all), the largest over the ranks (one all-reduce), and puts the slots
of an op kind on one rate, the largest (`one_rate_per_work`). From then on an op lasts at
least margin x rate x work x device_factor / the rank's share, as on a device with a fixed
rate: across stages compute follows the partition's modelled cost, and across microbatches
of variable-length data their attention's sum(s^2), as on a GPU (paper §5.3), where a CPU
matmul hides most of it. `device_factor` is the slow-worker injector's factor while it
acts (exact), and host stalls inside the op (`stall_s`: the rank's GC pauses) come on top,
as a stalled launch delays a device's kernels, instead of vanishing into the padding. Why
once, and why not the first step (measured on clean dp2-pp4, docs/faults.md):
with the cold step in, stage 0's rate came out 1.07-1.19x the others' (steady:
1.01-1.03x) and 2 of 5 seeds got a false stage-imbalance finding; re-agreed every step on
the latest two, the rate followed the host's contention, and the bystanders drifted 4-10 %
within a §6 run.

    pacer = ComputePacer(cores=0.1125, margin=1.2, warmup_rate=True, stall_s=gc_seconds)
    with pacer.op(slot=stage, work=w): ...    # warm-up steps: CPU rule, timed per work
    pacer.forget()                            # after the cold first step
    pacer.settle(slots=2 * pp, pp=pp)         # every rank, after the warm-up
    with pacer.op(slot=stage, work=w, device_factor=2.0): ...   # a 2x slower device
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable

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


def settles_after(step: int, warmup_steps: int) -> bool:
    """Whether warm-up-rate pacing settles after `step`: the last warm-up step (or the
    first step, when there is none)."""
    return step + 1 == max(warmup_steps, 1)


def one_rate_per_work(rate: list[float], pp: int) -> list[float]:
    """Each slot's rate per unit of modelled work made one per op kind: the largest the
    kind's stages measured. Slots are `stage + pp * kind` (forward, backward); a slot
    with no measured rate (0) keeps none.

    Why (measured): a stage's warm-up wall time carries its own share of CFS
    carry-in, which 1F1B gives each stage differently, so per-stage rates put a constant
    offset between equal stages for the whole run (clean pure PP 2: forward 25 ms on stage
    0 against 18.5 ms on stage 1 for the same work), which reads as a heavy partition.
    One rate makes compute follow the modelled work (stragglerlab/scenarios/partition.py): across
    stages the partition's cost, the model that sizes it and writes its ground truth;
    across microbatches their attention's sum(s^2). The largest keeps every op under its
    target, so all of them are padded."""
    if pp < 1 or len(rate) % pp:
        raise ValueError(f"need pp | slots, got {len(rate)} rates, pp={pp}")
    out = list(rate)
    for kind in range(len(rate) // pp):
        slots = range(kind * pp, (kind + 1) * pp)
        top = max((rate[i] for i in slots), default=0.0)
        for i in slots:
            out[i] = top if rate[i] > 0 else 0.0
    return out


def agreed_medians(samples: list[list[float]]) -> list[float]:
    """Each slot's median (0 with no sample), the largest over the process group's ranks
    when one is up (a collective: every rank calls it with as many slots)."""
    import statistics

    import torch
    import torch.distributed as dist

    value = torch.tensor([statistics.median(v) if v else 0.0 for v in samples],
                         dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.tolist()


class ComputePacer:
    """Pad compute ops to at least their thread CPU time over the rank's current share."""

    def __init__(self, cores: float | None, margin: float = 1.0,
                 warmup_rate: bool = False, window: int = 0,
                 stall_s: Callable[[], float] | None = None) -> None:
        self.cores = cores
        """The rank's share in cores; None disables pacing."""
        self.margin = margin
        """Paced ops last margin x CPU time / share (run.pace_margin)."""
        self.samples: list[tuple[float, float, float]] = []
        """(thread CPU s, wall s before pacing, paced share) per op: the run's pacing record."""
        self.warmup_rate = warmup_rate
        """Pace slotted ops to their warm-up time once settled (run.pace_rate: warmup)."""
        self.rate: list[float] | None = None
        """Per slot, core-seconds of the op at the job's rate (None: not settled)."""
        self.window = window
        """How many of a slot's latest ops its rate is the median of (0: all of them)."""
        self._recent: dict[int, collections.deque[float]] = {}
        self.over_target = 0
        """Settled ops that ran past their nominal target."""
        self.stall_s = stall_s
        """Seconds the rank's thread has stalled so far (GC pauses), added to a settled
        op's nominal target; None: no stall is measured."""

    @property
    def settled(self) -> bool:
        """Whether ops are now paced to the warm-up rate (after `settle`)."""
        return self.rate is not None

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
    def op(self, cores: float | None = None, slot: int | None = None,
           device_factor: float = 1.0, work: float = 1.0):
        """Time the body's thread CPU and wall time; sleep up to margin x cpu / share after
        it. cores: the share now, when it differs from the rank's own (the slow-worker
        injector writes a lower quota while it acts); ignored when pacing is off. slot:
        the op's place in the warm-up-rate table; device_factor: how many times slower the
        rank's device runs now, applied to a settled slot's nominal time; work: the op's
        modelled work (> 0), what the slot's rate is per unit of (module doc)."""
        if self.cores is None:
            yield
            return
        now_share = cores or self.cores
        share = now_share / self.margin
        stall0 = self.stall_s() if self.stall_s else 0.0
        cpu0, wall0 = time.thread_time(), now()
        yield
        cpu, wall = time.thread_time() - cpu0, now() - wall0
        self.samples.append((cpu, wall, share))
        target = cpu / share
        if self.warmup_rate and slot is not None and work > 0:  # no modelled work: CPU rule
            stalled = self.stall_s() - stall0 if self.stall_s else 0.0
            if device_factor == 1.0:  # a rank an injector slows does not speak for its stage
                self._recent.setdefault(slot, collections.deque(maxlen=self.window or None)
                                        ).append(max(wall - stalled, cpu / now_share)
                                                 * now_share / work)
            if self.rate is not None and self.rate[slot] > 0:
                target = (self.margin * self.rate[slot] * work * device_factor / self.cores
                          + stalled)
                self.over_target += wall > target
        if target > wall:
            time.sleep(target - wall)

    def forget(self) -> None:
        """Drop the CPU times kept so far (the cold first step's)."""
        self._recent.clear()

    def settle(self, slots: int, pp: int | None = None) -> None:
        """Set the rate (warmup_rate): each slot's median time per unit of work at the share
        over this rank's latest `window` ops of it, the largest over the process group's
        ranks (a collective when one is up: every rank calls it); slots nobody timed keep
        the CPU rule. pp: the slots are `stage + pp * kind`, put on one rate per op kind
        (`one_rate_per_work`); None: each slot keeps its own rate."""
        if not self.warmup_rate or self.cores is None:
            return
        rate = agreed_medians([list(self._recent.get(slot, ())) for slot in range(slots)])
        self.rate = one_rate_per_work(rate, pp) if pp is not None else rate
