"""Hand-built unannotated Kineto traces (no op-vocabulary ranges) for the general op model.

A DDP-like job: per step, compute for `fwd_ms` (x slow[rank]), one all-reduce
over every rank (each member ends `ar_ms` after the last one arrives), compute
for `tail_ms`, then the step ends. GPU traces carry NCCL kernels with the args
torch writes (Collective name, Process Group Name/Ranks, Seq) and compute
kernels; CPU traces carry record_param_comms ops (gloo) instead.

With slow = {3: 2.0}, fwd 10, ar 2, tail 5 (ms), 4 ranks: the traced step is
20 + 2 + 5 = 27 ms; the ideal one 12.5 + 2 + 5 = 19.5 ms, so S = 27 / 19.5.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

MS = 1000.0


def _x(name, ts, dur, cat="cpu_op", tid=1, pid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def ddp_doc(rank: int, world: int = 4, steps=(5, 6), slow: dict | None = None,
            fwd_ms: float = 10.0, ar_ms: float = 2.0, tail_ms: float = 5.0, gpu: bool = True,
            seq: bool = True, comm: bool = True, info: bool = True,
            old_torch: bool = False, first_tail_ms: float = 0.0) -> dict:
    """One rank's document (see the module doc). old_torch: no comm args anywhere; the
    collective is named only by an `nccl:all_reduce` range around the kernel's launch.
    first_tail_ms: extra tail compute in the first step on every rank (a settling step)."""
    slow = slow or {}
    ev: list[dict] = []
    corr = 1000 * (rank + 1)
    step_ms = max(fwd_ms * slow.get(r, 1.0) for r in range(world)) + ar_ms + tail_ms
    for i, k in enumerate(steps):
        extra = first_tail_ms if i == 0 else 0.0
        t0 = 1e6 + (i * (step_ms + 1.0) + (first_tail_ms if i else 0.0)) * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, (step_ms + extra) * MS, cat="user_annotation"))
        mine = fwd_ms * slow.get(rank, 1.0) * MS
        last = max(fwd_ms * slow.get(r, 1.0) for r in range(world)) * MS
        ev.append(_x("aten::mm", t0, mine))
        if gpu:
            ev.append(_x("sgemm_kernel", t0 + 10, mine - 20, cat="kernel", tid=7, pid=0,
                         stream=7, correlation=corr))
        if comm:
            args = {"Collective name": "allreduce", "Process Group Name": "0",
                    "Process Group Ranks": list(range(world)), "In msg nelems": 1024,
                    "Out msg nelems": 1024, "Group size": world}
            if seq:
                args["Seq"] = i
            blocking = last - mine + ar_ms * MS  # gloo: the CPU op waits for the others
            if old_torch:
                args = {}
                ev.append(_x("nccl:all_reduce", t0 + mine - 5, 60.0, cat="user_annotation"))
            ev.append(_x("record_param_comms", t0 + mine, 50.0 if gpu else blocking, **args))
            if gpu:
                corr += 1
                ev.append(_x("cudaLaunchKernel", t0 + mine + 10, 5, cat="cuda_runtime",
                             correlation=corr))
                ev.append(_x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + mine,
                             last - mine + ar_ms * MS, cat="kernel", tid=20, pid=0, stream=20,
                             correlation=corr, **args))
        t1 = t0 + last + ar_ms * MS
        ev.append(_x("aten::add", t1, (tail_ms + extra) * MS - 10))
        if gpu:
            corr += 1
            ev.append(_x("add_kernel", t1 + 5, (tail_ms + extra) * MS - 20, cat="kernel", tid=7,
                         pid=0,
                         stream=7, correlation=corr))
        corr += 1
    doc = {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
           "baseTimeNanoseconds": 1_700_000_000_000_000_000}
    if info:
        doc["distributedInfo"] = {"backend": "nccl" if gpu else "gloo", "rank": rank,
                                  "world_size": world}
    return doc


def write_docs(folder: Path, docs: dict[int, dict], gz: bool = False) -> Path:
    """rank<N>.json[.gz] files of the documents in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for r, d in docs.items():
        data = json.dumps(d).encode()
        if gz:
            (folder / f"rank{r}.json.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"rank{r}.json").write_bytes(data)
    return folder


def ddp_job(folder: Path, world: int = 4, **kw) -> Path:
    """A whole job's files (kw: ddp_doc's)."""
    return write_docs(folder, {r: ddp_doc(r, world, **kw) for r in range(world)})
