"""Helpers shared by the trace-based figures (Fig. 8, 9, 10, 12, 13, 14).

Picking runs out of a FigureData by the fault they carry, reading a run's
trace, laying several steps of a trace end to end on one time axis, drawing
per-worker lanes of op bars.

    from stragglerlab.figures.trace_common import runs_with_fault, trace_of
    runs = runs_with_fault(data, "seq-imbalance")

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

COMPUTE_COLORS: dict[str, str] = {
    "forward-compute": "#4C72B0",
    "backward-compute": "#DD8452",
}
"""Bar colours of compute ops, shared by the timelines."""
COMM_COLOR = "0.75"
"""Bar colour of communication and other non-compute ops."""
DP_COLLECTIVES = ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")
"""The DP gradient / parameter collectives."""
STEP_GAP_FRACTION = 0.02
"""Gap between steps laid end to end, as a fraction of the mean step span."""


def scenario_section(run, section: str) -> dict:
    """One section (model / parallel / data / run) of the scenario recorded in run.json."""
    scenario = (run.record or {}).get("scenario") or {}
    value = scenario.get(section) if isinstance(scenario, dict) else None
    return value if isinstance(value, dict) else {}


def ok_runs(data) -> list:
    """The runs that finished (outcome ok), sorted by (scenario, seed) for stable choices."""
    return sorted(data.ok_runs(), key=lambda r: (str(r.scenario), str(r.seed), str(r.path)))


def runs_with_fault(data, kind: str, where: Callable[[object], bool] | None = None) -> list:
    """Finished runs whose ground truth holds a fault of `kind` (and pass `where`); runs of
    the scenario named like the kind (the built-in one, e.g. `seq-imbalance`) first."""
    runs = [r for r in ok_runs(data) if kind in r.fault_kinds() and (where is None or where(r))]
    return sorted(runs, key=lambda r: r.scenario != kind)  # stable: (scenario, seed) kept


def trace_of(run) -> pd.DataFrame:
    """A copy of the run's trace with optype as plain strings (RunSummary caches the read)."""
    df = run.trace().copy()
    df["optype"] = df["optype"].astype(str)
    return df


def lay_steps_end_to_end(df: pd.DataFrame) -> pd.DataFrame:
    """Add column `t` (s): start time with the chosen steps placed one after the other.

    Works whether start_ts is one clock for the whole job (our runs) or restarts
    at 0 every step (synthetic and some artifact traces): each step is shifted
    so it starts where the previous one ended, plus a small gap.
    """
    out = df.copy()
    first = out.groupby("step")["start_ts"].transform("min")
    end = out["start_ts"] + out["duration"]
    span = (end.groupby(out["step"]).max() - out.groupby("step")["start_ts"].min())
    gap = STEP_GAP_FRACTION * float(span.mean()) if len(span) else 0.0
    offset = (span + gap).cumsum().shift(fill_value=0.0)
    out["t"] = out["start_ts"] - first + out["step"].map(offset)
    return out


def draw_lanes(ax: Axes, df: pd.DataFrame, lane: pd.Series, color: pd.Series,
               height: float = 0.7) -> None:
    """Horizontal bars (x = df.t, width = df.duration) on lanes (y = lane), one colour each."""
    ax.barh(lane.to_numpy(), df["duration"].to_numpy(), left=df["t"].to_numpy(),
            height=height, color=color.to_numpy(), linewidth=0)


def op_colors(optype: pd.Series) -> pd.Series:
    """Bar colour per op: compute by direction, the rest grey."""
    return optype.map(COMPUTE_COLORS).fillna(COMM_COLOR)


def pearson(x: Iterable[float], y: Iterable[float]) -> float | None:
    """Pearson correlation, None when either side is constant or has < 3 points."""
    a, b = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])
