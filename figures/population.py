"""Shared pieces of the population figures (Fig. 3-7, 11, the discrepancy CDF).

The paper's figures are distributions over thousands of production jobs; ours
are over a few dozen testbed jobs (every ok run with a what-if result). This
module holds what those figures share: the population, its source label, CDF
drawing, percentiles and the paper's reference marks.

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from stragglerlab.figures.data import FigureData, RunSummary

STRAGGLING_S = 1.1
"""A job straggles when S >= 1.1 (paper §3)."""
PAPER_POPULATION = "the paper's: thousands of production jobs"
PAPER_COLOR = "tab:red"
"""Colour of the paper's reference marks."""
OURS_COLOR = "tab:blue"


def population(data: FigureData) -> list[RunSummary]:
    """The jobs of the population figures: ok runs with a what-if result."""
    return data.analysed_runs()


def source_label(n_jobs: int) -> str:
    """FigureResult.source of a population figure."""
    return f"testbed runs ({n_jobs} jobs)"


def stamp(n_jobs: int) -> str:
    """The figure's 'data:' stamp: our population beside the paper's."""
    return f"{source_label(n_jobs)}; {PAPER_POPULATION}"


def pct(values, q: float) -> float:
    """q-th percentile (linear interpolation, numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def r(x: float | None, nd: int = 3) -> float | None:
    """Round for the `ours` dict (None passes through)."""
    return None if x is None else round(float(x), nd)


def slowdowns(runs: list[RunSummary]) -> np.ndarray:
    """S of each run."""
    return np.array([float(run.whatif["slowdown"]) for run in runs], dtype=float)


def straggling(runs: list[RunSummary]) -> list[RunSummary]:
    """Runs with S >= 1.1."""
    return [run for run in runs if float(run.whatif["slowdown"]) >= STRAGGLING_S]


def plot_cdf(ax: Axes, values, label: str, color: str = OURS_COLOR, **kw) -> None:
    """Empirical CDF as a step line with a dot per job (few jobs: every one is visible)."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0:
        return
    y = np.arange(1, v.size + 1) / v.size
    ax.step(np.concatenate([[v[0]], v]), np.concatenate([[0.0], y]), where="post",
            color=color, label=label, **kw)
    if v.size <= 200:
        ax.plot(v, y, "o", color=color, markersize=2.5)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("CDF (fraction of jobs)")
    ax.grid(True, alpha=0.3, linewidth=0.5)


def paper_point(ax: Axes, x: float, y: float, text: str,
                offset: tuple[float, float] = (8.0, -12.0)) -> None:
    """The paper's number as a red cross on the CDF, labelled `offset` points away."""
    ax.plot([x], [y], "x", color=PAPER_COLOR, markersize=6, mew=1.5, zorder=5)
    ax.annotate(text, (x, y), xytext=offset, textcoords="offset points", fontsize=6.5,
                color=PAPER_COLOR, ha="left" if offset[0] >= 0 else "right", va="center",
                arrowprops={"arrowstyle": "-", "color": PAPER_COLOR, "lw": 0.5},
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})


FIGSIZE = (6.0, 2.8)
"""Size (inches) of a population CDF figure: a ~4 in plot plus the side panel."""


def side_panel(ax: Axes, rows: list[tuple[str, str, str]]) -> None:
    """Legend (top) and a small 'ours vs paper' table (bottom) right of the axes.

    rows: (what, ours, paper) strings. Both hang outside the plot, so they never
    cover data, whatever the data.
    """
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, borderaxespad=0.0)
    w0 = max(len(r[0]) for r in rows)
    w1 = max(4, *(len(r[1]) for r in rows))
    lines = [f"{'':<{w0}}  {'ours':>{w1}}  paper"]
    lines += [f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows]
    ax.text(1.03, 0.0, "\n".join(lines), transform=ax.transAxes, ha="left", va="bottom",
            fontsize=6.5, family="monospace", linespacing=1.4,
            bbox={"boxstyle": "round,pad=0.4", "fc": "white", "ec": "0.7"})
