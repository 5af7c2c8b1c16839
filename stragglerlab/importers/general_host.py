"""The host side of the general op model on GPU traces: the host thread that launches the
work, beside the device chain of communication ops and compute segments.

    cols = host_columns(rows, kernels, nccl_launch_end, syncs)   # per row, µs (NaN: none)

On a GPU a rank is two chains (design.md, "Host and device"): the host, which
runs the Python, the CPU ops and the launches, and waits for the device only at
a host sync; and the device, whose kernels start at the later of their launch
and their stream's previous work. Per row of the op model (a communication op
or the step end), from the trace:

* `host_s`: host time from the previous row's host point (its launch call's
  start; the step's CPU start for the first row) to the row's host point (its
  launch call's start; the CPU step end for the step-end row), up to the last
  host sync in between that waited (SYNC_WAIT_US or more) where there is one;
* `host_after_s`: host time after that sync (0 without one);
* `sync_s`: device work from the previous row's device point to that sync's
  return, without the GPU's idle time that waited for the host (NaN: no
  sync); `sync_gate_s`, `sync_tail_s`: for the last gating op before the
  sync, host time from the previous row's host point to its launch call's
  start and time from that start to the sync's return (NaN: none). The host
  resumes at the latest of its own arrival, the device's work done and the
  gated work done;
* `device_s`: the compute segment without the GPU's idle time that waited for
  the host (before a *gating* op: one that started within GATE_TOL_US of its
  launch call returning, on an idle GPU);
* `gate_back_s`, `gate_tail_s`: for the segment's last gating op, host time
  from its launch call's start to the row's host point, and device time from
  that launch's start to the row's ready time (NaN: no gating op): the row
  cannot start before the host reached that launch plus what ran after it.

Replayed with these values the model gives back the traced times; idealized,
the host segments and the device work are replaced apart (each by its mean
over the ranks doing the same work), so a rank whose host is slow is charged
its host time, and a peer whose host kept launching while its GPU waited at a
collective is not charged that wait.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.trace.op_model import HOST_COLUMNS

GATE_TOL_US = 5.0
"""A GPU op that started within this of its launch call returning (µs; it may start before
the call returns) ran as soon as the host launched it."""
IDLE_TOL_US = 2.0
"""...and the GPU must have been idle for longer than this before it (µs): a queued op
starts within ~1-2 µs of the previous one's end."""
SYNC_WAIT_US = 10.0
"""A host sync call this long or longer (µs) waited for the device; a shorter one found it
idle."""
RETURN_TOL_US = 20.0
"""Another long runtime call (a launch that found the queue full, an allocation that
synchronized) waited for the device when it returned within this (µs) of a GPU op's end;
one that returned at no GPU event was slow on the host (a slow or contended CPU)."""



def gpu_ops(kernels: np.ndarray, nccl: np.ndarray) -> np.ndarray:
    """(n, 5) start, end, launch start, launch end, idle-before of every GPU op of a rank
    (compute kernels: kernels[:, :4]; NCCL kernels: nccl[:, :4]), by start; idle-before is
    how long the GPU (every stream together) was idle before the op started."""
    ops = np.r_[kernels[:, :4], nccl[:, :4]] if len(nccl) else kernels[:, :4].copy()
    ops = ops[np.argsort(ops[:, 0], kind="stable")]
    prev = np.r_[-np.inf, np.maximum.accumulate(ops[:-1, 1])] if len(ops) else np.zeros(0)
    return np.c_[ops, ops[:, 0] - prev]


def host_columns(p0: np.ndarray, ready: np.ndarray, hp0: np.ndarray, hp: np.ndarray,
                 is_end: np.ndarray, ops: np.ndarray, syncs: np.ndarray) -> dict[str, np.ndarray]:
    """The host columns (module doc) of one rank's rows, in chain order (step, k), µs on the
    rank's clock: p0 the previous row's device point (the step start for the first row),
    ready the row's ready time, hp0 and hp the previous row's and the row's host points,
    is_end the step-end rows; ops from gpu_ops; syncs (n, 2) start, end by start. Every
    column is NaN where the rows' ready times are not in time order (no window to assign
    the GPU ops to)."""
    n = ready.size
    out = {c: np.full(n, np.nan) for c in HOST_COLUMNS}
    if n == 0 or (np.diff(ready) < 0).any() or not np.isfinite(hp).all():
        return out
    gap = ready - p0
    # Which row's segment each GPU op falls in: the first row whose ready time is at or
    # after its start, if it started after that row's previous device point.
    start = ops[:, 0]
    j = np.searchsorted(ready, start, side="left")
    inside = j < n
    jj = np.minimum(j, n - 1)
    inside &= start > p0[jj]
    gating = inside & np.isfinite(ops[:, 3]) & (start - ops[:, 3] <= GATE_TOL_US) \
        & (ops[:, 4] > IDLE_TOL_US)
    idle = np.where(gating, np.minimum(ops[:, 4], start - p0[jj]), 0.0)
    out["device_s"] = gap - np.bincount(jj[gating], weights=idle[gating], minlength=n)
    # The segment's last gating op (by start), launched before the row's host point.
    ok = gating & (ops[:, 2] <= hp[jj])
    last = np.full(n, -1)
    idx = np.flatnonzero(ok)
    last[jj[idx]] = idx  # ops are by start: the last write per row is its latest op
    has = (last >= 0) & ~is_end
    launch = ops[np.maximum(last, 0), 2]
    out["gate_back_s"] = np.where(has, hp - launch, np.nan)
    out["gate_tail_s"] = np.where(has, ready - launch, np.nan)
    # The host segment and the last sync in it that waited.
    waited = _device_waits(syncs, ops)
    host = hp - hp0
    out["host_s"], out["host_after_s"] = host, np.zeros(n)
    if len(waited):
        k = np.searchsorted(waited[:, 0], hp, side="right") - 1  # last sync starting by hp
        kk = np.maximum(k, 0)
        in_seg = (k >= 0) & (waited[kk, 0] >= hp0) & (waited[kk, 1] <= hp)
        s0, s1 = waited[kk, 0], waited[kk, 1]
        out["host_s"] = np.where(in_seg, s0 - hp0, host)
        out["host_after_s"] = np.where(in_seg, hp - s1, 0.0)
        # The device's part of the wait: its work up to the sync's return, and the last
        # op before it that waited for the host (as for the row, cut at the sync).
        before = gating & in_seg[jj] & (start <= s1[jj])
        idle_s = np.bincount(jj[before], weights=idle[before], minlength=n)
        out["sync_s"] = np.where(in_seg, s1 - p0 - idle_s, np.nan)
        g = before & (ops[:, 2] <= s0[jj])
        last_s = np.full(n, -1)
        last_s[jj[np.flatnonzero(g)]] = np.flatnonzero(g)
        has_s = in_seg & (last_s >= 0)
        at = ops[np.maximum(last_s, 0), 2]
        out["sync_gate_s"] = np.where(has_s, at - hp0, np.nan)
        out["sync_tail_s"] = np.where(has_s, s1 - at, np.nan)
    return out


def _device_waits(calls: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """(n, 2) start, end of the calls (start, end, is-sync by start) in which the host waited
    for the device: a sync call of SYNC_WAIT_US or more, or another call that long which
    returned within RETURN_TOL_US after a GPU op ended."""
    if not len(calls):
        return np.zeros((0, 2))
    long = calls[:, 1] - calls[:, 0] >= SYNC_WAIT_US
    ends = np.sort(ops[:, 1]) if len(ops) else np.zeros(0)
    i = np.searchsorted(ends, calls[:, 1], side="right") - 1
    last_end = np.where(i >= 0, ends[np.maximum(i, 0)], -np.inf) if ends.size else \
        np.full(len(calls), -np.inf)
    at_gpu = calls[:, 1] - last_end <= RETURN_TOL_US
    keep = long & ((calls[:, 2] > 0) | at_gpu)
    return calls[keep][:, :2]

