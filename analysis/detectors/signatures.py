"""Evidence the `whatif` detector reads off a what-if result and its trace.

The what-if side comes as a `stragglerlab.results.IdealView` (one compute
ideal's metrics, read from whatif.json offline or taken from a fresh
analysis of the window online); the trace side is cheap pandas over the run's
trace. Each function is pure:

* `step_worker_scores`: the per-step worker score min(S_dp, S_stage) of every
  (stage, dp_rank) worker, [pp, dp, steps], and its ratio to the step's best
  worker (global slowdowns such as a busy host lift every worker; a
  straggler lifts one).
* `flagged_steps`: per worker, the steps its relative score crosses a threshold.
* `category_excess`: how much of the job's slowdown the what-if attributes to
  computation vs communication op types.
* `gc_pauses_by_rank`: measured GC pause time per rank (the trace's
  `gc_pause_s` column, written by the testbed's GC monitor).
* `comm_excess_by_worker` (computed by the analysis, written to whatif.json):
  re-exported from stragglerlab.analysis.whatif.

    scores = step_worker_scores(record.ideal("mean"))
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.analysis.steps import step_times
from stragglerlab.analysis.whatif import comm_excess_by_worker
from stragglerlab.meta import JobMeta
from stragglerlab.results import IdealView
from stragglerlab.schema import COMMUNICATION_OPS

__all__ = ["category_excess", "comm_excess_by_worker", "compute_ratio_to_peers",
           "flagged_steps", "gc_pauses_by_rank", "relative_scores", "seq_len_correlation",
           "step_time_total", "step_worker_scores"]

_COMPUTE = ["forward-compute", "backward-compute"]
_COMM_BUCKETS = {t.value for t in COMMUNICATION_OPS} | {"forward-pp-comm", "backward-pp-comm"}


def step_worker_scores(view: IdealView) -> np.ndarray:
    """Per-step worker score min(S_dp, S_stage), [pp, dp, steps]."""
    return view.step_worker_score()


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


def category_excess(view: IdealView) -> tuple[float, float]:
    """(compute, communication): summed S_t - 1 over op types of each category (>= 0 each)."""
    by_type = view.slowdown_by_optype
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
