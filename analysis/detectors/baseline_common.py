"""Helpers shared by the baseline detectors (rank-score, op-minmax, last-arrival, step-changepoint).

Per-step job time, fixed-size step windows (the "reporting interval" of the
field's detectors) and turning per-window flags into step spans. Pure pandas /
numpy; no detector logic lives here.

    from stragglerlab.analysis.detectors.baseline_common import step_times, window_ids
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.trace.schema import OpType


def step_times(trace: pd.DataFrame) -> pd.Series:
    """Job step time per step, s: latest optimizer end (any rank) minus the step's earliest start.

    Steps without optimizer rows (a step cut short) use the latest end of any op.
    Works for both clocks in use: job-wide (our runs) and per-step relative (synthetic).
    """
    end = trace["start_ts"] + trace["duration"]
    start = trace.groupby("step")["start_ts"].min()
    any_end = end.groupby(trace["step"]).max()
    is_opt = (trace["optype"] == OpType.OPTIMIZER.value).to_numpy()
    opt_end = end[is_opt].groupby(trace["step"][is_opt]).max()
    last = opt_end.reindex(any_end.index).fillna(any_end)
    return (last - start).rename("step_time_s")


def window_ids(steps: pd.Series | np.ndarray, window_steps: int, min_steps: int) -> np.ndarray:
    """Reporting-interval index of each row's step; -1 where there is too little to score.

    The first traced step opens interval 0 and every interval spans `window_steps`
    steps. A trailing interval with fewer than `min_steps` distinct steps joins the
    one before it (a one-step median is mostly noise); with no interval before it,
    every row gets -1 (not enough steps seen yet, e.g. early in online replay).
    """
    steps = np.asarray(steps, dtype=np.int64)
    if steps.size == 0:
        return steps.copy()
    ids = (steps - steps.min()) // int(window_steps)
    last = ids.max()
    if np.unique(steps[ids == last]).size < min_steps:
        ids[ids == last] = last - 1
    return ids


def flagged_span(flag_steps: np.ndarray, window_first: int, window_last: int) -> tuple[int, int]:
    """(first, last) step of a finding: the per-step flagged steps if any, else the windows' span.

    A reporting interval is coarse; where the per-step evidence agrees we
    narrow the span to the steps that show it.
    """
    inside = flag_steps[(flag_steps >= window_first) & (flag_steps <= window_last)]
    if inside.size:
        return int(inside.min()), int(inside.max())
    return int(window_first), int(window_last)
