"""Evidence the `whatif` detector reads off a what-if result and its trace.

The what-if side comes as a `stragglerlab.run.results.IdealView` (one compute
ideal's metrics, read from whatif.json offline or taken from a fresh
analysis of the window online); the trace side is cheap pandas over the run's
trace. Each function is pure:

* `step_worker_scores`: the per-step worker score min(S_dp, S_stage) of every
  (stage, dp_rank) worker, [pp, dp, steps], and its ratio to the step's best
  worker (global slowdowns such as a busy host lift every worker; a
  straggler lifts one).
* `peel_stragglers`: several stragglers at once, by the method's decomposition:
  explain the worst worker, remove it (its S_dp and S_stage back to their
  peers' median over its window), re-score, repeat.
* `flagged_steps`: per worker, the steps its relative score crosses a threshold.
* `category_excess`: how much of the job's slowdown the what-if attributes to
  computation vs communication op types.
* `stage_compute_ratios`: per step, each stage's compute op times over the other
  stages' (the least over its DP ranks and over forward and backward).
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
from stragglerlab.method.grouped import group_median, optype_mask, row_codes
from stragglerlab.run.results import IdealView
from stragglerlab.trace.schema import COMMUNICATION_OPS, COMPUTE_VALUES

__all__ = ["category_excess", "cell_grid", "comm_excess_by_worker",
           "microbatch_variation_share", "peel_stragglers",
           "flagged_steps", "gc_pauses_by_rank", "relative_scores", "seq_len_correlation",
           "stage_compute_ratios", "step_time_total", "mean_step_time", "step_worker_scores"]

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


def cell_grid(per_cell: pd.Series, pp: int, dp: int, steps: np.ndarray) -> np.ndarray:
    """[stage, dp_rank, step] array of a Series indexed by (stage, dp_rank, step); NaN
    where it has no value."""
    grid = np.full((pp, dp, len(steps)), np.nan)
    stage, dp_rank, step = (per_cell.index.get_level_values(k).to_numpy()
                            for k in ("stage", "dp_rank", "step"))
    grid[stage, dp_rank, np.searchsorted(steps, step)] = per_cell.to_numpy()
    return grid


def stage_compute_ratios(trace: pd.DataFrame, pp: int) -> np.ndarray | None:
    """[stage, step]: per step, the least over the stage's DP ranks and over forward and
    backward of its median compute op time over the other stages' median; None without
    compute ops or with one stage. A link, a GC pause or waiting never enters: only the
    compute ops' own durations, which only the partition (or a slow device) changes."""
    if pp < 2:
        return None
    optypes = trace["optype"]
    keys = [trace[k].to_numpy() for k in ("stage", "dp_rank", "step")]
    if not all(k.dtype.kind in "iu" for k in keys):
        return _stage_compute_ratios_frame(trace, pp)
    duration = trace["duration"].to_numpy(dtype=float)
    ratios = []
    for optype in COMPUTE_VALUES:
        rows = np.flatnonzero(optype_mask(optypes, [optype]))
        if not len(rows):
            return None
        stage, dp_rank, step = (k[rows] for k in keys)
        # The [(stage, dp), step] table of median op times, as groupby().median().unstack().
        cell, n_cells = row_codes([stage, dp_rank])
        steps, col = np.unique(step, return_inverse=True)
        values = group_median(cell * len(steps) + col, duration[rows],
                              n_cells * len(steps)).reshape(n_cells, len(steps))
        stage_of = stage[np.unique(cell, return_index=True)[1]]
        ratios.append(_stage_ratios(values, stage_of, pp))
    return np.fmin(*ratios)


def _stage_ratios(values: np.ndarray, stage_of: np.ndarray, pp: int) -> np.ndarray:
    """[stage, step] from a [(stage, dp), step] table of median op times: the least over
    the stage's rows of its times over the other stages' median."""
    per = np.full((pp, values.shape[1]), np.nan)
    for s in range(pp):  # pp is small: one vectorized median per stage
        mine, other = values[stage_of == s], values[stage_of != s]
        if len(mine) and len(other):
            with np.errstate(divide="ignore", invalid="ignore"):  # a stage of 0 s ops: inf
                per[s] = np.min(mine / np.median(other, axis=0), axis=0)
    return per


def _stage_compute_ratios_frame(trace: pd.DataFrame, pp: int) -> np.ndarray | None:
    """`stage_compute_ratios` with pandas, for keys that are not integers."""
    compute = trace[trace["optype"].isin(COMPUTE_VALUES)]
    if compute.empty:
        return None
    med = compute.groupby(["optype", "stage", "dp_rank", "step"], observed=True)["duration"] \
        .median()
    ratios = []
    for optype in COMPUTE_VALUES:
        if optype not in med.index.get_level_values(0):
            return None
        table = med.loc[optype].unstack("step")  # [(stage, dp), step]
        ratios.append(_stage_ratios(table.to_numpy(),
                                    table.index.get_level_values("stage").to_numpy(), pp))
    return np.fmin(*ratios)


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


def lengths_uniform(trace: pd.DataFrame, min_cv: float = 0.1) -> bool:
    """Whether the trace records every microbatch's sum(seq_len^2) (`seq_len_sq_sum` on
    forward ops) and they hardly vary (coefficient of variation below min_cv, e.g. fixed
    lengths): then no microbatch's attention costs more than another's, and sequence
    imbalance is ruled out by the trace itself. False where it records none."""
    if "seq_len_sq_sum" not in trace.columns:
        return False
    cv = _cv(_forward_lengths(trace))
    return cv is not None and cv < min_cv


def _forward_lengths(trace: pd.DataFrame) -> np.ndarray:
    """The forward ops' recorded sum(seq_len^2), finite values only (the column must be
    there)."""
    sq = trace["seq_len_sq_sum"].to_numpy(dtype=float)
    return sq[optype_mask(trace["optype"], ["forward-compute"]) & np.isfinite(sq)]


def _cv(sq: np.ndarray) -> float | None:
    """Coefficient of variation; None with fewer than 3 values or a mean not positive."""
    if len(sq) < 3 or sq.mean() <= 0:
        return None
    return float(sq.std() / sq.mean())


def seq_len_correlation(trace: pd.DataFrame, min_cv: float = 0.1) -> float | None:
    """Correlation of each microbatch's compute time with its sum(seq_len^2), within steps.

    Sequence imbalance is per-microbatch variation that follows sum(seq_len^2) (the
    trace's `seq_len_sq_sum` on forward ops; paper Fig. 9). Compute = the microbatch's
    forward plus its backward on the same worker (both scale with attention cost). Both
    sides are taken relative to their (stage, step) mean, so what stages differ by (a
    partition's offset, a heavier stage's larger scale) and what steps differ by (a busy
    host) do not dilute the per-microbatch signal. None without the column or when
    lengths hardly vary (coefficient of variation below min_cv), e.g. fixed lengths.
    """
    if "seq_len_sq_sum" not in trace.columns:
        return None
    keys = ["stage", "dp_rank", "step", "mb_id"]
    missing = [k for k in [*keys, "duration"] if k not in trace.columns]
    if missing:  # the KeyError its frame selection below always raised
        raise KeyError(f"{missing} not in index")
    # Lengths that hardly vary (most runs) are told from two arrays, before any frame.
    sq = _forward_lengths(trace)
    cv = _cv(sq)
    if cv is None or cv < min_cv:
        return None
    opt = trace["optype"].astype(str)
    fwd = trace.loc[opt == "forward-compute", keys + ["duration", "seq_len_sq_sum"]]
    fwd = fwd[np.isfinite(fwd["seq_len_sq_sum"].to_numpy(dtype=float))]  # the rows of sq
    bwd = trace.loc[opt == "backward-compute"].groupby(keys)["duration"].sum()
    compute = fwd["duration"].to_numpy(dtype=float) + bwd.reindex(
        pd.MultiIndex.from_frame(fwd[keys])).fillna(0.0).to_numpy()
    group = fwd.groupby(["stage", "step"]).ngroup().to_numpy()
    counts = np.bincount(group)

    def relative_residual(x: np.ndarray) -> np.ndarray:
        mean = (np.bincount(group, weights=x) / counts)[group]
        return x / np.maximum(mean, 1e-12) - 1.0

    r_compute, r_sq = relative_residual(compute), relative_residual(sq)
    if r_compute.std() == 0 or r_sq.std() == 0:
        return None
    return float(np.corrcoef(r_sq, r_compute)[0, 1])


def step_time_total(trace: pd.DataFrame) -> float:
    """Sum over steps of the traced step time (latest end - earliest start), s."""
    return float(step_times(trace).sum())


def mean_step_time(trace: pd.DataFrame) -> float:
    """Mean traced step time, s (0 for an empty trace)."""
    return step_time_total(trace) / max(trace["step"].nunique(), 1)


def _window(relative: np.ndarray, step_threshold: float,
            min_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per worker: (first, last) flagged step index and the mean relative score over that
    window against the best worker's over the same window; ratio 0 when not flagged."""
    hit = relative >= step_threshold                                  # [pp, dp, s]
    s = hit.shape[2]
    count = hit.sum(axis=2)
    first = np.where(count > 0, hit.argmax(axis=2), 0)
    last = np.where(count > 0, s - 1 - hit[:, :, ::-1].argmax(axis=2), 0)
    csum = np.concatenate([np.zeros(relative.shape[:2] + (1,)), np.cumsum(relative, axis=2)],
                          axis=2)
    ratio = np.zeros(hit.shape[:2])
    for p, d in zip(*np.nonzero(count >= min_steps)):
        f, la = first[p, d], last[p, d]
        window = (csum[:, :, la + 1] - csum[:, :, f]) / (la - f + 1)
        ratio[p, d] = window[p, d] / max(window.min(), 1e-12)
    return first, last, ratio


def peel_stragglers(step_s_dp: np.ndarray, step_s_stage: np.ndarray, *, step_threshold: float,
                    worker_threshold: float, min_steps: int,
                    max_stragglers: int = 8) -> list[tuple[int, int, int, int, float]]:
    """Stragglers one at a time: [(stage, dp_rank, first, last, ratio)], worst first.

    Worker score = min(S_dp, S_stage) per step (paper §4). A slow worker lifts its
    DP rank's and its stage's S, so every cell sharing its row or column looks slow
    too, and a second straggler hides among those. Each round names the cell with
    the highest window ratio (`worker_threshold` or more, over at least
    `min_steps` steps at `step_threshold`), then removes it: its S_dp and S_stage
    over its window are set to the lowest S of the other DP ranks and stages (the
    step's unlifted level), and the scores are taken again.
    """
    dp_s = np.array(step_s_dp, dtype=float, copy=True)
    st_s = np.array(step_s_stage, dtype=float, copy=True)
    found: list[tuple[int, int, int, int, float]] = []
    for _ in range(max_stragglers):
        scores = np.minimum(st_s[:, None, :], dp_s[None, :, :])
        first, last, ratio = _window(relative_scores(scores), step_threshold, min_steps)
        p, d = (int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
        if ratio[p, d] < worker_threshold or any((p, d) == f[:2] for f in found):
            break
        f, la = int(first[p, d]), int(last[p, d])
        peers = np.delete(ratio[p], d)
        whole_stage = dp_s.shape[0] > 1 and peers.size and \
            ratio[p, d] < worker_threshold * max(float(np.median(peers)), 1e-12)
        if whole_stage:
            # Its DP peers straggle alike: the stage is slow, not the worker. Explain the
            # stage: name its straggling cells, put its S_stage back to the others'.
            members = [int(x) for x in np.flatnonzero(ratio[p] >= worker_threshold)]
            found += [(p, m, int(first[p, m]), int(last[p, m]), float(ratio[p, m]))
                      for m in members if not any((p, m) == g[:2] for g in found)]
        # Removed = back at the step's unlifted level: the lowest S of any other DP rank
        # or stage (a busy host lifts all of them; with two stages the other one may be
        # a straggler's, so not the median).
        rest = np.concatenate([np.delete(dp_s, d, axis=0), np.delete(st_s, p, axis=0)])
        level = rest.min(axis=0)[f:la + 1] if rest.size else None
        if whole_stage:
            if level is not None and st_s.shape[0] > 1:
                st_s[p, f:la + 1] = level
        else:
            found.append((p, d, f, la, float(ratio[p, d])))
            if level is not None and dp_s.shape[0] > 1:
                dp_s[d, f:la + 1] = level
            if level is not None and st_s.shape[0] > 1:
                st_s[p, f:la + 1] = level
    return found


def microbatch_variation_share(trace: pd.DataFrame) -> float | None:
    """Share of forward-compute variance that varies per microbatch within a worker-step.

    Stage imbalance is a constant offset per stage (every microbatch of the heavy
    stage slower alike: variance between stages); sequence imbalance varies per
    microbatch with its sum(seq_len^2) (variance within a worker's step). Returns
    within / (within + between-stage) variance, None without forward ops.
    """
    fwd = trace.loc[trace["optype"] == "forward-compute", ["stage", "dp_rank", "step",
                                                           "duration"]]
    if len(fwd) < 3:
        return None
    d = fwd["duration"].to_numpy(dtype=float)
    cell_mean = fwd.groupby(["stage", "dp_rank", "step"])["duration"].transform("mean")
    stage_mean = fwd.groupby("stage")["duration"].transform("mean")
    within = float(np.var(d - cell_mean.to_numpy()))
    between = float(np.var(stage_mean.to_numpy()))
    return within / (within + between) if within + between > 0 else None


def stage_constancy(step_s_stage: np.ndarray, heavy: int, min_steps: int = 4) -> float | None:
    """How constant a heavy stage's excess is over the run: the mean excess of the heavy
    stage's per-step S over the lightest stage's, in the weaker half of the steps over the
    stronger half (1: constant, 0: only in one half). None with too few steps."""
    s = np.asarray(step_s_stage, dtype=float)  # [pp, steps]
    if s.ndim != 2 or s.shape[1] < min_steps:
        return None
    excess = s[heavy] / np.maximum(s.min(axis=0), 1e-12) - 1.0
    half = s.shape[1] // 2
    a, b = float(excess[:half].mean()), float(excess[half:].mean())
    strong = max(a, b)
    return 1.0 if strong <= 0 else max(min(a, b), 0.0) / strong
