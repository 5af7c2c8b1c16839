"""Which communication ops a rank computed through (async) and which it waited for, from
an unannotated trace's timing (general op model, stragglerlab.trace.op_model's `async`, `serial`
and `ready_s`).

    lead, beside, resumed = gpu_evidence(frame, rank_events.kernels)    # per NCCL kernel
    asynchronous, serial, ready = decide_async(ops, use_gpu)            # per op-table row
    posted, wait_k = posted_ahead(ops, asynchronous)                    # CPU P2P rows

Evidence per op (µs):
* `beside`: how long the rank computed while the op ran. CPU traces: its
  launching thread's backward ops (general_comm); GPU traces: the union of its
  compute kernels inside the kernel's span.
* `resumed` (GPU): a compute kernel started within RESUME_TOL_US of the op's
  end, as a stream waiting on the collective's event does.
* `lead` (GPU): how long before its start the kernel's inputs were ready: the
  latest end of the compute kernels launched on the CPU before it (a stream runs
  its kernels in launch order, and the collective waits for the gradients they
  made), or its own launch if later; unknown (0) unless every compute
  kernel's launch is in the trace.

* posted (CPU): a send/recv matched with its peer whose span holds the start
  of the rank's next op (the program issued more work while it ran: a helper
  thread posted it ahead, as a pipeline engine's isend/irecv), or that is
  async by `beside`. One rank's overlap is proof for the same work on every
  rank (one program posted it; a peer's op may just have ended sooner). The
  chain goes on from its start, and the first later op that starts after its
  end waits for it (`wait_k`, the latest such position over the same work):
  the program needs a P2P op's data, or its buffer, before its next op, not
  only at the step's end. Where that op's gap began before the posted op
  ended and the rank computed through it (its backward ops cover ASYNC_BUSY
  of the gap up to that end), the gap's work did not need the data (a
  pipeline's stage runs a microbatch's backward while the next microbatch's
  activations arrive): the op after it waits instead. Made the waiter, the
  gap's compute would start only when the peer's data arrived, and the
  peer's work would lie on the rank's critical path.

Decisions pool the evidence over the ops doing the same work (same role, step,
position k and chain length, as the ideal does; where ranks hold other kinds
there, the ops stay waited for), because the same work is
waited for or not by the program, not by one rank's timing, and the ideal
averages gaps that must be measured alike on every rank: a victim's short op
and its peers' long wait for it are one collective. Async: the pooled share of
the ops' spans computed beside them is over ASYNC_BUSY, or (GPU) the compute
did not go on as they ended. Serial (GPU): the kernel started as its rank's
previous collective of the step ended, after its inputs were ready: it queued
on the in-order NCCL stream, and its gap ends at its ready time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.trace.op_model import P2P_KINDS, STEP_END

ASYNC_BUSY = 0.5
"""Share of the ops' spans the rank must spend computing for the work to be async: a rank
that waits for its op computes ~0 of it, one that goes on ~all of it."""
RESUME_TOL_US = 20.0
"""A compute kernel that starts within this of a collective kernel's end waited for it
(µs: a stream waiting on an event starts a few µs after it fires)."""
QUEUED_TOL_US = 2.0
"""A kernel that starts within this of its rank's previous collective's end queued behind
it (µs; Kineto writes GPU times to the ns)."""


def busy_union(kernels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Union busy time of [start, end) kernel intervals (kernels[:, 0:2]) inside each
    window [a, b]; NaN for every window when there are no kernels."""
    if not len(kernels):
        return np.full(a.size, np.nan)
    k = kernels[np.argsort(kernels[:, 0], kind="stable")]
    s, e = k[:, 0], np.maximum.accumulate(k[:, 1])
    new = np.r_[True, s[1:] > e[:-1]]  # a new merged interval starts
    idx = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(ms.size)
    np.maximum.at(me, idx, e)
    cum = np.r_[0.0, np.cumsum(me - ms)]

    def upto(t):
        i = np.searchsorted(ms, t, side="right")
        j = np.maximum(i - 1, 0)
        inside = np.where(i > 0, np.clip(t - ms[j], 0, me[j] - ms[j]), 0.0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + inside
    return np.maximum(upto(b) - upto(np.minimum(a, b)), 0.0)


def gpu_evidence(f: pd.DataFrame, kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """(lead, beside, resumed) of each NCCL kernel of one rank's comm frame (µs, the rank's
    own clock; see the module doc)."""
    start, end = f["start"].to_numpy(float), f["end"].to_numpy(float)
    launch = f["cpu_ts"].to_numpy(float)
    if not len(kernels):  # no compute traced: no evidence either way (waited for, as before)
        return np.zeros(start.size), np.full(start.size, np.nan), np.zeros(start.size, bool)
    beside = busy_union(kernels, start, end)
    k_start = np.sort(kernels[:, 0])
    j = np.minimum(np.searchsorted(k_start, end - RESUME_TOL_US, side="left"),
                   k_start.size - 1)
    resumed = np.abs(k_start[j] - end) <= RESUME_TOL_US
    # When its inputs were ready is known only where every compute kernel's launch is: with
    # one missing (a sampled file, lost correlations) the kernel that made them may be the
    # missing one, and the CPU launch, far ahead of the GPU, is no stand-in.
    ready = start.copy()
    if np.isfinite(kernels[:, 2]).all():
        order = np.argsort(kernels[:, 2], kind="stable")
        at, done = kernels[order, 2], np.maximum.accumulate(kernels[order, 1])
        i = np.searchsorted(at, launch, side="left") - 1
        ready = np.where(i >= 0, np.maximum(done[np.maximum(i, 0)], launch), start)
    return np.clip(start - ready, 0.0, None), beside, resumed


def decide_async(ops: pd.DataFrame, use_gpu: bool) -> tuple[np.ndarray, np.ndarray,
                                                             np.ndarray]:
    """(async, serial, ready) per row of the importer's table (sorted by rank, step, k;
    µs columns start, end and, where read, beside, resumed, lead; see the module doc)."""
    n = len(ops)
    start, end = ops["start"].to_numpy(float), ops["end"].to_numpy(float)
    comm = (ops["kind"] != STEP_END).to_numpy()
    beside = ops["beside"].to_numpy(float) if "beside" in ops else np.full(n, np.nan)
    known = comm & np.isfinite(beside)
    if not known.any():
        return np.zeros(n, bool), np.zeros(n, bool), start
    work = _work(ops)
    span = np.where(known, np.maximum(end - start, 0.0), 0.0)
    pooled = pd.DataFrame({"beside": np.where(known, beside, 0.0), "span": span,
                           "known": known, "kind": ops["kind"].to_numpy()}).groupby(work)
    share = (pooled["beside"].transform("sum")
             / pooled["span"].transform("sum").replace(0.0, np.nan)).to_numpy(float)
    # Ranks whose chains hold other kinds at this position (a sampled trace, an order that
    # differs) did not do one work here: their gaps stay measured from each op's end.
    alike = (pooled["kind"].transform("nunique") == 1).to_numpy(bool)
    evidence = comm & alike & pooled["known"].transform("any").to_numpy(bool)
    asynchronous = evidence & (share > ASYNC_BUSY)
    if not use_gpu:
        return asynchronous, np.zeros(n, bool), start
    resumed = ops["resumed"].fillna(False).to_numpy(bool) if "resumed" in ops else \
        np.zeros(n, bool)
    went_on = pd.Series(resumed.astype(float)).groupby(work).transform("mean").to_numpy()
    asynchronous |= evidence & (went_on < 0.5)
    lead = ops["lead"].fillna(0.0).to_numpy(float) if "lead" in ops else np.zeros(n)
    prev_end = ops.groupby(["rank", "step"], sort=False)["end"].shift(1).to_numpy(float)
    serial = comm & (lead > QUEUED_TOL_US) & (np.abs(start - prev_end) <= QUEUED_TOL_US)
    return asynchronous, serial, np.where(serial, start - lead, start)


def _work(ops: pd.DataFrame) -> list:
    """The keys of "the same work": role, step, position k and chain length."""
    length = ops.groupby(["rank", "step"])["k"].transform("size")
    return [ops["role"], ops["step"], ops["k"], length]


def posted_ahead(ops: pd.DataFrame, asynchronous: np.ndarray,
                 activity: dict[int, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(posted, wait_k) per row of the importer's table (sorted by rank, step, k; µs
    columns start, end; `asynchronous` from decide_async): the P2P rows posted ahead or
    async, and the position of the row that waits for each (see the module doc); wait_k
    is -1 where a row is not posted. `activity`: per rank, (n, 2) start and end (µs, the
    table's clock) of its backward ops, the evidence that a gap computed through a posted
    op's end (none: the first op starting after the end waits)."""
    n = len(ops)
    start, end = ops["start"].to_numpy(float), ops["end"].to_numpy(float)
    kind = ops["kind"].to_numpy()
    # Only a P2P op matched with its peer: its end then comes from its pair. A local one
    # (no traced peer) has its traced span alone, waits included, and keeps that reading.
    p2p = np.isin(kind, list(P2P_KINDS)) & (ops["group"].to_numpy() >= 0)
    chain, _ = pd.factorize(pd.MultiIndex.from_arrays([ops["rank"], ops["step"]]))
    same = np.r_[chain[1:] == chain[:-1], False]
    nxt = np.r_[start[1:], np.inf]
    overlap = p2p & same & (np.append(kind[1:], STEP_END) != STEP_END) & (nxt < end)
    posted = p2p & asynchronous
    work = _work(ops)
    if overlap.any():
        pooled = pd.DataFrame({"o": overlap.astype(float), "kind": kind}).groupby(work)
        alike = (pooled["kind"].transform("nunique") == 1).to_numpy(bool)
        posted |= p2p & alike & pooled["o"].transform("max").to_numpy(bool)
    if not posted.any():
        return posted, np.full(n, -1, dtype=np.int64)
    # The first later row of the chain starting at or after the row's end: rows are in
    # start order within a chain (the step-end row last, at the step's end), so one
    # search over (chain, start from the chain's first) finds it for every row at once.
    first = pd.Series(start).groupby(chain).transform("min").to_numpy(float)
    span = float(np.nanmax(np.r_[end, start] - np.r_[first, first])) + 1.0
    key = chain * span + (start - first)
    j = np.searchsorted(key, chain * span + (end - first), side="left")
    j = np.maximum(j, np.arange(n) + 1)
    last = np.flatnonzero(~same)  # each chain's last row (its step end)
    j = np.minimum(j, last[chain])
    if activity:
        j = _computed_through(ops, posted, j, last[chain], np.where(asynchronous | posted,
                                                                    start, end), activity)
    k = ops["k"].to_numpy(np.int64)
    # The same work waits at one position, the latest any of its ranks shows: a rank whose
    # op was still running when an op began did not need it before that op (one program),
    # and the ideal averages gaps that must be measured alike on every rank.
    wait = pd.Series(np.where(posted, k[j], -1), index=ops.index).groupby(
        work).transform("max")
    return posted, np.where(posted, wait.to_numpy(np.int64), -1)


def _computed_through(ops: pd.DataFrame, posted: np.ndarray, j: np.ndarray, last: np.ndarray,
                      point: np.ndarray, activity: dict[int, np.ndarray]) -> np.ndarray:
    """`j` (each row's first later row starting after its end) moved one row on for the
    posted rows whose waiter's gap began before their end and computed through it: the
    rank's backward ops cover ASYNC_BUSY of [gap start, end] (see the module doc)."""
    end = ops["end"].to_numpy(float)
    rank = ops["rank"].to_numpy()
    cand = np.flatnonzero(posted & (j < last))
    gap_start = point[j[cand] - 1]  # where the waiter's gap began: its predecessor's point
    cand, gap_start = cand[gap_start < end[cand]], gap_start[gap_start < end[cand]]
    if not cand.size:
        return j
    busy = np.zeros(cand.size)
    for r in np.unique(rank[cand]).tolist():
        a = activity.get(int(r))
        if a is None or not len(a):
            continue
        m = rank[cand] == r
        busy[m] = busy_union(a, gap_start[m], end[cand[m]])
    through = busy >= ASYNC_BUSY * (end[cand] - gap_start)
    out = j.copy()
    out[cand[through]] = np.minimum(j[cand[through]] + 1, last[cand[through]])
    return out
