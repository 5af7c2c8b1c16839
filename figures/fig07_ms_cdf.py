"""Fig. 7: CDF of M_S over straggling PP jobs: how much of the slowdown the last stage explains.

M_S = (T - T_fixLastStage) / (T - T_ideal) (whatif.json `m_s.rem`; 0 without
PP, so pure-DP jobs are left out). The paper finds M_S >= 0.5 in 39.3% of
jobs: the last stage (loss layer) is a common straggler cause.

Built by `stragglerlab figures --runs ... --only fig07_ms_cdf --out DIR`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stragglerlab.figures import population as pop
from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

NAME = "fig07_ms_cdf"
TITLE = "Fig. 7: CDF of M_S (fixing the last stage) over straggling PP jobs"
PAPER = "M_S >= 0.5 in 39.3% of jobs"
THRESHOLD = 0.5
PAPER_SHARE_PCT = 39.3
INPUTS = ("runs", "whatif")
"""Run-folder files this figure reads (figures/registry.py)."""


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw the M_S CDF of straggling jobs that use pipeline parallelism."""
    runs = [run for run in pop.straggling(pop.population(data))
            if run.meta.pp_size > 1 and run.whatif.get("m_s")]
    if not runs:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "straggling runs (S >= 1.1) with PP > 1 and whatif/whatif.json")
    ms = np.array([float(run.whatif["m_s"]["rem"]) for run in runs])
    share = 100.0 * float(np.mean(ms >= THRESHOLD))

    with figure_style():
        fig = new_figure(*pop.FIGSIZE)
        ax = fig.add_subplot()
        pop.plot_cdf(ax, ms, f"testbed ({len(runs)} straggling PP jobs)")
        ax.axvline(THRESHOLD, color="0.5", linestyle=":", linewidth=0.8)
        pop.paper_point(ax, THRESHOLD, 1 - PAPER_SHARE_PCT / 100, "paper: 39.3% at >= 0.5",
                        offset=(12, -12))
        ax.set_xlim(min(-0.1, float(ms.min()) - 0.05), max(1.1, float(ms.max()) + 0.05))
        ax.set_xlabel("M_S: share of slowdown fixed by the last stage")
        pop.side_panel(ax, [("jobs M_S >= 0.5", f"{share:.1f}%", "39.3%")])
        ax.set_title(TITLE, fontsize=8)
        source_note(fig, pop.stamp(len(runs)))
        paths = save_figure(fig, Path(out_dir) / NAME, pdf=True)

    ours = {"straggling_pp_jobs": len(runs), "ms_ge_0_5_pct": pop.r(share, 2),
            "median_ms": pop.r(float(np.median(ms)))}
    close = abs(share - PAPER_SHARE_PCT) <= 10.0
    note = (f"M_S >= 0.5 in {share:.1f}% of our straggling PP jobs vs the paper's 39.3%"
            + (": close." if close else
               ": the share follows our scenario mix (how many stage-imbalance jobs the suite "
               "holds), not a production cluster's."))
    return FigureResult(NAME, paths, pop.source_label(len(runs)), PAPER, ours, note, TITLE)
