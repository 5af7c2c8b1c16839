"""Replay one rank's traced steps with a host-device model and say how well it reproduces
them (the per-step simulation discrepancy), and whether the rank is launch- or
device-bound.

    report = simulate_steps(trace)          # trace: stragglerlab.trace.host_device_trace
    report.steps[0].discrepancy             # traced / simulated - 1

The model (design notes §4, "Host and device"): a rank is its host threads and its GPU
streams.

* Each host thread is its traced sequence of CUDA runtime calls; the host time between
  two calls (a host segment) and every call that does not wait for the device keep their
  traced durations. What the model computes is where the host waits for the device.
* A GPU op starts at the latest of: its launch call's return (the real traces show
  kernels starting 0-4 us after cudaLaunchKernel returns, and up to a launch's whole
  duration after its start; a device-to-host copy into pageable memory, which the call
  waits for, is enqueued at the call's start; a host-to-device copy from pageable memory
  is taken to start as its call returns, true of small copies, while a large one starts
  inside its call, so the replay starts it late), the end of the op before it on its stream, and the
  completion of any event its stream waits on (cudaStreamWaitEvent). It lasts its traced
  duration; no launch delay is added.
* A launch call returns no earlier than a slot of the driver's launch queue frees: when
  the GPU op queued LAUNCH_QUEUE_DEPTH ops before it starts, plus QUEUE_RETURN_US. Of a
  call the full queue held in the trace only SYNC_CALL_US is its own cost; the rest is
  computed. A device-bound host waits so, with no sync call at all.
* An event recorded with cudaEventRecord completes when the work its stream was given
  before the record call ends.
* A host sync (stream, device or event synchronize, a synchronous copy, a device-to-host
  copy into pageable memory) returns at the later of its start plus its own cost (its traced
  duration, at most SYNC_CALL_US) and the end of the device work it waits for plus
  SYNC_RETURN_US; the thread's later calls move by as much as its return moved. A sync
  whose device work the model cannot name (no stream in the trace, none inferred) waits for
  nothing: its traced wait is unexplained, and shows as discrepancy.

Each step is replayed alone: work launched before the step keeps its traced times, the
step's calls and ops are simulated. The traced step is the ProfilerStep CPU range on the
thread that runs the loop (torch measures it from one prof.step() to the next, not to the
end of the GPU work the step launched), so the simulated step is measured the same way:
from the step's start to the simulated end of that range (its traced end moved as far as
the thread's last sync moved it). A trace with no ProfilerStep is one step: its runtime
calls' span, timed on the thread with the most calls.

The replay is a check, not a reconstruction: only host segments and non-waiting calls are
taken from the trace. A GPU op that started later than its launch, its stream and its
events allow (an unexplained device delay: a dependency the model does not see) starts
earlier in the replay; a sync that waited longer than the device work it names returns
earlier; either shortens the simulated step, and the discrepancy shows it.

Kernels share the GPU's SMs: a kernel with FILLS_GPU_BLOCKS_PER_SM blocks per SM or more
fills it, and a kernel of another stream starts only when that one ends (copies and sets
use the copy engines and do not wait).

Links the trace does not spell out. Kineto writes a `cuda_sync` event per sync call (the
stream synced, the event's stream and its record call) since 2023; older traces have the
calls only (often not even cudaEventRecord). There (infer_links=True, the default) a
stream or event sync waits for the stream of the last op its thread launched before it,
unless the trace refutes that; a stream wait holds the stream of its thread's next
launch until the op of another stream that ended last before that stream went on, which
the trace supplies, so on such traces waits are fitted, not checked (_infer_links; each
step counts them in inferred_links).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from stragglerlab.trace.host_device_trace import (
    DEVICE_SYNC,
    EVENT_RECORD,
    EVENT_SYNC,
    MEMCPY_SYNC,
    NO_STREAM,
    STREAM_SYNC,
    STREAM_WAIT,
    HostDeviceTrace,
)

SYNC_CALL_US = 10.0
"""Most of a sync call's traced duration taken as its own cost (a sync that found the device
done takes 2-8 us in the real traces); the rest of a longer one is waiting, which the model
computes instead of copying."""
SYNC_RETURN_US = 5.0
"""How long after the device work it waits for ends a sync call returns (the real traces'
syncs that waited: median 4.5-6 us)."""
LAUNCH_BOUND_TOL_US = 5.0
"""A kernel that starts within this many us of its launch call's return was waiting for the
host (the GPU had nothing else queued): kernels behind other work start later than that."""
LAUNCH_BOUND_SHARE = 0.5
"""A step is launch-bound when at least this share of its kernels start as their launches
return (and its GPU is busy less than GPU_BUSY_BOUND of it)."""
GPU_BUSY_BOUND = 0.5
"""A step whose GPU (union of its ops) is busy less than this share of it is host-bound; at
least this share with kernels queued behind other work is device-bound."""
HOST_WAIT_BOUND = 0.5
"""A step whose host waits for the device (syncs, a full launch queue) at least this share
of it is device-bound even when the GPU looks idle: the device's critical path (cross-stream
waits, collectives waiting for peers) is what the host waits for."""
DEVICE_DELAY_TOL_US = 20.0
"""An op whose replayed start differs from its traced start by more than this is counted as
early (an unexplained device delay) or late (a dependency the trace does not hold)."""
FILLS_GPU_BLOCKS_PER_SM = 32.0
"""A kernel with at least this many thread blocks per SM fills the GPU: no SM holds more
than 32 resident blocks (Volta to Hopper), so it runs in waves with every SM busy until its
last one, and a kernel of another stream starts only as it drains. The real traces show
it (a 36-block/SM kernel on a second stream waiting 3-4 ms behind a 143-block/SM embedding
backward, starting as that one drains)."""
LAUNCH_QUEUE_DEPTH = 1021
"""GPU ops the driver lets a process queue before a launch call blocks: the call returns
once the op queued this many before it starts. Measured on the real traces: each of the
700 launch calls of over 100 us in training-5steps returns 4-7 us (p1-p95) after the op
queued 1021 before it starts, and 1021 ops are pending when it returns (1020: up to 0.8 ms
before, 1022: 0.1-1 ms after)."""
QUEUE_RETURN_US = 5.0
"""How long after a queue slot frees a held launch call returns (the same measurement:
median 5.2 us)."""
QUEUE_HELD_TOL_US = 20.0
"""A launch call that returned within this many us after its queue slot freed was held by
the full queue in the trace; its own cost is then SYNC_CALL_US at most, not its duration."""
REFUTE_TOL_US = 5.0
"""An inferred link is refuted when the trace shows its waiter going on more than this many
us before the work it would wait for ended (clock reads of host and GPU differ by ~1 us)."""
MAX_DISCREPANCY = 0.05
"""Above this |discrepancy| the replay does not reproduce the step (the paper's 5 %): the
step's numbers are the model's, not the job's."""

SYNC_KINDS = frozenset({STREAM_SYNC, DEVICE_SYNC, EVENT_SYNC, MEMCPY_SYNC})
"""Call kinds that hold the host until device work ends (so do blocking copies' calls)."""

LAUNCH_BOUND = "launch-bound"
"""Classification: the host launches too slowly to keep the GPU busy."""
DEVICE_BOUND = "device-bound"
"""Classification: the GPU is the bottleneck; the host runs ahead (or waits in syncs)."""
MIXED = "mixed"
"""Classification: neither rule holds (e.g. kernels wait for launches and the GPU is busy)."""


@dataclass(kw_only=True)
class StepReplay:
    """One step, traced and replayed (seconds, shares in [0, 1])."""

    step: int
    """ProfilerStep number (-1: the whole trace window, no ProfilerStep in it)."""
    traced_s: float
    """The traced step: its ProfilerStep CPU range."""
    simulated_s: float
    """The replayed step, measured the same way."""
    discrepancy: float
    """traced_s / simulated_s - 1 (0: reproduced; > 0: the trace is slower than the model)."""
    gpu_busy_share: float
    """Union of the GPU ops running during the step / the step (traced)."""
    launch_wait_share: float
    """Share of the step's GPU ops that start within LAUNCH_BOUND_TOL_US of their launch
    call's return (traced): the GPU was waiting for the host."""
    ops: int
    """GPU ops the step launched."""
    host_syncs: int
    """Host calls in the step that wait for the device."""
    sync_wait_s: float
    """Traced time those calls spent past SYNC_CALL_US (waiting for the device)."""
    early_ops: int
    """Ops the replay starts more than DEVICE_DELAY_TOL_US before their traced start."""
    late_ops: int
    """Ops the replay starts more than DEVICE_DELAY_TOL_US after their traced start."""
    inferred_links: int
    """Syncs (linked) and waits (fitted) whose streams the trace does not name (see the
    module doc)."""
    queue_held: int
    """Launch calls the full launch queue held in the trace (LAUNCH_QUEUE_DEPTH)."""
    queue_wait_s: float
    """Traced time those calls spent past their own cost (waiting for a queue slot)."""
    host_wait_share: float
    """(sync_wait_s + queue_wait_s) / traced_s: the share of the step the host waited for the
    device."""
    classification: str
    """LAUNCH_BOUND, DEVICE_BOUND or MIXED (classify())."""

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return {k: (round(v, 9) if isinstance(v, float) else v)
                for k, v in self.__dict__.items()}


@dataclass(kw_only=True)
class HostDeviceReport:
    """The replay of every step of one rank."""

    steps: list[StepReplay]
    """Per step, in time order."""
    classification: str
    """The rank's class: classify() on all steps pooled."""
    gpu_busy_share: float
    """Pooled over the steps."""
    launch_wait_share: float
    """Pooled over the steps."""
    host_wait_share: float
    """Pooled over the steps."""
    whole_window: bool
    """No ProfilerStep: the trace window was replayed as one step."""
    notes: list[str] = field(default_factory=list)
    """What was inferred or left out."""

    @property
    def reproduced(self) -> bool:
        """Every step within MAX_DISCREPANCY."""
        return all(abs(s.discrepancy) <= MAX_DISCREPANCY for s in self.steps)

    def to_dict(self) -> dict:
        """JSON-ready (import.json's "host_device" section)."""
        return {
            "steps": [s.to_dict() for s in self.steps],
            "classification": self.classification,
            "gpu_busy_share": round(self.gpu_busy_share, 6),
            "launch_wait_share": round(self.launch_wait_share, 6),
            "host_wait_share": round(self.host_wait_share, 6),
            "whole_window": self.whole_window,
            "reproduced": self.reproduced,
            "max_discrepancy": MAX_DISCREPANCY,
            "rule": CLASS_RULE,
            "notes": self.notes,
        }


CLASS_RULE = (f"{LAUNCH_BOUND}: >= {LAUNCH_BOUND_SHARE:.0%} of GPU ops start within "
              f"{LAUNCH_BOUND_TOL_US:g} us of their launch's return and the GPU is busy < "
              f"{GPU_BUSY_BOUND:.0%} of the step; {DEVICE_BOUND}: fewer start so and the GPU "
              f"is busy >= {GPU_BUSY_BOUND:.0%} of the step or the host waits for the device "
              f">= {HOST_WAIT_BOUND:.0%} of it; else {MIXED}")
"""classify()'s rule in words (import.json says it)."""


def classify(launch_wait_share: float, gpu_busy_share: float,
             host_wait_share: float = 0.0) -> str:
    """LAUNCH_BOUND, DEVICE_BOUND or MIXED (CLASS_RULE)."""
    waits = launch_wait_share >= LAUNCH_BOUND_SHARE
    busy = gpu_busy_share >= GPU_BUSY_BOUND or host_wait_share >= HOST_WAIT_BOUND
    if waits and not busy:
        return LAUNCH_BOUND
    if busy and not waits:
        return DEVICE_BOUND
    return MIXED


@dataclass(kw_only=True)
class _Index:
    """Whole-trace lookups the per-step replays share (built once, vectorized)."""

    launch: np.ndarray
    """Per op: index of its launch call, -1 none."""
    by_call: np.ndarray
    """The ops grouped by launch call (calls in time order; no-launch ops first), by start
    within a call."""
    split: np.ndarray
    """(n_calls + 1): call c launched by_call[split[c]:split[c + 1]]."""
    corr_order: np.ndarray
    """The calls by correlation id (for looking a call up by its correlation)."""
    pred: np.ndarray
    """Per op: the op before it on its stream (by traced start), -1 none."""
    op_end: np.ndarray
    """Per op: traced end."""
    op_enq: np.ndarray
    """Per op: traced time its launch call started (-inf when none is traced: it was queued
    before the trace began)."""
    prev_stream: np.ndarray
    """Per call: stream of the last op its thread launched before it, NO_STREAM none."""
    next_stream: np.ndarray
    """Per call: stream of the next op its thread launches after it, NO_STREAM none."""
    streams: np.ndarray
    """Every stream of the trace."""
    sync_stream: np.ndarray
    """Per call: the stream a stream sync waits for / a stream wait holds (as traced, else
    inferred), NO_STREAM none."""
    event_stream: np.ndarray
    """Per call: the stream of the event a wait or event sync waits on (as traced, else
    inferred), NO_STREAM none."""
    inferred: np.ndarray
    """Per call: whether a stream above was inferred (not written in the trace)."""
    refuted: np.ndarray
    """Per call: an inferred link the trace refutes, dropped (see _infer_links)."""
    fills: np.ndarray
    """Per op: a kernel that fills the GPU (FILLS_GPU_BLOCKS_PER_SM)."""
    gate: np.ndarray
    """Per call: the op enqueued LAUNCH_QUEUE_DEPTH ops before the call's first op (its
    start frees the queue slot the call needs), -1 none."""
    launch_cost: np.ndarray
    """Per call: its own cost when the queue does not hold it: the traced duration, or
    SYNC_CALL_US at most for a call the full queue held in the trace."""
    kernel: np.ndarray
    """Per op: a kernel (it needs SMs; copies and sets do not)."""
    wait_op: np.ndarray
    """Per stream-wait call whose event the trace does not name: the source-stream op taken
    as its event (see _infer_links), -1 none."""
    by_stream: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    """stream -> (launch times sorted, running max of those ops' ends, the ops in that order,
    the earliest start of each op and those after it): the traced end of the work given to
    the stream before a time, and when its work given after a time began."""


def _index(t: HostDeviceTrace, queue_depth: int = 0) -> _Index:
    """The whole-trace lookups (queue_depth: LAUNCH_QUEUE_DEPTH unless given)."""
    queue_depth = queue_depth or LAUNCH_QUEUE_DEPTH
    n_calls, n_ops = t.call_ts.size, t.op_ts.size
    corr_order = np.argsort(t.call_corr, kind="stable")
    keys = t.call_corr[corr_order]
    launch = np.full(n_ops, -1, dtype=np.int64)
    if keys.size:
        i = np.clip(np.searchsorted(keys, t.op_corr), 0, keys.size - 1)
        hit = (t.op_corr >= 0) & (keys[i] == t.op_corr)
        launch[hit] = corr_order[i[hit]]
    by_call = np.argsort(launch, kind="stable")  # ops already sorted by start
    split = np.searchsorted(launch[by_call], np.arange(n_calls + 1))
    order = np.lexsort((t.op_ts, t.op_stream))
    pred = np.full(n_ops, -1, dtype=np.int64)
    same = t.op_stream[order[1:]] == t.op_stream[order[:-1]]
    pred[order[1:][same]] = order[:-1][same]
    op_end = t.op_ts + t.op_dur
    # An op with no traced launch was queued before the trace began (Kineto's GPU buffer
    # holds work queued before its CPU window; training-nccl-5steps has 872 such ops, all
    # with correlation ids below the first traced call's): given to its stream before any
    # call.
    op_enq = np.where(launch >= 0, t.call_ts[np.maximum(launch, 0)], -np.inf)
    # Per call, the stream of its first op (NO_STREAM: it launched none); then, per thread
    # in time order, the last such stream strictly before and the next strictly after.
    first = np.full(n_calls, NO_STREAM, dtype=np.int64)
    has = launch >= 0
    first[launch[has][::-1]] = t.op_stream[has][::-1]
    prev_s, next_s = _neighbours(t.call_tid, first)
    by_stream = {}
    for s in np.unique(t.op_stream):
        m = t.op_stream == s
        o = np.argsort(op_enq[m], kind="stable")
        starts = t.op_ts[m][o]
        by_stream[int(s)] = (op_enq[m][o], np.maximum.accumulate(op_end[m][o]),
                             np.flatnonzero(m)[o], np.minimum.accumulate(starts[::-1])[::-1])
    gate, cost = _queue_gates(t, by_call, split, op_enq, queue_depth)
    ix = _Index(launch=launch, by_call=by_call, split=split, corr_order=corr_order,
                pred=pred, op_end=op_end, op_enq=op_enq,
                prev_stream=prev_s, next_stream=next_s, streams=np.unique(t.op_stream),
                by_stream=by_stream, sync_stream=t.call_stream.copy(),
                event_stream=t.call_event_stream.copy(),
                inferred=np.zeros(n_calls, dtype=bool), refuted=np.zeros(n_calls, dtype=bool),
                wait_op=np.full(n_calls, -1, dtype=np.int64),
                fills=(t.op_blocks_per_sm >= FILLS_GPU_BLOCKS_PER_SM) & ~t.op_nccl,
                gate=gate, launch_cost=cost,
                kernel=np.isfinite(t.op_blocks_per_sm) | t.op_nccl)
    return ix


def _queue_gates(t: HostDeviceTrace, by_call: np.ndarray, split: np.ndarray,
                 op_enq: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per call, the op whose start lets it return when the launch queue is full (-1 none)
    and its own cost (see _Index); vectorized over the trace."""
    n_calls = t.call_ts.size
    gate = np.full(n_calls, -1, dtype=np.int64)
    cost = t.call_dur.copy()
    # every op in the order it was queued (ops launched before the trace first)
    order = np.lexsort((t.op_ts, op_enq))
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    has = split[1:] > split[:-1]
    first = np.where(has, by_call[np.minimum(split[:-1], max(by_call.size - 1, 0))], -1) \
        if by_call.size else np.full(n_calls, -1, dtype=np.int64)
    j = np.where(has, rank[np.maximum(first, 0)] - depth, -1)
    ok = has & (j >= 0)
    gate[ok] = order[j[ok]]
    # held in the trace: it returned as its gate started (within QUEUE_HELD_TOL_US)
    lag = t.call_ts + t.call_dur - np.where(ok, t.op_ts[np.maximum(gate, 0)], np.inf)
    held = ok & (lag >= 0) & (lag <= QUEUE_HELD_TOL_US)
    cost[held] = np.minimum(cost[held], SYNC_CALL_US)
    return gate, cost


def _infer_links(t: HostDeviceTrace, ix: _Index) -> None:
    """Fill in the links of syncs and waits the trace does not name (module doc).

    A sync (stream or event) waits for the work given to its thread's previous launch
    stream; one the trace refutes (it returned more than REFUTE_TOL_US before that work
    ended) is left unlinked. A stream wait holds the stream of its thread's next launch;
    its event was recorded at an untraced moment on an untraced stream, so it is taken to
    be the op, given to another stream before the wait, that ended last by the time the
    waiting stream's next op started (within REFUTE_TOL_US): the trace supplies that link,
    so such a wait is fitted, not checked (StepReplay.inferred_links counts them). Links
    the trace names are never changed, so a wrong one shows as discrepancy."""
    k = t.call_kind
    sync = ((k == STREAM_SYNC) & (ix.sync_stream == NO_STREAM)) | \
        ((k == EVENT_SYNC) & (ix.event_stream == NO_STREAM))
    wait = (k == STREAM_WAIT) & (ix.sync_stream == NO_STREAM) & (ix.event_stream == NO_STREAM)
    for c in np.flatnonzero(sync | wait).tolist():
        src, at = int(ix.prev_stream[c]), float(t.call_ts[c])
        if k[c] == STREAM_WAIT:
            dst = int(ix.next_stream[c])
            if dst == NO_STREAM:
                continue
            times, _, _, first_start = ix.by_stream[dst]
            after = int(np.searchsorted(times, at, side="right"))  # its ops launched after
            if after == times.size:
                continue
            went_on = float(first_start[after]) + REFUTE_TOL_US
            best, best_end = -1, -np.inf
            for s, (times, ends, ops, _) in ix.by_stream.items():
                if s == dst:
                    continue  # its own order already holds it
                n = min(int(np.searchsorted(times, at, side="left")),
                        int(np.searchsorted(ends, went_on, side="right")))
                if n and ends[n - 1] > best_end:
                    best, best_end = int(ops[n - 1]), float(ends[n - 1])
            if best >= 0:
                ix.sync_stream[c], ix.wait_op[c], ix.inferred[c] = dst, best, True
            continue
        if src == NO_STREAM:
            continue
        if t.call_ts[c] + t.call_dur[c] < _traced_work_end(ix, src, at) - REFUTE_TOL_US:
            ix.refuted[c] = True
            continue
        ix.inferred[c] = True
        if k[c] == STREAM_SYNC:
            ix.sync_stream[c] = src
        else:
            ix.event_stream[c] = src


def _neighbours(tid: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (items in time order): the last value != NO_STREAM strictly before it on the
    same thread, and the first strictly after it (NO_STREAM: none)."""
    n = tid.size
    order = np.lexsort((np.arange(n), tid))
    v, g = value[order], tid[order]
    starts = np.r_[True, g[1:] != g[:-1]] if n else np.zeros(0, dtype=bool)
    pos = np.arange(n)
    have = v != NO_STREAM
    # forward fill within a thread: index of the last item with a value at or before
    last = np.maximum.accumulate(np.where(have, pos, -1)) if n else pos
    group_start = np.maximum.accumulate(np.where(starts, pos, 0)) if n else pos
    prev_idx = np.r_[-1, last[:-1]] if n else pos
    prev = np.where((prev_idx >= group_start) & (prev_idx >= 0), v[np.maximum(prev_idx, 0)],
                    NO_STREAM)
    nxt_pos = np.minimum.accumulate(np.where(have, pos, n)[::-1])[::-1] if n else pos
    ends = np.r_[starts[1:], True] if n else starts
    group_end = np.minimum.accumulate(np.where(ends, pos, n)[::-1])[::-1] if n else pos
    next_idx = np.r_[nxt_pos[1:], n] if n else pos
    nxt = np.where(next_idx <= group_end, v[np.minimum(next_idx, max(n - 1, 0))], NO_STREAM)
    out_prev, out_next = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    out_prev[order], out_next[order] = prev, nxt
    return out_prev, out_next


def _traced_work_end(ix: _Index, stream: int, before_us: float) -> float:
    """Traced end of the work given to `stream` by calls that started before `before_us`."""
    times, ends, _, _ = ix.by_stream.get(stream, (None, None, None, None))
    if times is None:
        return -np.inf
    k = np.searchsorted(times, before_us, side="left")
    return float(ends[k - 1]) if k else -np.inf


def simulate_steps(trace: HostDeviceTrace, *, infer_links: bool = True,
                   stream_waits: bool = True,
                   queue_depth: int = LAUNCH_QUEUE_DEPTH) -> HostDeviceReport:
    """Replay every step of `trace` (see the module doc). infer_links=False leaves syncs and
    waits whose streams the trace does not name unlinked; stream_waits=False drops every
    cudaStreamWaitEvent dependency (to show what they hold); queue_depth: the launch queue's
    depth in ops."""
    ix = _index(trace, queue_depth)
    if infer_links:
        _infer_links(trace, ix)
    notes: list[str] = []
    windows = [(int(n), float(a), float(b), trace.step_tid) for n, a, b in trace.steps
               if b > a]
    if len(windows) < trace.steps.shape[0]:
        notes.append(f"{trace.steps.shape[0] - len(windows)} ProfilerStep range(s) of zero "
                     "length left out")
    whole = not windows
    if whole:
        tids, counts = np.unique(trace.call_tid, return_counts=True)
        tid = int(tids[np.argmax(counts)])
        mine = trace.call_tid == tid
        end = float(np.max(trace.call_ts[mine] + trace.call_dur[mine]))
        first = float(trace.call_ts.min())
        windows = [(-1, first, max(end, first + 1.0), tid)]  # 1 us at least: never empty
        notes.append("no ProfilerStep (of non-zero length) in the trace: its runtime calls' "
                     "span replayed as one "
                     f"step, timed on thread {tid} (the one with the most calls)")
    steps = [_replay(trace, ix, n, a, b, tid, stream_waits)
             for n, a, b, tid in windows]
    ops = sum(s.ops for s in steps)
    total = sum(s.traced_s for s in steps)
    wait = sum(s.launch_wait_share * s.ops for s in steps) / ops if ops else 0.0
    busy = sum(s.gpu_busy_share * s.traced_s for s in steps) / total if total else 0.0
    held = sum(s.host_wait_share * s.traced_s for s in steps) / total if total else 0.0
    inferred = sum(s.inferred_links for s in steps)
    if inferred:
        notes.append(f"{inferred:,} sync/wait call(s) in the steps name no stream (Kineto "
                     "before its cuda_sync events): syncs were linked to their thread's last "
                     "launch stream, waits fitted to the trace (so not checked)")
    if refuted := int(ix.refuted.sum()):
        notes.append(f"{refuted:,} sync(s) naming no stream returned before their thread's "
                     "last launch stream was done: left unlinked")
    return HostDeviceReport(steps=steps, classification=classify(wait, busy, held),
                            gpu_busy_share=busy, launch_wait_share=wait,
                            host_wait_share=held, whole_window=whole, notes=notes)


def _replay(t: HostDeviceTrace, ix: _Index, number: int, t0: float, t1: float, step_tid: int,
            stream_waits: bool) -> StepReplay:
    """One step's replay and evidence (see the module doc)."""
    lo, hi = (int(x) for x in np.searchsorted(t.call_ts, [t0, t1], side="left"))
    # The replay is a max-plus recurrence along each host thread and stream, sequential by
    # nature: one pass over the step's calls, on Python lists of the step's own slice (a
    # step holds 10^3-10^4 calls), keyed by global op index where ops of earlier steps
    # (which keep their traced times) are looked up.
    ts, dur = t.call_ts[lo:hi].tolist(), t.call_dur[lo:hi].tolist()
    tid, kind = t.call_tid[lo:hi].tolist(), t.call_kind[lo:hi].tolist()
    gate, own = ix.gate[lo:hi].tolist(), ix.launch_cost[lo:hi].tolist()
    base = int(ix.split[lo])
    mine = ix.by_call[base:int(ix.split[hi])]
    cut = (ix.split[lo:hi + 1] - base).tolist()
    win_ops, op_dur = mine.tolist(), t.op_dur[mine].tolist()
    op_stream, pred = t.op_stream[mine].tolist(), ix.pred[mine].tolist()
    fills, kernel = ix.fills[mine].tolist(), ix.kernel[mine].tolist()
    blocking = t.op_blocking[mine].tolist()
    shift: dict[int, float] = {}
    sim_start: dict[int, float] = {}
    sim_end: dict[int, float] = {}
    given = {int(s): _traced_work_end(ix, int(s), t0) for s in ix.streams}  # per stream
    floor: dict[int, float] = {}  # stream -> completion of the events it waits on
    records: dict[int, float] = {}  # cudaEventRecord correlation -> event completion
    record_stream = _record_streams(t, lo, hi)
    full = _filling_before(t, ix, t0)  # stream -> ([starts], [ends]) of GPU-filling kernels
    syncs, sync_wait = 0, 0.0
    inferred = int(ix.inferred[lo:hi].sum())
    held = ix.launch_cost[lo:hi] < t.call_dur[lo:hi]
    for i in range(hi - lo):
        c = lo + i
        th = tid[i]
        start = ts[i] + shift.get(th, 0.0)
        first, last = cut[i], cut[i + 1]
        blocks = any(blocking[first:last])
        g = gate[i]
        if g >= 0 and not blocks:  # a full launch queue holds the call (LAUNCH_QUEUE_DEPTH)
            freed = sim_start.get(g, float(t.op_ts[g])) + QUEUE_RETURN_US
            back = max(start + own[i], freed)
            shift[th] = back - (ts[i] + dur[i])
            ready = back
        else:
            ready = start if blocks else start + dur[i]
        op_done = -np.inf
        for j in range(first, last):
            o, s, p = win_ops[j], op_stream[j], pred[j]
            prev = -np.inf if p < 0 else sim_end.get(p)
            if prev is None:  # launched before the step: as traced
                prev = float(ix.op_end[p])
            begin = max(ready, prev, floor.get(s, -np.inf))
            if kernel[j]:
                begin = _after_filling(full, s, begin)
            end = begin + op_dur[j]
            if fills[j]:
                starts, ends = full.setdefault(s, ([], []))
                starts.append(begin)
                ends.append(end)
            sim_start[o], sim_end[o] = begin, end
            given[s] = max(given.get(s, -np.inf), end)
            op_done = max(op_done, end)
        k = kind[i]
        waits = blocks or k in SYNC_KINDS
        target = -np.inf  # a sync with nothing to wait for: only its own cost
        if blocks or k == MEMCPY_SYNC:
            target = op_done
        elif k == DEVICE_SYNC:
            target = max(given.values(), default=-np.inf)
        elif k == STREAM_SYNC:
            target = given.get(int(ix.sync_stream[c]), -np.inf)
        elif k == EVENT_SYNC:
            done = _event_done(t, ix, c, given, records)
            target = -np.inf if done is None else done
        elif k == STREAM_WAIT and stream_waits:
            w = int(ix.wait_op[c])
            done = _event_done(t, ix, c, given, records) if w < 0 else \
                sim_end.get(w, float(ix.op_end[w]))
            waiter = int(ix.sync_stream[c])
            if done is not None and waiter != NO_STREAM:
                floor[waiter] = max(floor.get(waiter, -np.inf), done)
        elif k == EVENT_RECORD and (s := record_stream.get(int(t.call_corr[c]))) is not None:
            records[int(t.call_corr[c])] = given.get(s, -np.inf)
        if waits:
            syncs += 1
            sync_wait += max(0.0, dur[i] - SYNC_CALL_US)
            end = max(start + min(dur[i], SYNC_CALL_US), target + SYNC_RETURN_US)
            shift[th] = end - (ts[i] + dur[i])
    traced = float(t1 - t0)
    simulated = traced + float(shift.get(step_tid, 0.0))
    ev = _evidence(t, ix, lo, hi, t0, t1, sim_start)
    queue_wait = float((t.call_dur[lo:hi] - ix.launch_cost[lo:hi])[held].sum())
    host_wait = (sync_wait + queue_wait) / traced if traced > 0 else 0.0
    return StepReplay(step=number, traced_s=traced / 1e6, simulated_s=simulated / 1e6,
                      discrepancy=traced / simulated - 1 if simulated > 0 else float("inf"),
                      **ev, host_syncs=syncs, sync_wait_s=sync_wait / 1e6,
                      inferred_links=inferred, queue_held=int(held.sum()),
                      queue_wait_s=queue_wait / 1e6, host_wait_share=host_wait,
                      classification=classify(ev["launch_wait_share"], ev["gpu_busy_share"],
                                              host_wait))


def _filling_before(t: HostDeviceTrace, ix: _Index, t0: float) -> dict:
    """stream -> ([starts], [ends]) of the GPU-filling kernels launched before t0 that end
    after it (traced): the replay appends its own."""
    m = ix.fills & (ix.op_enq < t0) & (ix.op_end > t0)
    out: dict[int, tuple[list, list]] = {}
    for o in np.flatnonzero(m)[np.argsort(t.op_ts[m], kind="stable")].tolist():
        starts, ends = out.setdefault(int(t.op_stream[o]), ([], []))
        starts.append(float(t.op_ts[o]))
        ends.append(float(ix.op_end[o]))
    return out


def _after_filling(full: dict, stream: int, begin: float) -> float:
    """The earliest time at or after `begin` when no GPU-filling kernel of another stream
    runs (FILLS_GPU_BLOCKS_PER_SM)."""
    moved = True
    while moved:
        moved = False
        for s, (starts, ends) in full.items():
            if s == stream:
                continue
            i = bisect_right(starts, begin) - 1
            if i >= 0 and ends[i] > begin:
                begin, moved = ends[i], True
    return begin


def _record_streams(t: HostDeviceTrace, lo: int, hi: int) -> dict[int, int]:
    """cudaEventRecord correlation -> its stream, for records a wait or sync of the step
    names (the record call itself does not say)."""
    rc, es = t.call_record_corr[lo:hi], t.call_event_stream[lo:hi]
    m = (rc >= 0) & (es != NO_STREAM)
    return dict(zip(rc[m].tolist(), es[m].tolist(), strict=True))


def _event_done(t: HostDeviceTrace, ix: _Index, c: int, given: dict[int, float],
                records: dict[int, float]) -> float | None:
    """When the event that call c (a stream wait or event sync) waits on completes (None:
    unknown, no dependency)."""
    rc, s = int(t.call_record_corr[c]), int(ix.event_stream[c])
    if rc >= 0 and rc in records:
        return records[rc]
    if s == NO_STREAM:
        return None
    if rc >= 0:  # recorded before the step: its traced completion
        k = int(np.searchsorted(t.call_corr, rc, sorter=ix.corr_order))
        if k < ix.corr_order.size and t.call_corr[ix.corr_order[k]] == rc:
            return _traced_work_end(ix, s, float(t.call_ts[ix.corr_order[k]]))
    return given.get(s, -np.inf)


def _evidence(t: HostDeviceTrace, ix: _Index, lo: int, hi: int, t0: float, t1: float,
              sim_start: dict[int, float]) -> dict:
    """The launch-bound evidence of a step (traced, vectorized) and the replay's early and
    late ops."""
    ops = ix.by_call[int(ix.split[lo]):int(ix.split[hi])]
    ret = t.call_ts[ix.launch[ops]] + t.call_dur[ix.launch[ops]]
    waited = (t.op_ts[ops] - ret) <= LAUNCH_BOUND_TOL_US
    share = float(waited.mean()) if ops.size else 0.0
    if sim_start:
        o = np.fromiter(sim_start.keys(), dtype=np.int64, count=len(sim_start))
        d = t.op_ts[o] - np.fromiter(sim_start.values(), dtype=np.float64, count=o.size)
        early, late = int((d > DEVICE_DELAY_TOL_US).sum()), int((d < -DEVICE_DELAY_TOL_US).sum())
    else:
        early = late = 0
    busy = _busy(t.op_ts, ix.op_end, t0, t1) / (t1 - t0) if t1 > t0 else 0.0
    return {"gpu_busy_share": busy, "launch_wait_share": share, "ops": int(ops.size),
            "early_ops": early, "late_ops": late}


def _busy(start: np.ndarray, end: np.ndarray, t0: float, t1: float) -> float:
    """Length (us) of the union of [start, end) intervals clipped to [t0, t1)."""
    a, b = np.clip(start, t0, t1), np.clip(end, t0, t1)
    m = b > a
    a, b = a[m], b[m]
    if not a.size:
        return 0.0
    o = np.argsort(a, kind="stable")
    a, b = a[o], np.maximum.accumulate(b[o])
    new = np.r_[True, a[1:] > b[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, a.size - 1]
    return float((b[last] - a[first]).sum())
