"""Per-step time of a traced job: latest op end minus earliest op start over all workers.

The traced step time that ground truth, detectors and figures all measure
against. Works on either clock in use (job-wide in our runs, per-step relative
in the artifact's and synthetic traces).

    from stragglerlab.analysis.steps import step_times
    step_times(trace)  # pd.Series indexed by step, seconds
"""

from __future__ import annotations

import pandas as pd


def step_times(trace: pd.DataFrame) -> pd.Series:
    """Per step: latest end - earliest start over every op of every worker, s."""
    end = trace["start_ts"] + trace["duration"]
    return end.groupby(trace["step"]).max() - trace.groupby("step")["start_ts"].min()
