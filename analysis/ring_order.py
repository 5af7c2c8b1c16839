"""The order of a DP ring: where a slow link's transfer time lands in a ring collective.

The gradient reduce-scatter and the parameter all-gather pass chunks around the DP ranks
in order (gloo's ring, the backend on CPU), so a rank v throttled both ways holds back the
chunks it forwards: in the reduce-scatter the rank before it (v - 1) leaves the collective
late and the rank after it (v + 1) early; in the all-gather the other way round. Per step,
with each rank's transfer excess X[r] (its transfer duration - the step's median over
ranks, design.md section 4), rank v's score is

    RS[v - 1] - RS[v + 1] + AG[v + 1] - AG[v - 1]     (ranks mod dp)

as a share of the step. Pure numpy/pandas over a trace; read by the `whatif` detector's
ring rule (`detectors/whatif_ring.py`) and by the evidence over time
(`over_time.link_times`), one definition for both.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from stragglerlab.method.grouped import group_sum, optype_mask, row_codes

REDUCE_SCATTER = "grads-reduce-scatter"
ALL_GATHER = "params-all-gather"
MIN_RING = 3
"""DP ranks a ring needs for its two neighbours of a rank to differ."""


def transfer_by_rank(trace: pd.DataFrame, optype: str, dp: int,
                     steps: np.ndarray) -> np.ndarray | None:
    """[step, dp_rank]: each rank's transfer duration of `optype` (its end minus the latest
    start in the step's group, clamped at 0), s; NaN where a rank has no such op, None when
    the trace has none."""
    ops = trace[(trace["optype"] == optype) & trace["step"].isin(steps)
                & trace["dp_rank"].between(0, dp - 1)]
    if ops.empty:
        return None
    end = ops["start_ts"] + ops["duration"]
    latest = ops.groupby("step")["start_ts"].transform("max")
    transfer = (end - latest).clip(lower=0.0)
    per = transfer.groupby([ops["step"], ops["dp_rank"]]).sum()
    grid = np.full((len(steps), dp), np.nan)
    grid[np.searchsorted(steps, per.index.get_level_values(0)),
         per.index.get_level_values(1)] = per.to_numpy()
    return grid


def stage_transfers(trace: pd.DataFrame, optype: str, dp: int,
                    steps: np.ndarray) -> dict[int, np.ndarray | None]:
    """`transfer_by_rank` of each stage's ops ({stage: grid or None}, the stages of the
    trace), in one pass over the trace's arrays: the same numbers (the step's latest start
    by max, the clamp, each rank's sum as pandas' groupby sum adds it, grouped.group_sum),
    without splitting the frame by stage and grouping it per stage (at 1,024 workers the
    ring rule's cost in the live monitor's window)."""
    stage = trace["stage"].to_numpy()
    step, dp_rank = trace["step"].to_numpy(), trace["dp_rank"].to_numpy()
    rows = np.flatnonzero(optype_mask(trace["optype"], [optype]) & np.isin(step, steps)
                          & (dp_rank >= 0) & (dp_rank <= dp - 1))
    start = trace["start_ts"].to_numpy()[rows]
    end = start + trace["duration"].to_numpy()[rows]
    step_i, dp_rank, stage_of = np.searchsorted(steps, step[rows]), dp_rank[rows], stage[rows]
    out: dict[int, np.ndarray | None] = {}
    for s in np.unique(stage).tolist():
        at = np.flatnonzero(stage_of == s)  # the stage's ops, in the trace's row order
        if not len(at):
            out[s] = None
            continue
        si, d = step_i[at], dp_rank[at]
        latest = np.full(len(steps), -np.inf)
        np.maximum.at(latest, si, start[at])
        transfer = end[at] - latest[si]
        transfer = np.where(np.isnan(transfer) | (transfer >= 0.0), transfer, 0.0)  # clip
        code, n = row_codes([si, d])
        first = np.zeros(n, dtype=np.int64)
        first[code[::-1]] = np.arange(len(code))[::-1]
        grid = np.full((len(steps), dp), np.nan)
        grid[si[first], d[first]] = group_sum(code, transfer, n)
        out[s] = grid
    return out


def transfer_excess(trace: pd.DataFrame, optype: str, dp: int,
                    steps: np.ndarray) -> np.ndarray | None:
    """[step, dp_rank]: `transfer_by_rank` minus the step's median over ranks, s (0 where
    a rank has no such op); None when the trace has none."""
    return excess_grid(transfer_by_rank(trace, optype, dp, steps))


def excess_grid(grid: np.ndarray | None) -> np.ndarray | None:
    """`transfer_excess` of a `transfer_by_rank` grid."""
    if grid is None:
        return None
    with warnings.catch_warnings():  # a step no rank finished (a failed run) stays NaN -> 0
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nan_to_num(grid - np.nanmedian(grid, axis=1, keepdims=True))


def ring_scores(trace: pd.DataFrame, dp: int, steps: np.ndarray,
                step_s: float) -> np.ndarray | None:
    """[step, candidate rank]: the signed neighbour excess of the module docstring as a
    share of `step_s` (the mean step, s); None without both collectives or with fewer than
    3 DP ranks. `trace` holds one ring: one stage's ops."""
    if dp < MIN_RING:
        return None
    rs = transfer_excess(trace, REDUCE_SCATTER, dp, steps)
    ag = transfer_excess(trace, ALL_GATHER, dp, steps)
    return neighbour_scores(rs, ag, dp, lambda: step_s)


def neighbour_scores(rs: np.ndarray | None, ag: np.ndarray | None, dp: int,
                     step_s) -> np.ndarray | None:
    """`ring_scores` from the two collectives' excess grids (`excess_grid`); step_s: the
    mean step, s, called only where both grids are there."""
    if rs is None or ag is None:
        return None
    v = np.arange(dp)
    before, after = (v - 1) % dp, (v + 1) % dp
    score = rs[:, before] - rs[:, after] + ag[:, after] - ag[:, before]
    return score / max(step_s(), 1e-12)


def ring_transfer(rs: np.ndarray, ag: np.ndarray) -> np.ndarray:
    """Per step, the ring's transfer time: the median rank's reduce-scatter plus all-gather
    transfer (`transfer_by_rank` grids), s."""
    with warnings.catch_warnings():  # a step no rank finished stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(rs + ag, axis=1)
