"""Trace rows as dense arrays over (node, step, DP rank), with transfer durations and launch delays.

Every (step, DP rank) holds the same ops as the graph's template (design.md
Appendix A), so the trace becomes arrays shaped [n_nodes, n_steps, dp_size] and
every later computation is vectorized over steps and DP ranks at once.

    frame = build_frame(df, graph, meta, where="trace.parquet")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.analysis.graph import DepGraph
from stragglerlab.analysis.simulate import first_start
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES
from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.trace.validate import dense_ids
from stragglerlab.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

# Negative transfer durations / launch delays at or below this become 0 (artifact convention).
NEGATIVE_CUTOFF_S = -0.01


@dataclass
class OpFrame:
    """The traced job as arrays; times in seconds, relative to each step's earliest start."""

    steps: np.ndarray
    """Step numbers, ascending, [n_steps]."""
    start: np.ndarray
    """Traced start per op, [n_nodes, n_steps, dp_size]."""
    duration: np.ndarray
    """Traced duration per op, [n_nodes, n_steps, dp_size]."""
    transfer: np.ndarray
    """Transfer duration (comm ops: end minus the group's latest start; other ops: their
    traced duration): the value the simulator replays (sim_value)."""
    launch_delay: np.ndarray
    """Start minus the latest end of the op's dependencies (or the step start)."""
    worker_rank: np.ndarray
    """Global rank of the traced worker per cell, [pp_size, dp_size]."""

    @property
    def end(self) -> np.ndarray:
        """Traced end per op."""
        return self.start + self.duration

    def step_span(self) -> np.ndarray:
        """Each step's traced time, first start to last end over the job, [n_steps], s.
        Ends are formed node by node: no frame-sized array of them."""
        last_end = np.full(len(self.steps), -np.inf)
        for start, duration in zip(self.start, self.duration):
            np.maximum(last_end, (start + duration).max(axis=1), out=last_end)
        return last_end - first_start(self.start)

    def sim_value(self, graph: DepGraph) -> np.ndarray:
        """The per-op quantity the simulator consumes: transfer for comm ops, else duration.
        That is `transfer` itself, returned read-only (a frame-sized array, not copied):
        copy it to edit. `graph` is the graph the frame was built on."""
        value = self.transfer.view()
        value.flags.writeable = False
        return value


def comm_mask(graph: DepGraph) -> np.ndarray:
    """Per node: True when it belongs to a comm group."""
    mask = np.zeros(graph.n_nodes, dtype=bool)
    for g in graph.groups:
        if g.is_comm:
            mask[list(g.members)] = True
    return mask


def build_frame(df: pd.DataFrame | TraceTable, graph: DepGraph, meta: JobMeta,
                where: str) -> OpFrame:
    """Scatter trace rows into [node, step, dp] arrays and derive transfers and delays."""
    df = TraceTable.of(df)
    n_nodes, dp = graph.n_nodes, meta.dp_size
    steps, flat = row_slots(df, graph, meta, where)
    size = n_nodes * len(steps) * dp
    # As many rows as slots, every slot hit: each exactly once (the counts only on error).
    filled = np.zeros(size, dtype=bool)
    filled[flat] = True
    if len(flat) != size or not filled.all():
        _report_fill_error(np.bincount(flat, minlength=size), graph, steps, dp, where)
    del filled
    # The columns as stored (float32 stays float32 until here), widened exactly block by
    # block as they scatter; the index columns as stored: no row-length int64 or float64
    # copies.
    start = np.empty(size)
    duration = np.empty(size)
    _scatter_f64(start, flat, df["start_ts"])
    _scatter_f64(duration, flat, df["duration"])
    shape = (n_nodes, len(steps), dp)
    start, duration = start.reshape(shape), duration.reshape(shape)

    worker_rank = np.zeros((meta.pp_size, dp), dtype=np.int64)
    # Every row of a (stage, dp_rank) cell carries the same rank: one scatter, no groupby.
    worker_rank[_ints(df["stage"]), _ints(df["dp_rank"])] = _ints(df["rank"])

    transfer = _transfer_durations(graph, start, duration)
    delay = _launch_delays(graph, start, duration)
    return OpFrame(steps, start, duration, transfer, delay, worker_rank)


_SCATTER_ROWS = 1 << 20
"""Rows widened and scattered at a time by _scatter_f64 (an 8 MB float64 block)."""


def _scatter_f64(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """out[at] = values as float64 (exact), in blocks of _SCATTER_ROWS: a cast and a plain
    scatter are 2-5x faster than numpy's casting scatter, and a block's copy stays small."""
    for lo in range(0, len(at), _SCATTER_ROWS):
        hi = lo + _SCATTER_ROWS
        out[at[lo:hi]] = values[lo:hi].astype(np.float64, copy=False)


def row_slots(df: pd.DataFrame | TraceTable, graph: DepGraph, meta: JobMeta,
              where: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct steps, each row's flat index into the [node, step, dp] arrays):
    how rows scatter into an OpFrame, and how arrays of that shape map back onto rows."""
    df = TraceTable.of(df)
    step_idx, steps = dense_ids(_ints(df["step"]))
    flat = _node_of_rows(df, graph, where)  # int64 (its lookup table is): the flat index
    flat *= len(steps)
    flat += step_idx
    del step_idx
    flat *= meta.dp_size
    flat += _ints(df["dp_rank"])
    return steps, flat


def _ints(values: np.ndarray) -> np.ndarray:
    """An int column's values as stored when an integer dtype (read_trace may give int32),
    else as int64: for indexing and comparing, not for products (widen those)."""
    return values if values.dtype.kind == "i" else values.astype(np.int64)


def _node_of_rows(df: TraceTable, graph: DepGraph, where: str) -> np.ndarray:
    """Node index of every row via a dense (stage, optype, seq_id) lookup table."""
    code_of = {t: i for i, t in enumerate(OPTYPE_VALUES)}
    seq = _ints(df["seq_id"])
    n_seq = int(max(seq.max(initial=0), graph.seq_id.max(initial=0))) + 1
    stage = _ints(df["stage"])
    n_stage = int(max(stage.max(), graph.stage.max())) + 1
    lookup = np.full((n_stage, len(OPTYPE_VALUES), n_seq), -1, dtype=np.int64)
    g_codes = np.array([code_of[t] for t in graph.optype], dtype=np.int64)
    lookup[graph.stage, g_codes, graph.seq_id] = np.arange(graph.n_nodes)
    node = lookup[stage, df.optype, seq]
    if (node < 0).any():
        bad = [{c: _plain(df.value(c, i)) for c in ("step", "dp_rank", "stage", "optype",
                                                     "seq_id")}
               for i in np.flatnonzero(node < 0)[:3]]
        raise InputError(
            f"{where}: {int((node < 0).sum())} ops do not appear in the first step of DP rank "
            f"0, e.g. {bad}; every step and DP rank must run the same ops."
        )
    return node


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _report_fill_error(counts, graph, steps, dp, where) -> None:
    counts = counts.reshape(graph.n_nodes, len(steps), dp)
    n, s, d = np.argwhere(counts != 1)[0]
    what = "missing" if counts[n, s, d] == 0 else f"present {counts[n, s, d]} times"
    raise InputError(
        f"{where}: op ({graph.optype[n]}, seq_id {graph.seq_id[n]}, stage {graph.stage[n]}) "
        f"is {what} in step {steps[s]} on DP rank {d} ({int((counts != 1).sum())} such "
        "slots); every step and DP rank must hold each op exactly once."
    )


def _transfer_durations(graph: DepGraph, start: np.ndarray, duration: np.ndarray) -> np.ndarray:
    # Ends are formed group by group (start + duration, the same float64 sums as a whole
    # end array): no second frame-sized array beside the frame.
    transfer = duration.copy()
    for g in graph.groups:
        if not g.is_comm:
            continue
        members = list(g.members)
        first = start[members]
        latest = first.max(axis=0)
        if g.dp_sync:
            latest = latest.max(axis=-1, keepdims=True)
        first += duration[members]  # the members' ends
        first -= latest
        first[first <= NEGATIVE_CUTOFF_S] = 0.0
        transfer[members] = first
    return transfer


def _launch_delays(graph: DepGraph, start: np.ndarray, duration: np.ndarray) -> np.ndarray:
    step_start = first_start(start)[:, None]  # each step's earliest start
    delay = np.empty_like(start)
    for node, deps in enumerate(graph.deps):
        if len(deps):
            ready = start[deps]
            ready += duration[deps]  # the deps' ends, formed here (see _transfer_durations)
            ready = ready.max(axis=0)
        else:
            ready = step_start
        delay[node] = start[node] - ready
    delay[delay <= NEGATIVE_CUTOFF_S] = 0.0
    return delay
