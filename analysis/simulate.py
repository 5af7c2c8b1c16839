"""Discrete-event replay of a step over the dependency graph (design.md §4.3).

In topological order of groups: an op starts at the latest end of its
dependencies (plus its launch delay when given); a compute-like op ends at
start + duration; the members of a comm group end at the group's latest start
plus their own transfer duration (taken across the last axis too when the
group is DP-synchronized).

A simulated step ends at the latest optimizer end (design.md §4.3), not at the
latest end of any op: a pipeline send that completes after the optimizer (its
receiver was held up, e.g. by a GC pause, and nothing waits for the send)
does not lengthen the step. Traces without an optimizer op end at the latest
end of any op. This is the artifact's rule: with "latest end of any op" the
gc-pauses differential trace's stage-0 attribution at step 26 is 1.1409
instead of the artifact's 0.9286 (tests/data/trailing_send_*).

Arrays are [n_nodes, batch, lanes]: `batch` is any flattening of (variant,
step), `lanes` the DP ranks (or a reduced set of DP ranks that behave alike).

    step_times = simulate(graph, value).step_time
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglerlab.analysis.graph import DepGraph

# Elements per array chunk: bounds memory of the [n_nodes, batch, lanes] working set.
CHUNK_ELEMENTS = 2_000_000


@dataclass
class SimResult:
    """Simulated op times relative to the step start."""

    start: np.ndarray | None
    """Simulated start per op, [n_nodes, batch, lanes] (None when not kept)."""
    end: np.ndarray | None
    """Simulated end per op (None when not kept)."""
    step_time: np.ndarray
    """Latest optimizer end minus earliest start over nodes and lanes, [batch]."""


@dataclass(frozen=True)
class Mixed:
    """Replay values that take `where`'s ops from `masked` and the rest from `other`,
    picked node by node as the replay reaches them: the whole [n_nodes, batch, lanes]
    mix is never built (at DP 4,096 it is 111 MB per replay, and the what-if runs
    dozens), and a node whose lanes all take one side is that side's own values."""

    where: np.ndarray
    """Which ops take `masked`'s values, broadcastable to [n_nodes, 1, lanes]."""
    masked: np.ndarray
    """Values of the masked ops, broadcastable to [n_nodes, batch, lanes]."""
    other: np.ndarray
    """Values of the other ops, broadcastable to [n_nodes, batch, lanes]."""
    shape: tuple[int, int, int]
    """[n_nodes, batch, lanes] of the mix."""

    def nodes(self, lo: int, hi: int) -> list[np.ndarray]:
        """Each node's values for batch elements lo..hi (broadcastable to [hi - lo, lanes])."""
        where = np.broadcast_to(self.where, (self.shape[0], 1, self.where.shape[2]))
        every, none = where.all(axis=(1, 2)), ~where.any(axis=(1, 2))
        masked, other = _batch(self.masked, lo, hi), _batch(self.other, lo, hi)
        return [masked[m] if every[m] else other[m] if none[m]
                else np.where(where[m], masked[m], other[m]) for m in range(self.shape[0])]


def _batch(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return a if a.shape[1] == 1 else a[:, lo:hi]


def simulate(
    graph: DepGraph,
    value: np.ndarray | Mixed,
    delay: np.ndarray | None = None,
    keep_times: bool = False,
) -> SimResult:
    """Replay the graph; value is the duration (compute) or transfer duration (comm) per op.

    Batches larger than CHUNK_ELEMENTS are simulated in chunks, so memory stays
    bounded however many steps, ranks and variants are stacked; the chunks share one
    start/end workspace (fresh pages for every chunk cost more than the replay). Pass
    keep_times=True to get every op's start and end back (no chunking then).
    """
    n_nodes, batch, lanes = value.shape
    per_batch = max(1, n_nodes * lanes)
    chunk = batch if keep_times else max(1, CHUNK_ELEMENTS // per_batch)
    chunk = min(chunk, batch)
    work = np.empty((2, n_nodes * chunk * lanes))
    plan = _plan(graph)
    times = []
    for lo in range(0, batch, chunk):
        hi = min(batch, lo + chunk)
        shape = (n_nodes, hi - lo, lanes)
        size = n_nodes * (hi - lo) * lanes
        start, end = (w[:size].reshape(shape) for w in work)
        v = value.nodes(lo, hi) if isinstance(value, Mixed) else value[:, lo:hi]
        d = None if delay is None else delay[:, lo:hi]
        times.append(_simulate_block(graph, plan, v, d, start, end))
    step_time = times[0] if len(times) == 1 else np.concatenate(times)
    if keep_times:
        return SimResult(start, end, step_time)
    return SimResult(None, None, step_time)


def _plan(graph: DepGraph) -> list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...], bool, bool]]:
    """The groups in topological order as plain ints: (members, each member's deps,
    is_comm, dp_sync), so the replay's loop indexes rows without numpy scalars."""
    return [(tuple(int(m) for m in g.members),
             tuple(tuple(int(d) for d in graph.deps[m]) for m in g.members),
             bool(g.is_comm), bool(g.dp_sync))
            for g in (graph.groups[gi] for gi in graph.order)]


def _latest(rows: np.ndarray, nodes: tuple[int, ...], out: np.ndarray) -> np.ndarray:
    """Elementwise max of rows[nodes] into `out` (no gathered copy; max is exact)."""
    np.maximum(rows[nodes[0]], rows[nodes[1]], out=out)
    for k in nodes[2:]:
        np.maximum(out, rows[k], out=out)
    return out


SHORT_LANES = 8
"""Lanes up to which a reduction over them runs as elementwise ufunc calls (`over_lanes`)."""


def over_lanes(ufunc: np.ufunc, a: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """`ufunc.reduce(a, axis=-1)` (np.maximum or np.minimum: exact in any order). Over a few
    lanes and a long batch numpy's reduce pays a per-row cost: at 2 lanes and 8,192 rows it
    is 50x slower than one elementwise call per lane."""
    if a.shape[-1] > SHORT_LANES or a.shape[-1] == 0:
        return ufunc.reduce(a, axis=-1, keepdims=keepdims)
    out = a[..., 0].copy()
    for k in range(1, a.shape[-1]):
        ufunc(out, a[..., k], out=out)
    return out[..., None] if keepdims else out


def first_start(start: np.ndarray) -> np.ndarray:
    """Each step's first start over a [node, step, lane] array of starts: the minimum over
    the nodes, then over the lanes (a minimum over axes (0, 2) at once strides over the
    lanes: 30 ms against 1.1 ms on 106 nodes x 8,192 x 2 lanes)."""
    return over_lanes(np.minimum, start.min(axis=0))


def _simulate_block(graph, plan, value, delay, start, end) -> np.ndarray:
    """Replay one chunk into `start`/`end` (every node written) by `plan` (_plan(graph)); its
    step times. `value[m]` is node m's values, broadcastable to [batch, lanes]."""
    scratch = np.empty(start.shape[1:])
    for members, member_deps, is_comm, dp_sync in plan:
        for m, d in zip(members, member_deps):
            if len(d) == 1:
                start[m] = end[d[0]]
            elif len(d) > 1:
                _latest(end, d, start[m])
            else:
                start[m] = 0.0
            if delay is not None:
                start[m] += delay[m]
        if not is_comm:
            for m in members:
                np.add(start[m], value[m], out=end[m])
            continue
        latest = start[members[0]] if len(members) == 1 else _latest(start, members, scratch)
        if dp_sync:
            latest = over_lanes(np.maximum, latest, keepdims=True)
        for m in members:
            np.add(latest, value[m], out=end[m])
    # The step's last end, node by node (no gathered copy of the end nodes; max is exact).
    last, at = None, graph.step_end_nodes
    for n in (at if len(at) else range(len(end))):
        node_last = over_lanes(np.maximum, end[n])
        last = node_last if last is None else np.maximum(last, node_last, out=last)
    # min over (nodes, lanes) as two passes: numpy's one multi-axis pass strides over
    # the lanes (27x slower with 2 lanes and a long batch); min is exact either way.
    return last - first_start(start)
