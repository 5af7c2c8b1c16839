"""Asynchronous collectives in CPU traces: the rank computes on while its op runs.

A DDP-like job on gloo, as torch 2.13 traces it: backward launches bucket 1's
all-reduce (`c10d::allreduce_` on the main thread, `gloo:all_reduce` on a gloo
thread) and goes on computing bucket 2's gradients (`autograd::engine::
evaluate_function` ranges) while the all-reduce waits for the slow rank; bucket
2's all-reduce is launched at the end of backward and waited for; then the
optimizer. One chain per rank in op order would measure bucket 2's compute from
bucket 1's end, so on the peers it is the time left after waiting (negative
here), and the ideal drops compute that ran.

Exact: ranks 0-3, rank 3 computes FACTOR x as long; backward parts B1, B2, all-
reduce transfer AR, optimizer TAIL (ms). T = F B1 + F B2 + AR + TAIL; the mean
ideal's parts are the mean over the 4 ranks, the median's a clean rank's.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from stragglerlab.analysis.whatif_general import whatif_general
from stragglerlab.importers.kineto_general import build_general, load_ranks
from stragglerlab.trace.op_model import previous_points
from tests.unit.general_fixtures import MS, _x, write_docs

WORLD, SLOW, FACTOR = 4, 3, 2.0
B1, B2, AR, TAIL = 10.0, 10.0, 2.0, 5.0
MEAN_F = (WORLD - 1 + FACTOR) / WORLD
T = FACTOR * (B1 + B2) + AR + TAIL
S_MEAN = T / (MEAN_F * (B1 + B2) + AR + TAIL)
S_MEDIAN = T / (B1 + B2 + AR + TAIL)


def _ddp_gloo(rank: int, steps=(5, 6, 7), activity: bool = True) -> dict:
    f = FACTOR if rank == SLOW else 1.0
    ev = []
    step_ms = FACTOR * (B1 + B2) + AR + TAIL
    for i, k in enumerate(steps):
        t0 = 1e6 + i * (step_ms + 1.0) * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, step_ms * MS, cat="user_annotation"))
        l1, l1_last = t0 + f * B1 * MS, t0 + FACTOR * B1 * MS
        ev.append(_x("c10d::allreduce_", l1, 20.0))
        ev.append(_x("gloo:all_reduce", l1 + 20.0, l1_last + AR * MS - l1 - 20.0, tid=9))
        if activity:  # bucket 2's backward on the main thread, in two ops
            half = f * B2 * MS / 2
            ev.append(_x("autograd::engine::evaluate_function: AddmmBackward0",
                         l1 + 30.0, half - 30.0))
            ev.append(_x("autograd::engine::evaluate_function: GeluBackward0",
                         l1 + half, half - 30.0))
        l2, l2_last = l1 + f * B2 * MS, l1_last + FACTOR * B2 * MS
        ev.append(_x("c10d::allreduce_", l2, 20.0))
        ev.append(_x("gloo:all_reduce", l2 + 20.0, l2_last + AR * MS - l2 - 20.0, tid=10))
        ev.append(_x("Optimizer.step#Adam.step", l2_last + AR * MS, TAIL * MS - 10))
    return {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": WORLD}}


def _import(tmp_path, **kw):
    folder = write_docs(tmp_path, {r: _ddp_gloo(r, **kw) for r in range(WORLD)})
    return build_general(load_ranks(sorted(folder.glob("*.json"))))


def test_a_bucket_all_reduce_the_rank_computes_through_is_async(tmp_path):
    res = _import(tmp_path)
    comm = res.ops[res.ops["kind"] == "all_reduce"]
    first = comm[comm["k"] == 0]
    last = comm[comm["k"] == 1]
    # Bucket 1: the peers compute bucket 2 while it waits for rank 3 (async); rank 3's own
    # bucket 1 is short and also overlapped by its backward. Bucket 2: every rank waits.
    assert first["async"].all() and not last["async"].any()
    assert res.report["async_ops"] == len(first)
    # Bucket 2's compute segment is measured from bucket 1's launch: the whole backward part.
    gap2 = last.set_index(["rank", "step"])["gap_s"]
    peers = gap2[gap2.index.get_level_values("rank") != SLOW]
    assert peers.to_numpy() == pytest.approx(B2 / 1e3, abs=1e-6)


@pytest.mark.parametrize(("ideal", "expected"), [("mean", S_MEAN), ("median", S_MEDIAN)])
def test_the_what_if_keeps_the_compute_that_ran_beside_the_async_op(tmp_path, ideal,
                                                                    expected):
    wi = whatif_general(_import(tmp_path).ops, compute_ideal=ideal)
    assert abs(wi.discrepancy) < 1e-3  # the simulation replays the trace
    assert wi.S == pytest.approx(expected, rel=2e-3)
    assert wi.top_workers == [SLOW]
    assert wi.compute_ideal == ideal


def test_without_the_threads_activity_an_op_is_waited_for_as_before(tmp_path):
    res = _import(tmp_path, activity=False)
    assert not res.ops["async"].any() and res.report["async_ops"] == 0
    # One chain in op order: the peers' bucket-2 segment is what is left after bucket 1.
    wi = whatif_general(res.ops)
    assert wi.S > S_MEAN * 1.1


def test_previous_points_follow_the_async_rule():
    ops = pd.DataFrame({
        "rank": [0, 0, 0, 0], "step": [1, 1, 1, 1], "k": [0, 1, 2, 3],
        "kind": ["all_reduce", "all_reduce", "all_reduce", "step-end"],
        "start_s": [1.0, 2.0, 6.0, 7.0], "end_s": [5.0, 3.0, 6.5, 7.0],
        "async": [True, False, True, False]})
    prev = previous_points(ops)
    assert pd.isna(prev[0])
    # after an async row: its start; after a waited one: its end; the step end also waits
    # for every async op of the chain (row 0 ends at 5, row 2 at 6.5)
    assert prev[1:].tolist() == [1.0, 3.0, 6.5]


def _launcher(ev: list):
    """kernel(name, cpu_ts, ts, dur, stream, **args): append a CUDA launch at cpu_ts and the
    kernel it launched (correlated) to ev, as Kineto writes them."""
    corr = itertools.count(100)

    def kernel(name, cpu, ts, dur, stream, **args):
        c = next(corr)
        ev.append(_x("cudaLaunchKernel", cpu, 3.0, cat="cuda_runtime", correlation=c))
        ev.append(_x(name, ts, dur, cat="kernel", pid=0, tid=stream, stream=stream,
                     correlation=c, **args))
    return kernel


def _ddp_gpu(rank: int, steps=(5, 6, 7)) -> dict:
    """The same job on GPUs: bucket grads (compute stream 7), their all-reduce kernels (NCCL
    stream 20), the optimizer kernel waiting for the last one; the CPU launches all ahead
    of the GPU. A fast rank's bucket-2 all-reduce queues behind its bucket-1 one, which
    waits for rank 3: the kernel starts at the other's end, its gradients long ready."""
    f = {r: FACTOR if r == SLOW else 1.0 for r in range(WORLD)}
    ev = []
    kernel = _launcher(ev)
    step_ms = FACTOR * (B1 + B2) + AR + TAIL + 0.05

    for i, k in enumerate(steps):
        t0 = 1e6 + i * (step_ms + 1.0) * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, step_ms * MS, cat="user_annotation"))
        comm = {"Collective name": "allreduce", "Process Group Name": "0",
                "Process Group Ranks": list(range(WORLD)), "In msg nelems": 1024,
                "Out msg nelems": 1024, "Group size": WORLD}
        a0 = t0 + 20.0
        a_end = {r: a0 + f[r] * B1 * MS for r in f}
        b_end = {r: a_end[r] + f[r] * B2 * MS for r in f}
        ar1_end = max(a_end.values()) + AR * MS
        ar2_start = {r: max(b_end[r], ar1_end) for r in f}
        ar2_end = max(ar2_start.values()) + AR * MS
        kernel("sgemm_bucket1_grads", t0 + 10, a0, f[rank] * B1 * MS, 7)
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 20, a_end[rank],
               ar1_end - a_end[rank], 20, Seq=2 * i, **comm)
        kernel("sgemm_bucket2_grads", t0 + 30, a_end[rank], f[rank] * B2 * MS, 7)
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 40, ar2_start[rank],
               ar2_end - ar2_start[rank], 20, Seq=2 * i + 1, **comm)
        kernel("adam_kernel", t0 + 50, ar2_end + 2.0, TAIL * MS - 2.0, 7)
    return {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": WORLD}}


@pytest.mark.parametrize(("ideal", "expected"), [("mean", S_MEAN), ("median", S_MEDIAN)])
def test_gpu_bucket_kernels_overlap_the_compute_stream_and_queue(tmp_path, ideal, expected):
    folder = write_docs(tmp_path, {r: _ddp_gpu(r) for r in range(WORLD)})
    res = build_general(load_ranks(sorted(folder.glob("*.json"))))
    assert res.report["timing"] == "gpu"
    comm = res.ops[res.ops["kind"] == "all_reduce"]
    first, last = comm[comm["k"] == 0], comm[comm["k"] == 1]
    # bucket 1: the compute stream runs bucket 2 beside it; bucket 2: the optimizer waits
    assert first["async"].all() and not last["async"].any()
    # a fast rank's bucket-2 kernel queued behind bucket 1: its gap ends when its
    # gradients were ready, and is bucket 2's compute
    fast = last[last["rank"] != SLOW]
    assert fast["serial"].all() and not last.loc[last["rank"] == SLOW, "serial"].any()
    assert fast["gap_s"].to_numpy() == pytest.approx(B2 / 1e3, abs=2e-5)
    wi = whatif_general(res.ops, compute_ideal=ideal)
    assert abs(wi.discrepancy) < 1e-3
    # T and T_ideal of the module doc, each with the step range's 0.05 ms beside the kernels
    lag = 0.05  # ms: the step range ends 0.05 ms after the job (step_ms)
    assert wi.S == pytest.approx((T + lag) / (T / expected + lag), rel=2e-3)
    assert wi.top_workers == [SLOW]


def test_a_gpu_trace_without_compute_kernels_keeps_every_op_waited_for(tmp_path):
    """No compute kernel traced (a trimmed or sampled file): no evidence that the rank
    computed through an op, so nothing is async and nothing queued: the one chain as before."""
    docs = {}
    for r in range(WORLD):
        d = _ddp_gpu(r)
        d["traceEvents"] = [e for e in d["traceEvents"]
                            if e["cat"] != "kernel" or e["name"].startswith("nccl")]
        docs[r] = d
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json"))))
    assert res.report["timing"] == "gpu"
    assert not res.ops["async"].any() and not res.ops["serial"].any()
    assert (res.ops["ready_s"] == res.ops["start_s"]).all()


def test_a_queued_op_the_rank_waited_for_replays_from_its_queue():
    """A serial row that is not async (its rank waited for it) still starts no earlier than
    the rank's previous collective ends: the replay gives the traced step."""
    rows = []
    for rank in (0, 1):
        # op A 0..4 s (rank 1 arrives at 1 s), op B ready at 2 s, queued until A's end (4 s),
        # ends at 5 s; the step ends at 6 s
        a_start = 0.0 if rank == 0 else 1.0
        rows += [
            dict(rank=rank, step=1, k=0, kind="all_reduce", group=0, start_s=a_start,
                 end_s=4.0, gap_s=a_start, transfer_s=3.0, ready_s=a_start, serial=False),
            dict(rank=rank, step=1, k=1, kind="all_reduce", group=1, start_s=4.0, end_s=5.0,
                 gap_s=2.0 - 4.0, transfer_s=1.0, ready_s=2.0, serial=True),
            dict(rank=rank, step=1, k=2, kind="step-end", group=-1, start_s=6.0, end_s=6.0,
                 gap_s=1.0, transfer_s=0.0, ready_s=6.0, serial=False)]
    ops = pd.DataFrame(rows).assign(pg="0", busy_s=float("nan"), in_nelems=8, out_nelems=8,
                                    peer=-1, role=0, dp_rank=-1, stage=-1, **{"async": False})
    prev = previous_points(ops)
    assert prev[1] == 4.0 and prev[2] == 5.0  # waited-for rows: their ends
    wi = whatif_general(ops)
    assert wi.T == pytest.approx(6.0) and wi.actual_step_s == pytest.approx(6.0)


def _fsdp_gpu(rank: int, steps=(5, 6)) -> dict:
    """FSDP-like on GPUs: each block's all-gather kernel, then the block's compute kernel,
    which waits for the gather (it starts as the gather ends); rank 3 computes 2x."""
    f = FACTOR if rank == SLOW else 1.0
    ev = []
    kernel = _launcher(ev)
    blocks, block_ms = 3, 4.0
    step_ms = blocks * (FACTOR * block_ms + AR) + TAIL

    for i, k in enumerate(steps):
        t0 = 1e6 + i * (step_ms + 1.0) * MS
        ev.append(_x(f"ProfilerStep#{k}", t0, step_ms * MS, cat="user_annotation"))
        ready = {r: t0 + 10.0 for r in range(WORLD)}  # every rank's compute position
        for b in range(blocks):
            ag_end = max(ready.values()) + AR * MS
            comm = {"Collective name": "_allgather_base", "Process Group Name": "0",
                    "Process Group Ranks": list(range(WORLD)), "In msg nelems": 256,
                    "Out msg nelems": 1024, "Group size": WORLD, "Seq": 10 * i + b}
            kernel("ncclDevKernel_AllGather_RING_LL", t0 + 1 + b, ready[rank],
                   ag_end - ready[rank], 20, **comm)
            fr = {r: FACTOR if r == SLOW else 1.0 for r in range(WORLD)}
            kernel("sgemm_block", t0 + 2 + b, ag_end + 3.0, f * block_ms * MS, 7)
            ready = {r: ag_end + 3.0 + fr[r] * block_ms * MS for r in range(WORLD)}
    return {"schemaVersion": 1, "traceEvents": ev, "host_name": "node0",
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": WORLD}}


def test_gpu_gathers_the_compute_waits_for_are_not_async(tmp_path):
    res = build_general(load_ranks(sorted(
        write_docs(tmp_path, {r: _fsdp_gpu(r) for r in range(WORLD)}).glob("*.json"))))
    comm = res.ops[res.ops["kind"] == "all_gather"]
    assert len(comm) == WORLD * 2 * 3
    assert not comm["async"].any() and not comm["serial"].any()
    wi = whatif_general(res.ops)
    assert abs(wi.discrepancy) < 1e-3 and wi.top_workers == [SLOW]


def test_a_gpu_collective_whose_compute_launches_are_lost_is_not_read_as_ready_early(tmp_path):
    """The compute kernels' correlations are lost (args not an object): when the bucket-2
    all-reduce's gradients were ready is unknown. Taking its CPU launch instead (the CPU runs
    far ahead of the GPU) read the fast ranks' bucket-2 segment as nearly nothing and S as
    2.18 where the method gives 1.47; unknown leaves the kernel measured from its start."""
    docs = {}
    for r in range(WORLD):
        d = _ddp_gpu(r)
        for e in d["traceEvents"]:
            if e["name"].startswith("sgemm"):
                e["args"] = [1, 2]
        docs[r] = d
    res = build_general(load_ranks(sorted(write_docs(tmp_path, docs).glob("*.json"))))
    assert not res.ops["serial"].any() and (res.ops["ready_s"] == res.ops["start_s"]).all()
    wi = whatif_general(res.ops)
    assert abs(wi.discrepancy) < 1e-3 and wi.S < S_MEAN * 1.05
