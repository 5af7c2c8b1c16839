"""Fig. 3: CDF over jobs of the resources wasted by stragglers, waste = 1 - 1/S (Eq. 3).

Numbers beside the paper's: share of jobs with S >= 1.1, P50/P90/P99 waste,
and the share of all worker-time wasted (each job weighted by world_size x
its traced wall time, the testbed's GPU-hours).

Built by `stragglerlab figures --runs ... --only fig03_waste_cdf --out DIR`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stragglerlab.figures import population as pop
from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

NAME = "fig03_waste_cdf"
TITLE = "Fig. 3: CDF of waste (1 - 1/S) over jobs"
PAPER = ("42.5% of jobs S >= 1.1; 10.4% of GPU-hours wasted; "
         "P90 waste 21.3%, P99 45.0%")
PAPER_STRAGGLING_PCT = 42.5
PAPER_GPU_WASTED_PCT = 10.4
PAPER_P90_PCT = 21.3
PAPER_P99_PCT = 45.0
INPUTS = ("runs", "whatif")
"""Run-folder files this figure reads (figures/registry.py)."""


def waste_numbers(slowdown: np.ndarray, gpu_time_s: np.ndarray) -> dict[str, float]:
    """Share straggling, waste percentiles and time-weighted waste, all in percent."""
    waste = 1.0 - 1.0 / slowdown
    total = float(gpu_time_s.sum())
    weighted = float((waste * gpu_time_s).sum() / total) if total > 0 else float("nan")
    return {
        "jobs": int(slowdown.size),
        "straggling_jobs_pct": 100.0 * float(np.mean(slowdown >= pop.STRAGGLING_S)),
        "gpu_time_wasted_pct": 100.0 * weighted,
        "p50_waste_pct": 100.0 * pop.pct(waste, 50),
        "p90_waste_pct": 100.0 * pop.pct(waste, 90),
        "p99_waste_pct": 100.0 * pop.pct(waste, 99),
    }


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw the waste CDF of the testbed population with the paper's marks."""
    runs = pop.population(data)
    if not runs:
        return no_data(NAME, TITLE, PAPER, out_dir, "ok runs with whatif/whatif.json")
    s = pop.slowdowns(runs)
    gpu = np.array([run.gpu_time_s() for run in runs])
    num = waste_numbers(s, gpu)
    waste_pct = 100.0 * (1.0 - 1.0 / s)

    with figure_style():
        fig = new_figure(*pop.FIGSIZE)
        ax = fig.add_subplot()
        pop.plot_cdf(ax, waste_pct, f"testbed ({len(runs)} jobs)")
        thr = 100.0 * (1.0 - 1.0 / pop.STRAGGLING_S)
        ax.axvline(thr, color="0.5", linestyle=":", linewidth=0.8)
        ax.text(thr, 0.5, " S = 1.1", color="0.4", fontsize=6.5, rotation=90, va="center",
                ha="right")
        pop.paper_point(ax, PAPER_P90_PCT, 0.90, "paper P90 21.3%", offset=(-14, 10))
        pop.paper_point(ax, PAPER_P99_PCT, 0.99, "paper P99 45.0%", offset=(-6, -28))
        ax.set_xlabel("waste 1 - 1/S (% of the job's resources)")
        ax.set_xlim(min(-1.0, float(waste_pct.min()) - 1.0),
                    max(50.0, float(waste_pct.max()) + 2.0))
        pop.side_panel(ax, [
            ("jobs S >= 1.1", f"{num['straggling_jobs_pct']:.1f}%", "42.5%"),
            ("time wasted", f"{num['gpu_time_wasted_pct']:.1f}%", "10.4%"),
            ("P90 waste", f"{num['p90_waste_pct']:.1f}%", "21.3%"),
            ("P99 waste", f"{num['p99_waste_pct']:.1f}%", "45.0%"),
        ])
        ax.set_title(TITLE, fontsize=9)
        source_note(fig, pop.stamp(len(runs)))
        paths = save_figure(fig, Path(out_dir) / NAME, pdf=True)

    ours = {k: (v if k == "jobs" else pop.r(v, 2)) for k, v in num.items()}
    higher = num["straggling_jobs_pct"] > PAPER_STRAGGLING_PCT
    note = (f"{num['straggling_jobs_pct']:.1f}% of our jobs straggle vs the paper's 42.5%: "
            f"{'more' if higher else 'fewer'} than in production, as expected for a suite "
            "built around injected faults; the shares describe our scenario mix, not a "
            "production cluster.")
    return FigureResult(NAME, paths, pop.source_label(len(runs)), PAPER, ours, note, TITLE)
