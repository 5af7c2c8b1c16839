"""Slow devices for the `whatif` detector, from a worker's own compute against its DP peers'.

A slow device is a fault whether or not it straggles: 1F1B's slack can absorb a
mild one, and a heavy stage or a second slow worker can take the job's
critical path from it, so the per-step worker scores (the `stragglers` rule)
do not always rank it. What it always does is take longer over the same work
than the other DP ranks of its stage, which run the same partition on the
same microbatch shapes. Per step, each worker's *work-normalized* compute,

    sum over its forward and backward ops of (duration - GC pause inside it)
    / the same ops' modelled cost,

over the median of its stage's other DP ranks; held over `min_steps` consecutive steps
(a busy host or one long op is a step, not a device). The modelled cost of an
op is its (stage, op type) median with fixed lengths, and with varying lengths
the least-squares line a + b * sum(seq_len^2) over the stage's ops of that type
(attention grows with sum(s^2), so a rank that drew the long sequences is not
a slow device). A worker whose held ratio reaches `device_compute_ratio` is
named `slow-worker` over the steps it holds it, unless another rule named it, and
unless its ratio over those steps stands no further over its own other steps than the
run's noise over time (`analysis.over_time.over_own_noise`: on a shared host two DP ranks'
compute ratio can swing 0.77-1.32 from step to step, and three such steps in a row are
not a device).

Needs DP peers (with one DP rank there is nothing to hold a stage's compute
against). Runs beside every other rule, before the slow-link rules, whose pairs
to a slow device say nothing of a link.

    slow_devices(run, steps, cfg, found, worker_scores)   # list[Finding]
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run, named_cells
from stragglerlab.analysis.detectors.signatures import cell_grid
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.over_time import over_own_noise
from stragglerlab.method.grouped import group_median, group_sum, optype_mask, row_codes
from stragglerlab.trace.schema import COMPUTE_VALUES


def modelled_cost(ops: pd.DataFrame) -> np.ndarray:
    """Per compute op, its modelled cost, s: the (stage, op type) median, or with
    varying lengths the least-squares line on sum(seq_len^2) over those ops. The line is
    fitted with each DP rank's own speed factored out (fit, take each rank's median
    time over the line, refit on the times over it), so a slow device among the ranks
    does not bend the model it is measured against."""
    by_type = ops.groupby(["stage", "optype"], observed=True)
    cost = by_type["duration"].transform("median").to_numpy(dtype=float, copy=True)
    if "seq_len_sq_sum" not in ops.columns:
        return cost
    ranks, rank_code = np.unique(ops["dp_rank"].to_numpy(), return_inverse=True)
    _fit_lengths(cost, by_type.ngroup().to_numpy(), ops["seq_len_sq_sum"].to_numpy(dtype=float),
                 ops["duration"].to_numpy(dtype=float), rank_code, len(ranks))
    return cost


def normalized_compute(trace: pd.DataFrame, pp: int, dp: int,
                       steps: np.ndarray) -> np.ndarray | None:
    """[stage, dp_rank, step]: each worker's compute (GC pauses out) over the same ops'
    modelled cost; NaN where a worker traced no compute op in a step; None without any.

    On arrays (the live monitor asks on every window, where pandas' overhead was most
    of the cost), with the numbers of the DataFrame version (`_normalized_compute_frame`),
    which takes over for a trace the arrays do not fit (keys that are not integers,
    NaN durations: pandas' sum picks its algorithm by the column's blocks there)."""
    optype = trace["optype"]
    lengths = "seq_len_sq_sum" in trace.columns  # mb_id is read only with lengths, as before
    keys = [trace[k].to_numpy() for k in ("stage", "dp_rank", "step", "mb_id")[:3 + lengths]]
    floats = [trace[c].to_numpy() for c in ("duration", "gc_pause_s", "seq_len_sq_sum")
              if c in trace.columns]
    if not all(k.dtype.kind in "iu" for k in keys) or \
            not all(f.dtype.kind == "f" for f in floats):
        return _normalized_compute_frame(trace, pp, dp, steps)
    rows = np.flatnonzero(optype_mask(optype, COMPUTE_VALUES) & np.isin(keys[2], steps))
    if not len(rows):
        return None
    stage, rank, step = (k[rows] for k in keys[:3])
    forward = optype_mask(optype, ["forward-compute"])[rows]
    pause = trace["gc_pause_s"].to_numpy()[rows] if "gc_pause_s" in trace.columns else 0.0
    dur = trace["duration"].to_numpy()[rows] - np.where(np.isnan(pause), 0.0, pause)
    dur = np.where((dur >= 0.0) | np.isnan(dur), dur, 0.0)  # Series.clip(lower=0.0)
    s2 = None
    if lengths:  # traced on forward ops: a backward has its forward's
        raw = trace["seq_len_sq_sum"].to_numpy()[rows]
        code, n = row_codes([stage, rank, step, keys[3][rows]])
        fwd = np.flatnonzero(forward & ~np.isnan(raw))  # groupby().first(): first non-NaN
        first_code, at = np.unique(code[fwd], return_index=True)
        by_code = np.full(n, np.nan)
        by_code[first_code] = raw[fwd][at]
        s2 = by_code[code]
    cost = _modelled_cost(stage, forward, dur, s2, rank)
    if np.isnan(dur).any() or np.isnan(cost).any():
        return _normalized_compute_frame(trace, pp, dp, steps)
    cell, n = row_codes([stage, rank, step])
    first = np.unique(cell, return_index=True)[1]  # a row of each (stage, dp_rank, step)
    ratio = group_sum(cell, dur, n) / np.maximum(group_sum(cell, cost, n), 1e-12)
    grid = np.full((pp, dp, len(steps)), np.nan)
    grid[stage[first], rank[first], np.searchsorted(steps, step[first])] = ratio
    return grid


def _modelled_cost(stage: np.ndarray, forward: np.ndarray, dur: np.ndarray,
                   s2: np.ndarray | None, rank: np.ndarray) -> np.ndarray:
    """`modelled_cost` on arrays: per compute op, the median of its (stage, op type), or
    with varying lengths the line on sum(seq_len^2) (s2), each rank's speed factored out."""
    group, n = row_codes([stage, forward])
    cost = group_median(group, dur, n)[group]
    if s2 is None:
        return cost
    ranks, rank_code = np.unique(rank, return_inverse=True)
    _fit_lengths(cost, group, s2, dur, rank_code, len(ranks))
    return cost


def _fit_lengths(cost: np.ndarray, group: np.ndarray, s2: np.ndarray, dur: np.ndarray,
                 rank_code: np.ndarray, n_ranks: int) -> None:
    """Where a group's lengths vary, replace its cost (in place) by the line on s2, each
    rank's speed factored out (three passes)."""
    for g in np.unique(group):  # stages x 2 op types: a handful of small fits
        mine = group == g
        x, y, r = s2[mine], dur[mine], rank_code[mine]
        if not np.all(np.isfinite(x)) or x.std() <= 0.1 * max(abs(x.mean()), 1e-12):
            continue  # lengths fixed (or not traced): the median is the model
        speed = np.ones(len(y))
        for _ in range(3):
            slope, icpt = np.polyfit(x, y / speed, 1)
            fitted = np.maximum(icpt + slope * x, 1e-12)
            over = group_median(r, y / fitted, n_ranks)  # per rank; absent ones: NaN
            least = np.nan if np.isnan(over).all() else float(np.nanmin(over))  # Series.min
            speed = over[r] / max(least, 1e-12)
        cost[mine] = np.where(icpt + slope * x > 0, icpt + slope * x, cost[mine])


def _normalized_compute_frame(trace: pd.DataFrame, pp: int, dp: int,
                              steps: np.ndarray) -> np.ndarray | None:
    """`normalized_compute` with pandas, for traces its arrays do not fit."""
    ops = trace[trace["optype"].isin(COMPUTE_VALUES) & trace["step"].isin(steps)]
    if ops.empty:
        return None
    pause = ops["gc_pause_s"].fillna(0.0) if "gc_pause_s" in ops.columns else 0.0
    ops = ops.assign(duration=(ops["duration"] - pause).clip(lower=0.0))
    if "seq_len_sq_sum" in ops.columns:  # traced on forward ops: a backward has its forward's
        keys = ["stage", "dp_rank", "step", "mb_id"]
        fwd = ops[ops["optype"] == "forward-compute"].groupby(keys)["seq_len_sq_sum"].first()
        ops = ops.assign(seq_len_sq_sum=fwd.reindex(pd.MultiIndex.from_frame(ops[keys]))
                         .to_numpy(dtype=float))
    ops = ops.assign(cost=modelled_cost(ops))
    sums = ops.groupby(["stage", "dp_rank", "step"])[["duration", "cost"]].sum()
    return cell_grid(sums["duration"] / np.maximum(sums["cost"], 1e-12), pp, dp, steps)


def over_peers(grid: np.ndarray | None) -> np.ndarray | None:
    """`normalized_compute`'s grid over the median of each stage's other DP ranks;
    None without a grid or with one DP rank. The one measure of a worker's compute
    against its peers (`Signals.compute_over_peers` keeps it per diagnosis)."""
    if grid is None or grid.shape[1] < 2:
        return None
    # Each worker over the median of the stage's *other* DP ranks: the least of many peers
    # would drift down as DP grows and lift everyone's ratio.
    missing = np.isnan(grid)
    if missing.all():
        return None
    with warnings.catch_warnings():  # a step no rank of a stage traced stays NaN -> 1
        warnings.simplefilter("ignore", RuntimeWarning)
        filled = np.where(missing, np.nanmedian(grid, axis=1, keepdims=True), grid)
    ratio = filled / np.maximum(median_of_others(filled), 1e-12)
    return np.where(missing, 1.0, np.nan_to_num(ratio, nan=1.0))


def median_of_others(grid: np.ndarray) -> np.ndarray:
    """[a, n, b] -> [a, n, b]: for each entry along axis 1, the median of the other n - 1
    entries, from one sort (n >= 2): the k-th of the others is the k-th of all when the
    entry itself sorts after it, else the (k + 1)-th."""
    n = grid.shape[1]
    order = np.argsort(grid, axis=1, kind="stable")
    srt = np.take_along_axis(grid, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.broadcast_to(np.arange(n)[None, :, None], order.shape),
                      axis=1)

    def kth_of_others(k: int) -> np.ndarray:
        return np.where(pos > k, srt[:, k:k + 1, :], srt[:, k + 1:k + 2, :])

    m = n - 1
    if m % 2:
        return kth_of_others(m // 2)
    return (kth_of_others(m // 2 - 1) + kth_of_others(m // 2)) / 2


def slow_devices(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
                 found: list[Finding], worker_scores: np.ndarray,
                 grid: np.ndarray | None = None,
                 over: np.ndarray | None = None) -> list[Finding]:
    """`slow-worker` findings for workers whose own compute is slow against their DP
    peers' (module docstring), on workers no finding in `found` names.

    worker_scores: the what-if's per-step worker score [pp, dp, steps], for the
    estimate of how much the device held the job. grid: `normalized_compute` of the
    run over `steps` when the caller has it (computed here otherwise); over: its
    `over_peers`, the measure itself, when the caller has that (`Signals.compute_over_peers`)."""
    pp, dp = run.meta.pp_size, run.meta.dp_size
    w = cfg.min_steps
    if grid is None and dp >= 2:
        grid = normalized_compute(run.trace, pp, dp, steps)
    ratio = over if over is not None else over_peers(grid)
    if ratio is None or ratio.shape[2] < w:
        return []
    held = np.lib.stride_tricks.sliding_window_view(ratio, w, axis=2).min(axis=3)
    named = named_cells(found)
    out = []
    for stage, d in zip(*np.nonzero(held.max(axis=2) >= cfg.device_compute_ratio)):
        if (int(d), int(stage)) in named:
            continue
        where = np.flatnonzero(held[stage, d] >= cfg.device_compute_ratio)
        first, last = int(where[0]), int(where[-1] + w - 1)
        if not over_own_noise(ratio[stage, d], first, last + 1):
            continue  # no more than its compute over its peers' moves on its other steps
        peak = float(held[stage, d].max())
        score = worker_scores[stage, d, first:last + 1] if worker_scores.size else np.ones(1)
        out.append(Finding(
            [run.worker(int(d), int(stage))], int(steps[first]), int(steps[last]),
            RootCause.SLOW_WORKER,
            confidence=float(min(1.0, 0.5 + (peak - cfg.device_compute_ratio) * 2)),
            estimated_slowdown=float(max(np.mean(score), 1.0)),
            detail={"test": "device", "compute_over_peers": peak}))
    return out
