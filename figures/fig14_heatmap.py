"""Fig. 14: DP x PP heatmap of worker slowdown scores min(S_dp, S_stage).

Rows are pipeline (PP) ranks with stage 0 at the top, columns are DP ranks, the
colour scale is fixed to 1.0-1.5 (white = no slowdown, dark red = 1.5x or more)
as in the paper's Fig. 14 and the artifact's heatmap images. Small grids get
each cell annotated with its value; large grids (e.g. dp=1024) drop the
annotations and cell borders and thin the tick labels, and the figure width
stays bounded.

A plotting library; the registered figure that uses it is
`figures/fig14_heatmaps.py` (`stragglerlab figures --only fig14_heatmaps`):

    from stragglerlab.figures.fig14_heatmap import plot_worker_heatmap, worker_heatmap_figure
    plot_worker_heatmap(scores, "out/heatmap.png", title="AR", source="reference traces")
    fig = worker_heatmap_figure(scores, title="AR")     # the Figure only, nothing written

`figures/job_pictures.py` draws the same heatmap of one analysed job (a
WhatIfResult or its whatif.json) for `stragglerlab plot` and `Job.heatmap()`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from stragglerlab.figures.style import (
    FONT_SIZE,
    MAX_FIGURE_WIDTH,
    SMALL_FONT_SIZE,
    figure_style,
    new_figure,
    save_figure,
    source_note,
)

VMIN, VMAX = 1.0, 1.5
"""Fixed colour scale, as in the paper and the artifact."""
CMAP = "Reds"
CBAR_LABEL = "worker slowdown  min(S_dp, S_stage)"
CELL_INCHES = 0.42
"""Cell edge when the grid is small enough to annotate."""
MIN_CELL_INCHES = 0.3
"""Below this cell size values are not written in the cells."""
MAX_HEIGHT = 8.0
CBAR_MAX_INCHES = 3.5
CBAR_THICK_INCHES = 0.12
MAX_TICKS = 24
"""Axes with more ranks than this show a thinned subset of tick labels."""


def _ticks(ax_axis, n: int) -> None:
    if n <= MAX_TICKS:
        ax_axis.set_ticks(range(n))
    else:
        ax_axis.set_major_locator(MaxNLocator(nbins=12, integer=True, min_n_ticks=3))


def plot_worker_heatmap(
    scores: np.ndarray,
    out_path: str | Path,
    title: str = "",
    source: str = "",
    fmt: str = ".2f",
    annotate: bool | None = None,
    pdf: bool = False,
) -> Figure:
    """Draw the worker-score heatmap and write it as PNG (and PDF when pdf) to out_path.

    Arguments as `worker_heatmap_figure`. Returns the Figure (pyplot-free; its first
    Axes holds the annotation Texts).
    """
    fig = worker_heatmap_figure(scores, title=title, source=source, fmt=fmt,
                                annotate=annotate)
    with figure_style():
        save_figure(fig, out_path, pdf=pdf)
    return fig


def worker_heatmap_figure(
    scores: np.ndarray,
    title: str = "",
    source: str = "",
    fmt: str = ".2f",
    annotate: bool | None = None,
    columns: list[int] | None = None,
) -> Figure:
    """The worker-score heatmap as a Figure (nothing written; save with `save_figure`
    inside `figure_style()`).

    scores: array shaped [pp_size, dp_size] (a 1-D array is one stage); NaN
    cells are drawn grey and not annotated. fmt formats the cell values (the
    artifact's seaborn default is '.2g'; '.2f' keeps 0.98 vs 1.00 apart).
    annotate: None = only when the cells are big enough to read. Its first Axes
    holds the annotation Texts. columns: a job without a known layout drawn as one row of
    its traced ranks (an unannotated import): their rank numbers, labelled "rank".
    """
    data = np.asarray(scores, dtype=float)
    if data.ndim == 1:
        data = data[np.newaxis, :]
    if data.ndim != 2 or data.size == 0:
        raise ValueError(f"scores must be a non-empty [pp_size, dp_size] array, got {data.shape}")
    pp, dp = data.shape

    # Cell size: comfortable when small, shrunk to keep the figure bounded.
    plot_w_max, plot_h_max = MAX_FIGURE_WIDTH - 1.0, MAX_HEIGHT - 1.6
    cell = min(CELL_INCHES, plot_w_max / dp, plot_h_max / pp)
    cell_w = min(CELL_INCHES, plot_w_max / dp)
    cell_h = min(CELL_INCHES, plot_h_max / pp)
    if annotate is None:
        annotate = cell >= MIN_CELL_INCHES
    plot_w = max(dp * cell_w, 1.2)
    plot_h = max(pp * cell_h, 0.9 if dp > MAX_TICKS else 0.4)
    has_title = bool(title)
    fig_w = plot_w + 0.9
    fig_h = plot_h + 1.3 + (0.25 if has_title else 0.0)

    with figure_style():
        fig = new_figure(fig_w, fig_h)
        ax = fig.add_subplot()
        cmap = colormaps[CMAP].with_extremes(bad="0.85")
        norm = Normalize(VMIN, VMAX)
        masked = np.ma.masked_invalid(data)
        im = ax.imshow(
            masked, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest", origin="upper"
        )
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        # White cell borders only where cells are large enough to see them.
        if cell_w >= 0.08 and cell_h >= 0.08:
            ax.set_xticks(np.arange(dp + 1) - 0.5, minor=True)
            ax.set_yticks(np.arange(pp + 1) - 0.5, minor=True)
            ax.grid(which="minor", color="white", linewidth=1.0)
            ax.tick_params(which="minor", length=0)
        _ticks(ax.xaxis, dp)
        _ticks(ax.yaxis, pp)
        if columns is None:
            ax.set_xlabel("DP rank", fontsize=FONT_SIZE)
            ax.set_ylabel("PP rank", fontsize=FONT_SIZE)
        else:
            if dp <= MAX_TICKS:
                ax.set_xticks(range(dp), [str(r) for r in columns])
            ax.set_yticks([])
            ax.set_xlabel("rank (layout unknown)", fontsize=FONT_SIZE)

        if annotate:
            size = max(5.0, min(SMALL_FONT_SIZE + 1, cell * 72 * 0.38))
            rgba = cmap(norm(np.nan_to_num(data, nan=VMIN)))
            lum = 0.299 * rgba[..., 0] + 0.587 * rgba[..., 1] + 0.114 * rgba[..., 2]
            for (p, d), v in np.ndenumerate(data):
                if math.isnan(v):
                    continue
                ax.text(
                    d, p, format(v, fmt), ha="center", va="center", fontsize=size,
                    color="white" if lum[p, d] < 0.5 else "black",
                )

        extend = {
            (False, False): "neither", (True, False): "min",
            (False, True): "max", (True, True): "both",
        }[(bool(np.nanmin(data) < VMIN), bool(np.nanmax(data) > VMAX))]
        bar_len = min(plot_w, CBAR_MAX_INCHES)
        cbar = fig.colorbar(
            im, ax=ax, location="top", extend=extend, ticks=[1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
            shrink=bar_len / plot_w, aspect=bar_len / CBAR_THICK_INCHES, pad=0.02,
        )
        cbar.set_label(CBAR_LABEL, fontsize=SMALL_FONT_SIZE + 1)
        cbar.ax.tick_params(labelsize=SMALL_FONT_SIZE)
        if dp > MAX_TICKS or pp > MAX_TICKS:
            ax.set_title(f"{pp} PP x {dp} DP workers", fontsize=SMALL_FONT_SIZE, loc="right")
        if has_title:
            fig.suptitle(title)
        source_note(fig, source)
    return fig
