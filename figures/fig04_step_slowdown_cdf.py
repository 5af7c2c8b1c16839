"""Fig. 4: CDF of per-step slowdown divided by the job's slowdown, pooled over all steps.

A value near 1 means the step straggles as much as the job on average: the
paper finds stragglers persistent (median 1.0, P90 1.06). Drawn for all jobs
and for straggling jobs (S >= 1.1) alone.

Built by `stragglerlab figures --runs ... --only fig04_step_slowdown_cdf --out DIR`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stragglerlab.figures import population as pop
from stragglerlab.figures.data import FigureData, RunSummary
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

NAME = "fig04_step_slowdown_cdf"
TITLE = "Fig. 4: CDF of per-step slowdown / job slowdown"
PAPER = "median 1.0, P90 1.06"
PAPER_MEDIAN = 1.0
PAPER_P90 = 1.06
INPUTS = ("runs", "whatif")
"""Run-folder files this figure reads (figures/registry.py)."""


def step_ratios(runs: list[RunSummary]) -> np.ndarray:
    """Per-step S_step / S of every step of every run, concatenated."""
    parts = [np.array(list((run.whatif.get("step_slowdown") or {}).values()), dtype=float)
             / float(run.whatif["slowdown"]) for run in runs]
    return np.concatenate(parts) if parts else np.zeros(0)


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw the pooled per-step CDF with the paper's median and P90."""
    runs = [run for run in pop.population(data) if run.whatif.get("step_slowdown")]
    if not runs:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "ok runs with whatif/whatif.json (step_slowdown)")
    ratios = step_ratios(runs)
    strag = pop.straggling(runs)
    strag_ratios = step_ratios(strag)

    with figure_style():
        fig = new_figure(*pop.FIGSIZE)
        ax = fig.add_subplot()
        pop.plot_cdf(ax, ratios, f"all jobs ({len(runs)} jobs, {ratios.size} steps)")
        if strag_ratios.size:
            pop.plot_cdf(ax, strag_ratios, f"straggling jobs ({len(strag)})", color="tab:orange",
                         linestyle="--")
        ax.set_ylabel("CDF (fraction of steps)")
        ax.axvline(1.0, color="0.5", linestyle=":", linewidth=0.8)
        pop.paper_point(ax, PAPER_MEDIAN, 0.5, "paper median 1.0", offset=(12, -10))
        pop.paper_point(ax, PAPER_P90, 0.9, "paper P90 1.06", offset=(12, -10))
        lo, hi = pop.pct(ratios, 0.5), pop.pct(ratios, 99.5)
        ax.set_xlim(min(0.85, lo - 0.02), max(1.2, hi + 0.02))
        ax.set_xlabel("per-step slowdown / job slowdown S")
        pop.side_panel(ax, [("median", f"{pop.pct(ratios, 50):.3f}", "1.0"),
                            ("P90", f"{pop.pct(ratios, 90):.3f}", "1.06")])
        ax.set_title(TITLE, fontsize=9)
        source_note(fig, pop.stamp(len(runs)))
        paths = save_figure(fig, Path(out_dir) / NAME, pdf=True)

    ours: dict[str, float | str] = {
        "jobs": len(runs), "steps": int(ratios.size),
        "median": pop.r(pop.pct(ratios, 50)), "p90": pop.r(pop.pct(ratios, 90)),
        "p99": pop.r(pop.pct(ratios, 99)),
    }
    if strag_ratios.size:
        ours["straggling_median"] = pop.r(pop.pct(strag_ratios, 50))
        ours["straggling_p90"] = pop.r(pop.pct(strag_ratios, 90))
    p90 = float(ours["p90"])
    agree = abs(p90 - PAPER_P90) <= 0.03
    note = (f"P90 {p90:.3f} vs the paper's 1.06: "
            + ("agrees; stragglers persist across steps as in the paper."
               if agree else "our steps vary more around the job's slowdown than the paper's."
               if p90 > PAPER_P90 else "our steps vary less than the paper's."))
    return FigureResult(NAME, paths, pop.source_label(len(runs)), PAPER, ours, note, TITLE)
