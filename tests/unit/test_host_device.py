"""The host-device model of one GPU rank (analysis/host_device.py): known answers on small
traces built in memory, the real single-rank traces reproduced within 5 %, the event
links that hold them, and the one-rank import."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from stragglerlab.analysis.host_device import (
    DEVICE_BOUND,
    LAUNCH_BOUND,
    MAX_DISCREPANCY,
    SYNC_RETURN_US,
    simulate_steps,
)
from stragglerlab.cli import main
from stragglerlab.importers.host_device_events import read_host_device
from stragglerlab.trace.host_device_trace import (
    CALL_KINDS,
    NO_STREAM,
    OTHER,
    HostDeviceTrace,
)
from tests.unit.general_fixtures import ddp_doc, write_docs

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO.parent / "shared" / "external-traces" / "hta-single-rank"
needs_single = pytest.mark.skipif(not SINGLE.is_dir(),
                                  reason="the external single-rank traces are not on this host")
STEPPED = ("training-5steps-rank0.json.gz", "training-nccl-5steps-rank0.json.gz",
           "training-nccl-6steps-rank3.json.gz")


@cache
def _real(name: str) -> HostDeviceTrace:
    """A real trace, read once per test session (tests copy before changing it)."""
    return read_host_device(SINGLE / name)


def _trace(calls: list[dict], ops: list[dict], steps=((1, 0.0, None),),
           step_tid: int = 1) -> HostDeviceTrace:
    """A HostDeviceTrace from call dicts (name, ts, dur, corr; tid, stream, event_stream,
    record_corr optional) and op dicts (ts, dur, stream, corr; bps, blocking optional).
    A step's end None: the last call's end plus 10 us."""
    calls = sorted(calls, key=lambda c: c["ts"])
    ops = sorted(ops, key=lambda o: o["ts"])
    last = max(c["ts"] + c["dur"] for c in calls) + 10.0
    table = np.array([(n, a, last if b is None else b) for n, a, b in steps], dtype=float) \
        .reshape(-1, 3)

    def col(rows, key, default, dtype):
        return np.array([r.get(key, default) for r in rows], dtype=dtype)

    return HostDeviceTrace(
        path="synthetic", steps=table, step_tid=step_tid,
        call_ts=col(calls, "ts", 0.0, float), call_dur=col(calls, "dur", 0.0, float),
        call_tid=col(calls, "tid", 1, np.int64), call_corr=col(calls, "corr", -1, np.int64),
        call_kind=np.array([CALL_KINDS.get(c["name"], OTHER) for c in calls], dtype=np.int8),
        call_stream=col(calls, "stream", NO_STREAM, np.int64),
        call_event_stream=col(calls, "event_stream", NO_STREAM, np.int64),
        call_record_corr=col(calls, "record_corr", NO_STREAM, np.int64),
        op_ts=col(ops, "ts", 0.0, float), op_dur=col(ops, "dur", 0.0, float),
        op_stream=col(ops, "stream", 7, np.int64), op_corr=col(ops, "corr", -1, np.int64),
        op_nccl=np.zeros(len(ops), dtype=bool),
        op_blocks_per_sm=col(ops, "bps", 1.0, float),
        op_blocking=col(ops, "blocking", False, bool))


def _launch_bound(n: int = 10) -> HostDeviceTrace:
    """Launch calls of 5 us every 100 us (95 us of Python between them); each 10 us kernel
    starts 1 us after its launch returns; a final device sync finds the GPU done."""
    calls, ops = [], []
    for i in range(n):
        t = 10.0 + 100.0 * i
        calls.append({"name": "cudaLaunchKernel", "ts": t, "dur": 5.0, "corr": i})
        ops.append({"ts": t + 6.0, "dur": 10.0, "corr": i})
    calls.append({"name": "cudaDeviceSynchronize", "ts": 10.0 + 100.0 * n, "dur": 3.0})
    return _trace(calls, ops)


def _device_bound(hold_us: float = 0.0, late_us: float = 0.0) -> HostDeviceTrace:
    """Ten 1 ms kernels launched 6 us apart (the first starting as its launch returns), then
    cudaStreamSynchronize on their stream, which returns SYNC_RETURN_US after the last one
    ends (plus hold_us: a host wait the trace does not explain). late_us: the fifth kernel
    starts that much later than its stream allows (a device delay the trace does not
    explain), and all after it too."""
    calls, ops = [], []
    end = 0.0
    for i in range(10):
        t = 10.0 + 6.0 * i
        calls.append({"name": "cudaLaunchKernel", "ts": t, "dur": 5.0, "corr": i})
        start = max(t + 5.0, end) + (late_us if i == 4 else 0.0)
        ops.append({"ts": start, "dur": 1000.0, "corr": i, "bps": 40.0})
        end = start + 1000.0
    ts = 100.0
    calls.append({"name": "cudaStreamSynchronize", "ts": ts, "stream": 7,
                  "dur": end + SYNC_RETURN_US + hold_us - ts})
    calls.append({"name": "cudaLaunchKernel", "ts": end + SYNC_RETURN_US + hold_us + 50.0,
                  "dur": 5.0, "corr": 99})
    ops.append({"ts": end + SYNC_RETURN_US + hold_us + 56.0, "dur": 10.0, "corr": 99})
    return _trace(calls, ops)


def _two_streams(links: bool = True) -> HostDeviceTrace:
    """Stream 7 runs a 2 ms kernel; an event recorded on 7 after it; stream 9 waits for that
    event, then runs a 100 us kernel launched right away, which starts as the 2 ms one ends;
    the host syncs on stream 9. links=False: the trace names no stream (older Kineto)."""
    named = {"stream": 9, "event_stream": 7, "record_corr": 2} if links else {}
    calls = [
        {"name": "cudaLaunchKernel", "ts": 10.0, "dur": 5.0, "corr": 1},
        {"name": "cudaEventRecord", "ts": 20.0, "dur": 2.0, "corr": 2},
        {"name": "cudaStreamWaitEvent", "ts": 25.0, "dur": 2.0, "corr": 3, **named},
        {"name": "cudaLaunchKernel", "ts": 30.0, "dur": 5.0, "corr": 4},
        {"name": "cudaStreamSynchronize", "ts": 40.0, "dur": 2115.0 + SYNC_RETURN_US - 40.0,
         "corr": 5, **({"stream": 9} if links else {})},
        {"name": "cudaLaunchKernel", "ts": 2200.0, "dur": 5.0, "corr": 6},
    ]
    ops = [{"ts": 15.0, "dur": 2000.0, "stream": 7, "corr": 1},
           {"ts": 2015.0, "dur": 100.0, "stream": 9, "corr": 4},
           {"ts": 2205.0, "dur": 10.0, "stream": 7, "corr": 6}]
    return _trace(calls, ops)


def test_launch_bound_trace_is_host_time_and_classified_so():
    rep = simulate_steps(_launch_bound())
    (s,) = rep.steps
    assert abs(s.discrepancy) < 1e-9 and s.simulated_s == pytest.approx(s.traced_s)
    assert s.launch_wait_share == 1.0 and s.gpu_busy_share < 0.15
    assert s.classification == LAUNCH_BOUND and rep.classification == LAUNCH_BOUND


def test_device_bound_trace_waits_in_the_sync_and_is_classified_so():
    rep = simulate_steps(_device_bound())
    (s,) = rep.steps
    assert abs(s.discrepancy) < 1e-9
    assert s.sync_wait_s > 9e-3 and s.host_syncs == 1
    assert s.launch_wait_share == pytest.approx(2 / 11)  # the first, and the one after the sync
    assert s.gpu_busy_share > 0.9
    assert rep.classification == DEVICE_BOUND


def test_a_host_wait_the_device_does_not_explain_shows_as_discrepancy():
    """The sync returns 2 ms after its stream's work ended: the model returns it at once,
    so the step is 2 ms shorter in the replay than traced."""
    (s,) = simulate_steps(_device_bound(hold_us=2000.0)).steps
    assert (s.traced_s - s.simulated_s) * 1e6 == pytest.approx(2000.0, abs=1.0)
    assert s.discrepancy > 0.15


def test_a_device_delay_no_dependency_explains_shows_as_discrepancy():
    """A kernel starts 3 ms after its stream freed (no event, no launch holds it): the
    replay starts it (and the ones behind it) at once, the sync returns 3 ms earlier."""
    (s,) = simulate_steps(_device_bound(late_us=3000.0)).steps
    assert (s.traced_s - s.simulated_s) * 1e6 == pytest.approx(3000.0, abs=1.0)
    assert s.early_ops >= 6


def test_two_stream_event_wait_holds_the_second_stream():
    rep = simulate_steps(_two_streams())
    assert abs(rep.steps[0].discrepancy) < 1e-9 and rep.steps[0].early_ops == 0
    # without the wait, stream 9's kernel starts as its launch returns (35 us), 1.98 ms
    # early, and the host's sync on stream 9 returns that much earlier (and so does the
    # kernel the host launches after it)
    (free,) = simulate_steps(_two_streams(), stream_waits=False).steps
    assert free.early_ops == 2
    assert (free.traced_s - free.simulated_s) * 1e6 == pytest.approx(2015.0 - 35.0, abs=1e-6)


def test_unnamed_links_are_inferred_and_the_replay_still_reproduces():
    """Older Kineto names no stream on waits and syncs: the sync is linked to its thread's
    last launch stream, the wait fitted to the op of stream 7 that ended as 9 went on."""
    rep = simulate_steps(_two_streams(links=False))
    (s,) = rep.steps
    assert abs(s.discrepancy) < 1e-9 and s.inferred_links == 2 and s.early_ops == 0
    assert any("fitted" in n for n in rep.notes)
    (off,) = simulate_steps(_two_streams(links=False), infer_links=False).steps
    assert off.discrepancy > 0.5  # unlinked: neither the wait nor the sync holds anything


def test_a_kernel_that_fills_the_gpu_holds_other_streams():
    """A 2 ms kernel of 200 blocks/SM on stream 7; a small kernel of stream 9, launched while
    it runs, starts as it ends; the host then syncs on stream 9."""
    calls = [{"name": "cudaLaunchKernel", "ts": 10.0, "dur": 5.0, "corr": 1},
             {"name": "cudaLaunchKernel", "ts": 30.0, "dur": 5.0, "corr": 2},
             {"name": "cudaStreamSynchronize", "ts": 40.0, "stream": 9,
              "dur": 2065.0 + SYNC_RETURN_US - 40.0}]
    ops = [{"ts": 15.0, "dur": 2000.0, "stream": 7, "corr": 1, "bps": 200.0},
           {"ts": 2015.0, "dur": 50.0, "stream": 9, "corr": 2, "bps": 2.0}]
    (s,) = simulate_steps(_trace(calls, ops)).steps
    assert abs(s.discrepancy) < 1e-9
    ops[0]["bps"] = 2.0  # fits beside it: the trace's wait is then unexplained
    (s,) = simulate_steps(_trace(calls, ops)).steps
    assert s.discrepancy > 0.5 and s.early_ops == 1


def test_steps_are_replayed_alone_and_measured_on_the_step_thread():
    """Work launched before a step keeps its traced times; a sync on another thread moves
    that thread only."""
    t = _device_bound(hold_us=2000.0)
    other = replace(t, call_tid=np.full(t.call_tid.size, 2, dtype=np.int64))
    (s,) = simulate_steps(other).steps
    assert s.discrepancy == 0.0  # the step thread (1) made no call: nothing moved it


@needs_single
@pytest.mark.parametrize("name", STEPPED)
def test_real_traces_every_step_reproduced_within_5_percent(name):
    rep = simulate_steps(_real(name))
    assert len(rep.steps) in (5, 6)
    worst = max(abs(s.discrepancy) for s in rep.steps)
    assert worst <= MAX_DISCREPANCY, [(s.step, round(s.discrepancy, 4)) for s in rep.steps]
    assert rep.reproduced


@needs_single
def test_real_traces_classified():
    five = simulate_steps(_real("training-5steps-rank0.json.gz"))
    assert five.classification == DEVICE_BOUND  # the GPU runs ~77 ms behind the host
    # no sync: from step 102 on the host waits in launches the full launch queue holds
    assert all(s.host_syncs == 0 for s in five.steps)
    assert all(s.queue_held > 100 and s.queue_wait_s > 0.03 for s in five.steps[1:])
    six = simulate_steps(_real("training-nccl-6steps-rank3.json.gz"))
    assert six.classification == DEVICE_BOUND


@needs_single
def test_real_nccl_trace_needs_its_stream_waits():
    """training-nccl-6steps: the blocking device-to-host copies wait for work that waited
    for other streams; without the waits the replay misses every step by over 10 %."""
    t = _real("training-nccl-6steps-rank3.json.gz")
    free = simulate_steps(t, stream_waits=False)
    assert min(s.discrepancy for s in free.steps) > 0.10


@needs_single
def test_real_nccl_trace_needs_the_gpu_filling_rule(monkeypatch):
    """The fitted waits do not absorb what the model lacks: without the GPU-filling rule a
    small kernel of stream 20 that waits 3-4 ms behind a 143-block/SM embedding backward
    starts at once, and every step of training-nccl-6steps misses by over 5 %."""
    from stragglerlab.analysis import host_device

    t = _real("training-nccl-6steps-rank3.json.gz")
    monkeypatch.setattr(host_device, "FILLS_GPU_BLOCKS_PER_SM", np.inf)
    assert min(s.discrepancy for s in simulate_steps(t).steps) > MAX_DISCREPANCY


@needs_single
def test_real_event_sync_link_holds_the_host():
    """cuda-event-sync: cudaEventSynchronize waits (33 us) for the spin kernel recorded by
    the cudaEventRecord it names; without that link the sync waits for nothing the model
    knows, and the replayed step is shorter by its wait (21 us)."""
    t = _real("cuda-event-sync-rank0.json.gz")
    linked = simulate_steps(t)
    (s,) = linked.steps
    assert s.step == 100 and abs(s.discrepancy) <= MAX_DISCREPANCY
    cut = replace(t, call_record_corr=np.full_like(t.call_record_corr, NO_STREAM),
                  call_event_stream=np.full_like(t.call_event_stream, NO_STREAM))
    (u,) = simulate_steps(cut, infer_links=False).steps
    assert (s.simulated_s - u.simulated_s) * 1e6 > 15.0


@needs_single
def test_real_stream_wait_link_is_read_and_already_satisfied():
    """cuda-event-sync-multi-stream (no ProfilerStep: the whole window is one step): its one
    cudaStreamWaitEvent names stream 24 waiting for stream 20's event; the event completed
    ~18.8 ms before the wait, so it holds nothing and dropping it changes nothing (the
    two-stream test above covers a wait that binds)."""
    t = _real("cuda-event-sync-multi-stream-rank0.json.gz")
    wait = np.flatnonzero(t.call_kind == CALL_KINDS["cudaStreamWaitEvent"])
    assert t.call_stream[wait].tolist() == [24] and t.call_event_stream[wait].tolist() == [20]
    rep = simulate_steps(t)
    assert rep.whole_window and len(rep.steps) == 1
    assert abs(rep.steps[0].discrepancy) <= MAX_DISCREPANCY
    (free,) = simulate_steps(t, stream_waits=False).steps
    assert free.simulated_s == rep.steps[0].simulated_s


def _doc(events: list[dict]) -> dict:
    return {"schemaVersion": 1, "traceEvents": events}


def test_reader_keeps_calls_ops_links_and_steps(tmp_path):
    ev = [
        {"ph": "X", "cat": "User Annotations", "name": "ProfilerStep#3", "pid": 1, "tid": 5,
         "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 5, "ts": 1,
         "dur": 50},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 5,
         "ts": 10, "dur": 5, "args": {"correlation": 11}},
        {"ph": "X", "cat": "Kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7,
         "ts": 16, "dur": 100, "args": {"correlation": 11, "stream": 7,
                                        "blocks per SM": 0.5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 5,
         "ts": 20, "dur": 110, "args": {"correlation": 12}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
         "pid": 0, "tid": 7, "ts": 117, "dur": 2, "args": {"correlation": 12, "stream": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 5,
         "ts": 200, "dur": 2, "args": {"correlation": 13}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 9,
         "ts": 201, "dur": 1, "args": {"correlation": 13, "stream": 9, "wait_on_stream": 7,
                                       "wait_on_cuda_event_record_corr_id": 10}},
    ]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_doc(ev)).encode()))
    t = read_host_device(path)
    assert t.steps.tolist() == [[3.0, 0.0, 1000.0]] and t.step_tid == 5
    assert t.call_corr.tolist() == [11, 12, 13]
    assert t.call_kind.tolist() == [OTHER, OTHER, CALL_KINDS["cudaStreamWaitEvent"]]
    assert t.call_stream.tolist() == [NO_STREAM, NO_STREAM, 9]
    assert t.call_event_stream.tolist()[2] == 7 and t.call_record_corr.tolist()[2] == 10
    assert t.op_nccl.tolist() == [True, False] and t.op_blocking.tolist() == [False, True]
    assert t.op_blocks_per_sm[0] == 0.5 and np.isnan(t.op_blocks_per_sm[1])


def test_reader_refuses_a_cpu_only_trace(tmp_path):
    from stragglerlab.util.errors import InputError

    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_doc([{"ph": "X", "cat": "cpu_op", "name": "aten::mm",
                                      "pid": 1, "tid": 1, "ts": 0, "dur": 5}])))
    with pytest.raises(InputError, match="not a GPU trace"):
        read_host_device(path)


@needs_single
def test_one_rank_import_replays_its_steps_and_says_why_it_stops(tmp_path, capsys):
    out = tmp_path / "out"
    trace = SINGLE / "training-nccl-6steps-rank3.json.gz"
    assert main(["import", "kineto", "--traces", str(trace), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "step 1009: traced 75.473 ms, model" in printed and "discrepancy" in printed
    assert "rank: device-bound" in printed
    assert "the what-if compares ranks; one rank's trace checks the host-device model only; " \
           "pass every rank's trace for the what-if" in printed
    doc = json.loads((out / "import.json").read_text())
    assert doc["model"] == "host-device" and doc["host_device"]["reproduced"]
    assert [s["step"] for s in doc["host_device"]["steps"]] == list(range(1009, 1015))
    assert doc["host_device"]["classification"] == "device-bound"
    assert sorted(p.name for p in out.iterdir()) == ["import.json"]


def test_one_gpu_rank_of_a_synthetic_job_gets_the_replay(tmp_path, capsys):
    """The general model's one-rank refusal now applies to CPU traces only: one GPU rank's
    trace is replayed (no host sync in these steps: each replays as traced)."""
    out = tmp_path / "out"
    folder = write_docs(tmp_path / "t", {0: ddp_doc(0)})
    assert main(["import", "kineto", "--traces", str(folder), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "step 5: traced" in printed and "step 6: traced" in printed
    assert "pass every rank's trace for the what-if" in printed
    assert json.loads((out / "import.json").read_text())["model"] == "host-device"


def _queue_full(late_us: float = 0.0) -> HostDeviceTrace:
    """A launch queue of 4 ops: 10 launches of 1 ms kernels; from the fifth on, each call
    returns no earlier than the kernel 4 before it starts (+5 us). late_us: the fourth
    kernel starts that much later than its stream allows (a device delay the model does
    not see), so every call behind it is held that much longer."""
    calls, ops = [], []
    t, end = 0.0, 0.0
    for i in range(10):
        back = t + 5.0
        if i >= 4:
            back = max(back, ops[i - 4]["ts"] + 5.0)
        calls.append({"name": "cudaLaunchKernel", "ts": t, "dur": back - t, "corr": i})
        start = max(back, end) + (late_us if i == 3 else 0.0)
        ops.append({"ts": start, "dur": 1000.0, "corr": i})
        end = start + 1000.0
        t = back + 2.0
    return _trace(calls, ops)


def test_a_full_launch_queue_holds_the_host_without_a_sync():
    rep = simulate_steps(_queue_full(), queue_depth=4)
    (s,) = rep.steps
    assert abs(s.discrepancy) < 1e-9 and s.host_syncs == 0
    # the fifth finds its slot free (the first kernel started at 5 us); the other 5 wait
    assert s.queue_held == 5 and s.queue_wait_s > 3e-3
    assert rep.classification == DEVICE_BOUND
    # the fourth kernel 2 ms late for no modelled reason: the replay starts it on time, and
    # the launches held behind it return, and the step ends, 2 ms earlier
    (late,) = simulate_steps(_queue_full(late_us=2000.0), queue_depth=4).steps
    assert (late.traced_s - late.simulated_s) * 1e6 == pytest.approx(2000.0, abs=1e-6)
    assert late.early_ops >= 1


def test_zero_length_steps_leave_the_whole_window():
    calls = [{"name": "cudaLaunchKernel", "ts": 10.0, "dur": 5.0, "corr": 1}]
    ops = [{"ts": 15.0, "dur": 10.0, "corr": 1}]
    rep = simulate_steps(_trace(calls, ops, steps=((4, 12.0, 12.0),)))
    assert rep.whole_window and [s.step for s in rep.steps] == [-1]
    assert any("zero length" in n for n in rep.notes)
    assert json.dumps(rep.to_dict(), allow_nan=False)
