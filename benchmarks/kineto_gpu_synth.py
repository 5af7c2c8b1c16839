"""Known-answer GPU Kineto traces: the kinds of host-device behaviour real jobs have.

    python benchmarks/kineto_gpu_synth.py --kind launch-bound --out /tmp/gpu/launch-bound
    python benchmarks/kineto_gpu_synth.py --list

Each rank's file is an unannotated torch.profiler trace of a DDP-like GPU job
(`ProfilerStep#N` CPU ranges, `cudaLaunchKernel` calls with correlation ids,
compute kernels on stream 7, an NCCL all-reduce kernel on stream 20 with the
collective args torch writes, a `cudaStreamWaitEvent` before the tail, a
`cudaDeviceSynchronize` at the step's end). One plan times every rank:

* forward: the host launches N_FWD kernels, one per `host_us` of Python/CPU
  work; a kernel starts at the later of its launch returning and its stream's
  previous kernel, and lasts `kernel_us`;
* the all-reduce: launched after the forward; its kernel starts when the
  rank's compute stream is done and ends when the last rank's has started plus
  AR_US (members leave together);
* the tail: N_TAIL kernels that wait for the all-reduce (event wait), then a
  device synchronize; the step ends when it returns.

`KINDS` names the cases, each with the analytic answer the what-if must give:
its S (`host_device_ideal`: the job re-planned with every host and device at
the ranks' mean speed; `analytic` gives the chain model's answer from the
traced segments, the same wherever the job is not launch-bound), whether the
gate withholds the verdict, and the part (host or device) and ranks the
slowdown belongs to.
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

N_FWD, N_TAIL = 20, 5
"""Kernels per step before the all-reduce and after it."""
LAUNCH_US = 5.0
"""Duration of a cudaLaunchKernel call."""
AR_US = 400.0
"""The all-reduce's transfer time once every member has arrived."""
SYNC_US = 3.0
"""A device synchronize's own cost after the device is idle."""
STEP_GAP_US = 200.0
"""Host time between a step's end and the next step's start."""
COMPUTE_STREAM, NCCL_STREAM = 7, 20


@dataclass(kw_only=True)
class Case:
    """One known-answer job."""

    host_us: float
    """Host time before each kernel launch (Python and CPU ops)."""
    kernel_us: float
    """Duration of each compute kernel."""
    slow_host: dict[int, float] = field(default_factory=dict)
    """Rank -> factor on its host time."""
    slow_device: dict[int, float] = field(default_factory=dict)
    """Rank -> factor on its kernels' durations."""
    entry_skew_us: dict[int, float] = field(default_factory=dict)
    """Rank -> how much earlier than the last rank it enters every step."""
    gated: bool = False
    """The answer: the gate withholds the verdict (the model's premise fails)."""
    reason: str = ""
    """The reason the gate must name ('' when not gated)."""
    part: str = ""
    """The segment part the slowdown belongs to ('host' or 'device'; '' for a clean job)."""
    victims: tuple[int, ...] = ()
    """The ranks the what-if must rank first."""
    ar_factor: float = 1.0
    """Factor on every member's all-reduce transfer from step `ar_from` on (a link every
    member waits on)."""
    ar_from: int = 0
    """The first step (1-based) of `ar_factor`."""
    steps: int = 3
    """Traced steps."""
    regime_step: int | None = None
    """The answer: the step a job-wide regime change begins at (None: no change)."""
    drop_launches: bool = False
    """Write no runtime calls (a trace whose CUDA runtime events were not collected): the
    host cannot be modelled, and a launch-bound job must be gated."""


KINDS = {
    "device-bound": Case(host_us=10.0, kernel_us=300.0),
    "device-slow": Case(host_us=10.0, kernel_us=300.0, slow_device={2: 1.5}, part="device",
                        victims=(2,)),
    "host-slow-hidden": Case(host_us=10.0, kernel_us=300.0, slow_host={1: 1.5}),
    "launch-bound": Case(host_us=250.0, kernel_us=20.0),
    "launch-bound-host-slow": Case(host_us=250.0, kernel_us=20.0, slow_host={1: 1.3},
                                   part="host", victims=(1,)),
    "launch-bound-no-launches": Case(host_us=250.0, kernel_us=20.0, slow_host={1: 1.3},
                                     drop_launches=True, gated=True, reason="launch-bound",
                                     part="host", victims=(1,)),
    "entry-skew": Case(host_us=10.0, kernel_us=300.0, entry_skew_us={0: 4000.0, 3: 2500.0}),
    "shared-link": Case(host_us=10.0, kernel_us=300.0, ar_factor=20.0, ar_from=4, steps=6,
                        regime_step=4),
}
"""The known-answer kinds (see the module doc)."""


def _x(name, ts, dur, cat, tid, pid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
            "dur": round(dur, 3), "args": args}


def _kernels(ev: list, n: int, name: str, h: float, free: float, host_us: float,
             kernel_us: float, corr: int) -> tuple[float, float, int]:
    """n compute kernels, each launched after host_us of host work and started at the later
    of its launch returning and the stream's previous kernel; (host time, stream free time,
    last correlation id) after them."""
    for _ in range(n):
        h += host_us
        corr += 1
        ev.append(_x("cudaLaunchKernel", h, LAUNCH_US, "cuda_runtime", 1, correlation=corr))
        h += LAUNCH_US
        k0 = max(h, free)
        free = k0 + kernel_us
        ev.append(_x(name, k0, kernel_us, "kernel", COMPUTE_STREAM, pid=0,
                     stream=COMPUTE_STREAM, correlation=corr))
    return h, free, corr


def plan(case: Case, world: int, steps: int) -> dict:
    """Per rank and step, the times every event of the job (µs), and the analytic step times
    of the method: {"events": {rank: [...]}, "T": ..., "T_ideal": ...}."""
    events: dict[int, list[dict]] = {r: [] for r in range(world)}
    corr = {r: 1000 * (r + 1) for r in range(world)}
    t_step = 1_000_000.0
    seg_fwd, seg_tail = {}, {}
    for i in range(steps):
        enter = {r: t_step - case.entry_skew_us.get(r, 0.0) for r in range(world)}
        nccl_start, host_after = {}, {}
        for r in range(world):
            hs, ds = case.slow_host.get(r, 1.0), case.slow_device.get(r, 1.0)
            h, free = enter[r], enter[r]
            ev = events[r]
            h, free, corr[r] = _kernels(ev, N_FWD, "void gemm_kernel<float>()", h, free,
                                        case.host_us * hs, case.kernel_us * ds, corr[r])
            h += case.host_us * hs
            corr[r] += 1
            ev.append(_x("cudaLaunchKernel", h, LAUNCH_US, "cuda_runtime", 1,
                         correlation=corr[r]))
            h += LAUNCH_US
            nccl_start[r] = max(h, free)
            host_after[r] = h
        nccl_end = max(nccl_start.values()) + _ar(case, i)
        step_end = {}
        for r in range(world):
            hs, ds = case.slow_host.get(r, 1.0), case.slow_device.get(r, 1.0)
            ev = events[r]
            args = {"Collective name": "allreduce", "Process Group Name": "0",
                    "Process Group Ranks": list(range(world)), "In msg nelems": 4096,
                    "Out msg nelems": 4096, "Group size": world, "Seq": i}
            ev.append(_x("record_param_comms", host_after[r] - LAUNCH_US - 2.0, 1.0,
                         "cpu_op", 1, **args))
            ev.append(_x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", nccl_start[r],
                         nccl_end - nccl_start[r], "kernel", NCCL_STREAM, pid=0,
                         stream=NCCL_STREAM, correlation=corr[r], **args))
            h = host_after[r]
            ev.append(_x("cudaStreamWaitEvent", h, 2.0, "cuda_runtime", 1,
                         correlation=corr[r] + 1))
            corr[r] += 1
            h += 2.0
            free = nccl_end
            h, free, corr[r] = _kernels(ev, N_TAIL, "void add_kernel<float>()", h, free,
                                        case.host_us * hs, case.kernel_us * ds, corr[r])
            corr[r] += 1
            done = max(h, free) + SYNC_US
            ev.append(_x("cudaDeviceSynchronize", h, done - h, "cuda_runtime", 1,
                         correlation=corr[r]))
            step_end[r] = done
            ev.append(_x(f"ProfilerStep#{i + 1}", enter[r], done - enter[r], "user_annotation",
                         1))
            seg_fwd.setdefault(r, []).append(nccl_start[r] - enter[r])
            seg_tail.setdefault(r, []).append(done - nccl_end)
        # the next step: the last rank enters STEP_GAP_US after the last one ended
        t_step = max(step_end.values()) + STEP_GAP_US + max(case.entry_skew_us.values(),
                                                            default=0.0)
    return {"events": events, "seg_fwd": seg_fwd, "seg_tail": seg_tail}


def _ar(case: Case, i: int) -> float:
    """The all-reduce's transfer time in step index i (0-based), µs."""
    return AR_US * (case.ar_factor if case.ar_factor != 1.0 and i + 1 >= case.ar_from else 1)


def analytic(case: Case, world: int = 4, steps: int | None = None) -> dict:
    """The method's answer on the plan (design.md section 4): every rank's chain starts
    together; the all-reduce starts at the latest forward segment's end; T and T_ideal from
    the traced segments and from their mean over the ranks. {"S", "T_us", "T_ideal_us"}."""
    steps = steps or case.steps
    p = plan(case, world, steps)
    ars = [_ar(case, i) for i in range(steps)]
    ar_ideal = sorted(ars)[(steps - 1) // 2] if steps % 2 else \
        (sorted(ars)[steps // 2 - 1] + sorted(ars)[steps // 2]) / 2  # the median transfer
    ts, ideals = [], []
    for i in range(steps):
        fwd = [p["seg_fwd"][r][i] for r in range(world)]
        tail = [p["seg_tail"][r][i] for r in range(world)]
        ts.append(max(fwd) + ars[i] + max(tail))
        ideals.append(sum(fwd) / world + ar_ideal + sum(tail) / world)
    t, ideal = sum(ts) / steps, sum(ideals) / steps
    return {"S": t / ideal, "T_us": t, "T_ideal_us": ideal}


def host_device_ideal(case: Case, world: int = 4, steps: int | None = None) -> dict:
    """The answer of a host–device model: the job re-planned with every rank's host and
    device factors replaced by their mean over the ranks (each host segment and each kernel
    at the mean of the same work), hosts and devices still linked by launches and waits.
    {"S", "T_us", "T_ideal_us"}; where it differs from `analytic`, the chain model of the
    segments between collectives does not represent the job (a launch-bound one)."""
    steps = steps or case.steps
    if case.ar_factor != 1.0:  # transfers at their median over the steps, as the method's
        return analytic(case, world, steps)

    def step_time(c: Case) -> float:
        p = plan(c, world, steps)
        ends = [max(p["seg_fwd"][r][i] for r in range(world)) + AR_US
                + max(p["seg_tail"][r][i] for r in range(world)) for i in range(steps)]
        return sum(ends) / steps

    mean_host = sum(case.slow_host.get(r, 1.0) for r in range(world)) / world
    mean_dev = sum(case.slow_device.get(r, 1.0) for r in range(world)) / world
    ideal = Case(host_us=case.host_us * mean_host, kernel_us=case.kernel_us * mean_dev)
    t, t_ideal = step_time(case), step_time(ideal)
    return {"S": t / t_ideal, "T_us": t, "T_ideal_us": t_ideal}


def write_job(kind: str, out: Path, world: int = 4, steps: int | None = None) -> Path:
    """rank<N>.json.gz of the kind's job in `out`; returns `out`."""
    case = KINDS[kind]
    p = plan(case, world, steps or case.steps)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        events = [e for e in p["events"][r]
                  if not (case.drop_launches and e["cat"] == "cuda_runtime")]
        doc = {"schemaVersion": 1, "traceEvents": sorted(events, key=lambda e: e["ts"]),
               "host_name": "node0", "baseTimeNanoseconds": 1_700_000_000_000_000_000,
               "distributedInfo": {"backend": "nccl", "rank": r, "world_size": world}}
        (out / f"rank{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=sorted(KINDS))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, help="traced steps (default: the kind's)")
    ap.add_argument("--list", action="store_true", help="print every kind and its answer")
    a = ap.parse_args()
    if a.list or not a.kind:
        for name, case in KINDS.items():
            ans = analytic(case, a.ranks, a.steps)
            hd = host_device_ideal(case, a.ranks, a.steps)
            print(f"{name:24s} S {ans['S']:.4f} (host-device {hd['S']:.4f})  gated "
                  f"{case.gated!s:5s} {case.reason:14s} part {case.part or '-':6s} "
                  f"victims {list(case.victims)}")
        return
    if a.out is None:
        ap.error("--out is required with --kind")
    print(write_job(a.kind, a.out, a.ranks, a.steps))


if __name__ == "__main__":
    main()
