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
