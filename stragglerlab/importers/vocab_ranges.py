"""A rank's Megatron-vocabulary ranges (stragglerlab.importers.kineto): nesting, and ops
from torch's communication records for op types no range names.

    ops = outermost(ranges)                      # ranges nested in another are dropped
    ops += comm_fallback(comm, missing, rank, layout_hint, inside_ranges(ops))
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

from stragglerlab.trace.schema import P2P_OPS, OpType

P2P_NAMES = frozenset(o.value for o in P2P_OPS)


def outermost(ranges: list[tuple]) -> list[tuple]:
    """Drop ranges nested in another vocabulary range on the same thread (see module doc)."""
    kept = []
    by_thread: dict[tuple[int, bool], list] = {}
    for r in sorted(ranges, key=lambda r: (r[1], -r[2])):
        by_thread.setdefault((r[3], r[0] in P2P_NAMES), []).append(r)
    for (_tid, p2p), rs in by_thread.items():
        open_ends: dict[str, float] = {}  # per optype for P2P, one key for the rest
        for r in rs:
            key = r[0] if p2p else ""
            if r[2] <= open_ends.get(key, -np.inf):
                continue
            open_ends[key] = r[2]
            kept.append(r)
    return sorted(kept, key=lambda r: r[1])


def inside_ranges(ops: list[tuple]) -> Callable[[float, object], bool]:
    """f(ts, tid): whether ts falls inside one of ops' CPU ranges on thread tid."""
    per_tid: dict = {}
    for o in sorted(ops, key=lambda o: o[1]):
        per_tid.setdefault(o[3], ([], []))
        starts, ends = per_tid[o[3]]
        starts.append(o[1])
        ends.append(max(o[2], ends[-1]) if ends else o[2])  # running max of the ends

    def inside(ts: float, tid) -> bool:
        starts, ends = per_tid.get(tid, ((), ()))
        i = bisect.bisect_right(starts, ts) - 1
        return i >= 0 and ends[i] >= ts
    return inside


def comm_fallback(events: list, missing: set[str], rank: int, layout_hint,
                   inside) -> list:
    """Vocabulary ops from torch's communication records, for op types with no range.

    Records inside a vocabulary range are that op's own communication: skipped."""
    out = []
    for e in events:
        args = e.get("args") or {}
        if inside(float(e["ts"]), e.get("tid", 0)):
            continue
        name = str(args.get("Collective name", "")).lower()
        if not name:
            continue
        optype = None
        if name in ("send", "recv", "isend", "irecv") and layout_hint is not None:
            peer = args.get("Dst Rank" if "send" in name else "Src Rank")
            if isinstance(peer, int) and peer >= 0:
                mine, theirs = layout_hint(rank)[1], layout_hint(peer)[1]
                fwd = theirs > mine if "send" in name else theirs < mine
                kind = "send" if "send" in name else "recv"
                optype = f"{'forward' if fwd else 'backward'}-{kind}"
        elif "gather" in name:
            optype = OpType.PARAMS_ALL_GATHER.value
        elif "reduce_scatter" in name:
            optype = OpType.GRADS_REDUCE_SCATTER.value
        elif "allreduce" in name or "all_reduce" in name:
            size = args.get("Group size", len(args.get("Process Group Ranks") or []))
            world = args.get("World size")
            optype = (OpType.OPTIMIZER_CLIP_MAIN_GRAD.value if world and size == world
                      else OpType.SEPARATE_GRADS_ALL_REDUCE.value)
        if optype in missing:
            out.append((optype, float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                        e.get("tid", 0)))
    return out


def foreign_gpu_spans(ops: list[tuple], step_tid, launches: tuple, gpu_ops: tuple
                      ) -> dict[int, tuple[float, float]]:
    """Index into ops -> (first start, last end) on the GPU of the work that threads with no
    vocabulary range open launched while that op's range was open on the step's thread.

    Kineto's `gpu_user_annotation` span of a range covers only what the range's own thread
    launched. A backward pass's kernels are launched by autograd's device thread, so the
    span of a `backward-compute` range around `loss.backward()` holds none of them (a few
    microseconds against tens of milliseconds of kernels). Such a launch belongs to the
    range open on the thread that runs the step (the ProfilerStep's), where one is open.
    `launches` = (correlation ids, starts, tids), `gpu_ops` = (correlation ids, starts,
    ends): VocabRanges' arrays.
    """
    l_corr, l_ts = np.asarray(launches[0]), np.asarray(launches[1])
    g_corr, g_start, g_end = (np.asarray(a) for a in gpu_ops)
    host = [(i, o) for i, o in enumerate(ops) if o[3] == step_tid and o[0] not in P2P_NAMES]
    if not len(l_corr) or not len(g_corr) or not host:
        return {}
    tids = np.asarray(launches[2], dtype=object)
    foreign = np.zeros(len(l_ts), bool)
    by_tid: dict = {}
    for o in ops:
        if o[0] not in P2P_NAMES:
            by_tid.setdefault(o[3], []).append((o[1], o[2]))
    for t in set(launches[2]) - {step_tid}:
        on = tids == t
        if t not in by_tid:
            foreign |= on
            continue
        rs = sorted(by_tid[t])
        s0 = np.array([r[0] for r in rs])
        e0 = np.maximum.accumulate(np.array([r[1] for r in rs]))
        j = np.searchsorted(s0, l_ts[on], side="right") - 1
        foreign[np.flatnonzero(on)[(j < 0) | (e0[np.maximum(j, 0)] < l_ts[on])]] = True
    starts = np.array([o[1] for _, o in host])
    ends = np.maximum.accumulate(np.array([o[2] for _, o in host]))
    ts, corr = l_ts[foreign], l_corr[foreign]
    at = np.searchsorted(starts, ts, side="right") - 1
    inside = (at >= 0) & (ends[np.maximum(at, 0)] >= ts)
    at, corr = at[inside], corr[inside]
    # Each correlation id's first start and last end on the GPU (a graph launch: many).
    order = np.argsort(g_corr, kind="stable")
    uc, first = np.unique(g_corr[order], return_index=True)
    g_lo = np.minimum.reduceat(g_start[order], first)
    g_hi = np.maximum.reduceat(g_end[order], first)
    u = np.searchsorted(uc, corr)
    hit = (u < len(uc)) & (uc[np.minimum(u, len(uc) - 1)] == corr)
    at, u = at[hit], u[hit]  # calls that put nothing on the GPU (syncs, records) drop
    lo = np.full(len(host), np.inf)
    hi = np.full(len(host), -np.inf)
    np.minimum.at(lo, at, g_lo[u])
    np.maximum.at(hi, at, g_hi[u])
    return {host[k][0]: (float(lo[k]), float(hi[k])) for k in np.flatnonzero(np.isfinite(hi))}
