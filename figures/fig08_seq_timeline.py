"""Fig. 8: timeline of a sequence-imbalanced pure-DP job.

One lane per DP rank over a few consecutive steps of a `seq-imbalance` run:
forward and backward compute bars, the DP collectives in grey, and hatched red
the time each rank sits idle waiting for the slowest rank to finish its
compute before the gradient collective can complete. The label on each
rank's compute gives that rank's sum(seq_len^2) for the step: the rank that
drew the long sequences computes longest and everyone waits for it.

    stragglerlab figures --runs RUN... --out DIR        # via the registry
    from stragglerlab.figures.fig08_seq_timeline import build; build(data, Path("out"))
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import (
    SMALL_FONT_SIZE,
    figure_style,
    new_figure,
    save_figure,
    source_note,
)
from stragglerlab.figures.trace_common import (
    COMM_COLOR,
    COMPUTE_COLORS,
    draw_lanes,
    lay_steps_end_to_end,
    op_colors,
    pearson,
    runs_with_fault,
    scenario_section,
    trace_of,
)

NAME = "fig08_seq_timeline"
TITLE = "Fig. 8: timeline of a sequence-imbalanced pure-DP job"
PAPER = ("DP ranks that drew long sequences compute longest; the others wait at the "
         "gradient collective (qualitative)")
N_STEPS = 3
"""Consecutive steps drawn (the window with the largest compute imbalance)."""
WAIT_COLOR = "#C44E52"
INPUTS = ("runs", "traces")
"""Run-folder files this figure reads (figures/registry.py)."""


def pick_run(data: FigureData):
    """The first unbalanced pure-DP seq-imbalance run, or None."""
    def pure_dp_unbalanced(r) -> bool:
        return (int(scenario_section(r, "parallel").get("pp", r.meta.pp_size)) == 1
                and not scenario_section(r, "data").get("rebalance_across_dp", False))

    runs = runs_with_fault(data, "seq-imbalance", pure_dp_unbalanced)
    return runs[0] if runs else None


def per_rank_step(df: pd.DataFrame) -> pd.DataFrame:
    """Per (step, dp_rank) of the first stage: compute_s, compute_end, seq_sq, wait_s.

    wait_s = latest compute end over the DP ranks - this rank's compute end: the
    time the rank idles before the gradient collective can finish.
    """
    first = df[df["stage"] == df["stage"].min()]
    comp = first[first["optype"].isin(list(COMPUTE_COLORS))]
    end = comp["start_ts"] + comp["duration"]
    g = comp.assign(end=end).groupby(["step", "dp_rank"])
    out = pd.DataFrame({"compute_s": g["duration"].sum(), "compute_end": g["end"].max()})
    if "seq_len_sq_sum" in comp:
        fwd = comp[comp["optype"] == "forward-compute"]
        out["seq_sq"] = fwd.groupby(["step", "dp_rank"])["seq_len_sq_sum"].sum()
    else:
        out["seq_sq"] = np.nan
    latest = out.groupby(level="step")["compute_end"].transform("max")
    out["wait_s"] = latest - out["compute_end"]
    return out.reset_index()


def step_spans(df: pd.DataFrame) -> pd.Series:
    """Step time per step: latest op end - earliest op start over all workers, s."""
    end = df["start_ts"] + df["duration"]
    return end.groupby(df["step"]).max() - df.groupby("step")["start_ts"].min()


def imbalance(table: pd.DataFrame, col: str) -> pd.Series:
    """Per step: max over DP ranks / mean over DP ranks of `col`."""
    g = table.groupby("step")[col]
    return g.max() / g.mean()


def window(steps_imbalance: pd.Series, n: int) -> list[int]:
    """The n consecutive traced steps with the largest summed imbalance."""
    steps = steps_imbalance.sort_index()
    if len(steps) <= n:
        return [int(s) for s in steps.index]
    rolled = steps.rolling(n).sum().to_numpy()
    end = int(np.nanargmax(rolled))
    return [int(s) for s in steps.index[end - n + 1:end + 1]]


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw Fig. 8 from the first seq-imbalance pure-DP run in data."""
    run = pick_run(data)
    if run is None:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "a seq-imbalance run with pp=1 (scenario seq-imbalance)")
    df = trace_of(run)
    table = per_rank_step(df)
    spans = step_spans(df)
    comp_imb = imbalance(table, "compute_s")
    shown = window(comp_imb, N_STEPS)
    wait_share = (table.groupby("step")["wait_s"].max() / spans).dropna()
    ours = {
        "run": run.label,
        "dp_size": int(run.meta.dp_size),
        "steps_shown": shown,
        "compute_imbalance_mean": round(float(comp_imb.mean()), 4),
        "seq_sq_imbalance_mean": round(float(imbalance(table, "seq_sq").mean()), 4),
        "compute_vs_seq_sq_pearson": pearson(table["seq_sq"], table["compute_s"]),
        "max_wait_share_of_step_mean": round(float(wait_share.mean()), 4),
        "max_wait_ms_mean": round(1e3 * float(table.groupby("step")["wait_s"].max().mean()), 3),
    }
    paths = _draw(df[df["step"].isin(shown)], table[table["step"].isin(shown)], run, out_dir)
    note = (f"{run.label}: per step the slowest DP rank computes "
            f"{ours['compute_imbalance_mean']:.2f}x the mean rank (sum(s^2) imbalance "
            f"{ours['seq_sq_imbalance_mean']:.2f}x); the fastest ranks idle on average "
            f"{100 * ours['max_wait_share_of_step_mean']:.0f}% of the step at the gradient "
            "collective, the pattern of the paper's Fig. 8.")
    return FigureResult(name=NAME, paths=paths, source=f"testbed run {run.label}",
                        paper=PAPER, ours=ours, note=note)


def _draw(df: pd.DataFrame, table: pd.DataFrame, run, out_dir: Path) -> list[Path]:
    first = lay_steps_end_to_end(df[df["stage"] == df["stage"].min()])
    dp = int(run.meta.dp_size)
    with figure_style():
        fig = new_figure(7.0, 0.55 * dp + 1.3)
        ax = fig.add_subplot()
        draw_lanes(ax, first, first["dp_rank"], op_colors(first["optype"]))
        # Waiting: from a rank's own compute end to the slowest rank's compute end.
        comp = first[first["optype"].isin(list(COMPUTE_COLORS))]
        ends = (comp["t"] + comp["duration"]).groupby([comp["step"], comp["dp_rank"]]).max()
        latest = ends.groupby(level="step").transform("max")
        wait = pd.DataFrame({"t": ends, "duration": latest - ends}).reset_index()
        ax.barh(wait["dp_rank"], wait["duration"], left=wait["t"], height=0.7,
                facecolor="none", edgecolor=WAIT_COLOR, hatch="////", linewidth=0.6)
        labels = table.set_index(["step", "dp_rank"])["seq_sq"].reindex(ends.index)
        for (step, rank), x in ends.items():  # a few steps x DP ranks labels, not per op
            val = labels.get((step, rank))
            if val is not None and np.isfinite(val):
                ax.text(x, rank - 0.37, f"sum(s^2)={val / 1e3:.0f}k", ha="right", va="bottom",
                        fontsize=SMALL_FONT_SIZE - 1, color="0.2")
        step_starts = first.groupby("step")["t"].min()
        for step, x in step_starts.items():
            ax.axvline(x, color="0.5", lw=0.5, ls=":")
            ax.text(x, dp - 0.35, f" step {step}", fontsize=SMALL_FONT_SIZE, va="bottom",
                    color="0.3")
        ax.set_yticks(range(dp), [f"DP {r}" for r in range(dp)])
        ax.set_ylim(dp - 0.3, -0.7)
        ax.set_xlabel("time (s), steps placed end to end")
        ax.set_title("sequence-length imbalance: every rank waits for the one with the long "
                     "sequences (label: its sum(s^2), tokens^2)", fontsize=8, loc="left")
        handles = [
            Patch(color=COMPUTE_COLORS["forward-compute"], label="forward"),
            Patch(color=COMPUTE_COLORS["backward-compute"], label="backward"),
            Patch(color=COMM_COLOR, label="DP collective / optimizer"),
            Patch(facecolor="none", edgecolor=WAIT_COLOR, hatch="////",
                  label="waiting for the slowest rank"),
        ]
        fig.legend(handles=handles, loc="outside upper center", ncol=4, frameon=False)
        source_note(fig, f"testbed run {run.label} ({dp} DP ranks, pure DP)")
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)
