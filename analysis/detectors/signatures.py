"""Evidence the `whatif` detector reads off a what-if analysis and its trace.

Each function is pure numpy over the analysis' arrays:

* `step_worker_scores`: the per-step worker score min(S_dp, S_stage) of every
  (stage, dp_rank) worker, [pp, dp, steps], and its ratio to the step's best
  worker (global slowdowns such as a busy host lift every worker; a
  straggler lifts one).
* `flagged_steps`: per worker, the steps its relative score crosses a threshold.
* `category_excess`: how much of the job's slowdown the what-if attributes to
  computation vs communication op types.
* `gc_pauses_by_rank`: measured GC pause time per rank (the trace's
  `gc_pause_s` column, written by the testbed's GC monitor).

    scores = step_worker_scores(result)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.frame import OpFrame, comm_mask
from stragglerlab.analysis.graph import DepGraph
from stragglerlab.analysis.steps import step_times
from stragglerlab.meta import JobMeta
from stragglerlab.results import WhatIfResult
from stragglerlab.schema import COMMUNICATION_OPS

_COMPUTE = ["forward-compute", "backward-compute"]
_COMM_BUCKETS = {t.value for t in COMMUNICATION_OPS} | {"forward-pp-comm", "backward-pp-comm"}


def step_worker_scores(result: WhatIfResult) -> np.ndarray:
    """Per-step worker score min(S_dp, S_stage), [pp, dp, steps]."""
    ideal = result.step_time_ideal.values
    s_dp = np.array([result.by_dp_rank[d].values for d in sorted(result.by_dp_rank)]) / ideal
    s_stage = np.array([result.by_stage[p].values for p in sorted(result.by_stage)]) / ideal
    return np.minimum(s_stage[:, None, :], s_dp[None, :, :])


def relative_scores(scores: np.ndarray) -> np.ndarray:
    """Each worker's per-step score over the step's best worker's, [pp, dp, steps]."""
    best = scores.min(axis=(0, 1), keepdims=True)
    return scores / np.maximum(best, 1e-12)


def flagged_steps(relative: np.ndarray, threshold: float) -> np.ndarray:
    """[pp, dp, steps] bool: the worker's relative score is at or above threshold."""
    return relative >= threshold


def compute_ratio_to_peers(trace: pd.DataFrame, meta: JobMeta,
                           steps: np.ndarray) -> np.ndarray | None:
    """Per step, each worker's compute time over the fastest DP peer of its stage, [pp, dp, steps].

    None without DP peers (dp_size 1). Compute = forward + backward durations.
    """
    if meta.dp_size < 2:
        return None
    compute = trace[trace["optype"].isin(_COMPUTE)]
    per_cell = compute.groupby(["stage", "dp_rank", "step"])["duration"].sum()
    grid = np.full((meta.pp_size, meta.dp_size, len(steps)), np.nan)
    stage, dp_rank, step = (per_cell.index.get_level_values(k).to_numpy()
                            for k in ("stage", "dp_rank", "step"))
    grid[stage, dp_rank, np.searchsorted(steps, step)] = per_cell.to_numpy()
    best = np.nanmin(grid, axis=1, keepdims=True)
    return np.nan_to_num(grid / np.maximum(best, 1e-12), nan=1.0)


def comm_excess_by_worker(graph: DepGraph, frame: OpFrame, window: slice) -> np.ndarray:
    """Per worker, summed transfer time over its op type's median, in its comm ops, [pp, dp], s.

    A slow link slows every group its rank is in (its P2P pairs, its stage's DP
    collectives, the embedding and clip all-reduces), so its rank collects the
    most excess; a peer shares only some of those groups.
    """
    comm = comm_mask(graph) & ~(graph.noop if graph.noop is not None else False)
    transfer = frame.transfer[:, window, :]
    excess = np.zeros((int(graph.stage.max()) + 1, transfer.shape[2]))
    for optype in np.unique(graph.optype[comm]):
        nodes = np.flatnonzero(comm & (graph.optype == optype))
        values = transfer[nodes]  # [nodes, steps, dp]
        over = np.clip(values - np.median(values), 0.0, None).sum(axis=1)  # [nodes, dp]
        np.add.at(excess, graph.stage[nodes], over)
    return excess


def category_excess(result: WhatIfResult) -> tuple[float, float]:
    """(compute, communication): summed S_t - 1 over op types of each category (>= 0 each)."""
    by_type = result.slowdown_by(result.by_optype)
    comm = sum(max(s - 1.0, 0.0) for t, s in by_type.items() if t in _COMM_BUCKETS)
    compute = sum(max(s - 1.0, 0.0) for t, s in by_type.items() if t not in _COMM_BUCKETS)
    return float(compute), float(comm)


def gc_pauses_by_rank(trace: pd.DataFrame) -> pd.Series:
    """Measured GC pause time per rank outside the `gc` op, s (empty without the column)."""
    if "gc_pause_s" not in trace.columns:
        return pd.Series(dtype=float)
    # Pauses inside the planned `gc` op are the mitigation working, not a straggler.
    pauses = trace["gc_pause_s"].fillna(0.0).where(trace["optype"] != "gc", 0.0)
    return pauses.groupby(trace["rank"]).sum()


def seq_len_correlation(trace: pd.DataFrame, min_cv: float = 0.1) -> float | None:
    """Pearson correlation of forward compute time vs its microbatch's sum(seq_len^2).

    The trace's `seq_len_sq_sum` column (the testbed records it; paper Fig. 9);
    None without the column or when the lengths hardly vary (coefficient of
    variation below min_cv), e.g. fixed-length sequences.
    """
    if "seq_len_sq_sum" not in trace.columns:
        return None
    fwd = trace[trace["optype"] == "forward-compute"]
    sq = fwd["seq_len_sq_sum"].to_numpy(dtype=float)
    keep = np.isfinite(sq)
    sq, duration = sq[keep], fwd["duration"].to_numpy(dtype=float)[keep]
    if len(sq) < 3 or sq.mean() <= 0 or sq.std() / sq.mean() < min_cv or duration.std() == 0:
        return None
    return float(np.corrcoef(sq, duration)[0, 1])


def step_time_total(trace: pd.DataFrame) -> float:
    """Sum over steps of the traced step time (latest end - earliest start), s."""
    return float(step_times(trace).sum())
