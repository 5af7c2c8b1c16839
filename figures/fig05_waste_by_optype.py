"""Fig. 5: waste of straggling jobs attributed to op types (compute, PP comm, DP comm, other).

Per job, each op type t has S_t (Eq. 2: the ideal with t left original); the
job's waste 1 - 1/S is split over the groups in proportion to max(S_t - 1, 0),
as the paper attributes slowdown. Left: CDF over straggling jobs (S >= 1.1) of
each group's waste. Right: share of all wasted worker-time per group (jobs
weighted by world_size x traced time). Paper: compute dominates, PP comm > DP.

Built by `stragglerlab figures --runs ... --only fig05_waste_by_optype --out DIR`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import numpy as np

from stragglerlab.figures import population as pop
from stragglerlab.figures.data import FigureData, RunSummary
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

NAME = "fig05_waste_by_optype"
TITLE = "Fig. 5: waste attributed to op types (straggling jobs)"
PAPER = "compute dominates the waste; PP comm > DP comm"
INPUTS = ("runs", "whatif")
"""Run-folder files this figure reads (figures/registry.py)."""


class OpGroup(str, Enum):
    """The op-type groups of Fig. 5."""

    COMPUTE = "compute"
    PP_COMM = "PP comm"
    DP_COMM = "DP comm"
    OTHER = "other"


GROUP_OF: dict[str, OpGroup] = {
    "forward-compute": OpGroup.COMPUTE,
    "backward-compute": OpGroup.COMPUTE,
    "forward-pp-comm": OpGroup.PP_COMM,
    "backward-pp-comm": OpGroup.PP_COMM,
    "params-all-gather": OpGroup.DP_COMM,
    "grads-reduce-scatter": OpGroup.DP_COMM,
    "separate-grads-all-reduce": OpGroup.DP_COMM,
}
"""slowdown_by_optype keys per group; anything else (gc, optimizer, clip, layernorm/embedding
all-reduce) is OTHER."""
GROUPS = list(OpGroup)
COLORS = {OpGroup.COMPUTE: "tab:blue", OpGroup.PP_COMM: "tab:orange",
          OpGroup.DP_COMM: "tab:green", OpGroup.OTHER: "0.5"}


def group_waste(run: RunSummary) -> dict[OpGroup, float]:
    """The job's waste (fraction) split over the op groups by max(S_t - 1, 0)."""
    by_type = run.whatif.get("slowdown_by_optype") or {}
    excess = {g: 0.0 for g in GROUPS}
    for optype, s_t in by_type.items():
        excess[GROUP_OF.get(optype, OpGroup.OTHER)] += max(float(s_t) - 1.0, 0.0)
    total = sum(excess.values())
    waste = 1.0 - 1.0 / float(run.whatif["slowdown"])
    if total <= 0.0:
        return {g: 0.0 for g in GROUPS}
    return {g: waste * e / total for g, e in excess.items()}


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw per-group waste CDFs and the population's share of waste per group."""
    runs = [run for run in pop.straggling(pop.population(data))
            if run.whatif.get("slowdown_by_optype")]
    if not runs:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "straggling runs (S >= 1.1) with whatif/whatif.json")
    per_job = np.array([[group_waste(run)[g] for g in GROUPS] for run in runs])  # [job, group]
    weights = np.array([run.gpu_time_s() for run in runs])
    wasted = (per_job * weights[:, None]).sum(axis=0)
    share = wasted / wasted.sum() if wasted.sum() > 0 else np.zeros(len(GROUPS))

    with figure_style():
        fig = new_figure(6.8, 2.8)
        ax, bx = fig.subplots(1, 2, width_ratios=[1.6, 1])
        for i, g in enumerate(GROUPS):
            pop.plot_cdf(ax, 100.0 * per_job[:, i], g.value, color=COLORS[g])
        ax.set_xlabel("waste attributed to the op group (% of job resources)")
        ax.legend(loc="best", frameon=False)
        ax.set_title(f"per job ({len(runs)} straggling jobs)", fontsize=8)
        y = np.arange(len(GROUPS))
        bx.barh(y, 100.0 * share, color=[COLORS[g] for g in GROUPS])
        bx.set_yticks(y, [g.value for g in GROUPS])
        bx.invert_yaxis()
        for yi, v in zip(y, share):
            bx.text(100.0 * v + 1, yi, f"{100 * v:.0f}%", va="center", fontsize=7)
        bx.set_xlim(0, 115)
        bx.set_xlabel("share of wasted worker-time (%)")
        bx.set_title("population", fontsize=8)
        fig.suptitle(TITLE)
        source_note(fig, pop.stamp(len(runs)) + "; paper: compute > PP comm > DP comm")
        paths = save_figure(fig, Path(out_dir) / NAME, pdf=True)

    keys = {OpGroup.COMPUTE: "compute", OpGroup.PP_COMM: "pp_comm",
            OpGroup.DP_COMM: "dp_comm", OpGroup.OTHER: "other"}
    ours: dict[str, float | str] = {"straggling_jobs": len(runs)}
    for i, g in enumerate(GROUPS):
        ours[f"{keys[g]}_waste_share_pct"] = pop.r(100.0 * share[i], 1)
        ours[f"{keys[g]}_median_waste_pct"] = pop.r(100.0 * float(np.median(per_job[:, i])), 2)
    order = [GROUPS[i].value for i in np.argsort(-share)]
    c, p, d = share[0], share[1], share[2]
    agree = c >= max(p, d) and p > d
    note = (f"Order of waste shares: {' > '.join(order)}. "
            + ("Agrees with the paper (compute dominates, PP comm > DP comm)."
               if agree else "Differs from the paper's order (compute > PP comm > DP comm)."))
    return FigureResult(NAME, paths, pop.source_label(len(runs)), PAPER, ours, note, TITLE)
