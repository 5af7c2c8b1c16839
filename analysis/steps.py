"""Per-step time of a traced job: latest op end minus earliest op start over all workers.

The traced step time that ground truth, detectors and figures all measure
against. Works on either clock in use (job-wide in our runs, per-step relative
in the artifact's and synthetic traces).

    from stragglerlab.analysis.steps import step_times
    step_times(trace)  # pd.Series indexed by step, seconds
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def step_times(trace: pd.DataFrame) -> pd.Series:
    """Per step: latest end - earliest start over every op of every worker, s."""
    start = trace["start_ts"].to_numpy()
    end = start + trace["duration"].to_numpy()
    step = trace["step"].to_numpy()
    if step.dtype.kind in "iu" and start.dtype.kind == "f" and end.dtype.kind == "f" \
            and len(step) and not np.isnan(end).any() and not np.isnan(start).any():
        # On arrays (the live monitor asks on every window): a max and a min per step are
        # exact, so the numbers are pandas' groupby's; NaN times take pandas' own path.
        if (step[1:] >= step[:-1]).all():  # rows by step (a window's frame): no sort
            first_row = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
            # float64 before the difference, as the path below takes it (float32 times).
            return pd.Series(np.maximum.reduceat(end, first_row).astype(np.float64)
                             - np.minimum.reduceat(start, first_row),
                             index=pd.Index(step[first_row], name="step"))
        steps, at = np.unique(step, return_inverse=True)
        last = np.full(len(steps), -np.inf)
        first = np.full(len(steps), np.inf)
        np.maximum.at(last, at, end)
        np.minimum.at(first, at, start)
        return pd.Series(last - first, index=pd.Index(steps, name="step"))
    end = trace["start_ts"] + trace["duration"]
    return end.groupby(trace["step"]).max() - trace.groupby("step")["start_ts"].min()
