"""The pictures of one analysed job: its worker heatmap and its per-step slowdown.

Drawn from the what-if result of any analysed job (a testbed run, an imported
Kineto trace, annotated or not, an artifact trace, a synthetic folder) as one
`WhatIfSummary` (stragglerlab.run.whatif_summary): `result.summary()` of the
analysis just run, or `read_whatif_summary(path)` of its whatif.json, so a job
analysed once is never re-analysed to be drawn.

* the worker heatmap: min(S_dp, S_stage) per worker, PP rank x DP rank, the
  Fig. 14 heatmap (`figures.fig14_heatmap.worker_heatmap_figure`, the same
  drawing the figure `fig14_heatmaps` uses);
* the per-step slowdown: the step times (actual from the trace, simulated T,
  ideal T_ideal) above S per step, with the job's S and the straggling
  threshold 1.1 drawn across.

`stragglerlab plot` writes both with `write_job_pictures` (`heatmap.png`,
`step-slowdown.png`, each with its `.pdf` and a `.json` of the numbers
drawn, as the figures do); the Python API's `Job.heatmap()` and
`Job.step_plot()` return the same Figures.

    from stragglerlab.figures.job_pictures import heatmap_figure, write_job_pictures
    fig = heatmap_figure(result.summary(), title="slow-worker")   # a matplotlib Figure
    paths = write_job_pictures(read_whatif_summary("run"), "run/plot")

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from stragglerlab.figures.fig14_heatmap import worker_heatmap_figure
from stragglerlab.figures.style import (
    COLUMN_WIDTH,
    MAX_FIGURE_WIDTH,
    figure_style,
    new_figure,
    save_figure,
    source_note,
)
from stragglerlab.run.validity import Validity
from stragglerlab.run.whatif_summary import WhatIfSummary
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError

SCHEMA = "stragglerlab.plot/1"
"""The `schema` value of the pictures' JSON files."""
HEATMAP = "heatmap"
"""Basename of the worker heatmap (heatmap.png, .pdf, .json)."""
STEP_SLOWDOWN = "step-slowdown"
"""Basename of the per-step slowdown picture (step-slowdown.png, .pdf, .json)."""
PICTURES = (HEATMAP, STEP_SLOWDOWN)
STRAGGLING = 1.1
"""S at and above which the paper calls a job straggling."""
BANNER_CHARS, BANNER_LINES = 110, 4
"""The banner of an invalid result: characters per line, most lines."""
MARKERS_UP_TO = 60
"""Steps drawn with a marker each up to this many steps (a line only above)."""

@dataclass(frozen=True)
class JobSeries:
    """What the pictures draw, from a WhatIfResult or a whatif.json alike."""

    name: str
    """The job's trial name ('' when the meta has none)."""
    compute_ideal: str
    """The compute ideal of the numbers ('mean' or 'median')."""
    slowdown: float
    """The job's S = T / T_ideal."""
    worker_score: np.ndarray
    """min(S_dp, S_stage) per worker, [pp, dp]."""
    steps: np.ndarray
    """Traced step numbers, ascending."""
    step_slowdown: np.ndarray
    """S per step."""
    step_time_actual_s: np.ndarray
    """Step time measured in the trace, s."""
    step_time_simulated_s: np.ndarray
    """Simulated step time without launch delays (T), s."""
    step_time_ideal_s: np.ndarray
    """Simulated ideal step time (T_ideal), s."""
    columns: list[int] | None = None
    """Without a known layout (an unannotated import): the ranks `worker_score`'s one row
    holds, in order; None for a [pp, dp] grid."""
    validity: Validity | None = None
    """The reproduction gate; an invalid result is drawn under a banner that says so."""


def job_series(summary: WhatIfSummary) -> JobSeries:
    """The pictures' numbers of a what-if result (`WhatIfResult.summary()`, or
    `stragglerlab.run.whatif_reader.read_whatif_summary` of its whatif.json, either model's).

    InputError when the result lacks the per-step times (a whatif.json of an unannotated
    import written before they were recorded).
    """
    if not isinstance(summary, WhatIfSummary):
        raise TypeError(f"expected a WhatIfSummary, got {type(summary).__name__} (a result "
                        "in memory: result.summary(); a file: read_whatif_summary(path))")
    st = summary.steps
    if not st.has_times:
        folder = Path(summary.path).parent if summary.path else "DIR"
        raise InputError("the what-if result lacks the per-step times the pictures draw "
                         "(written by an older stragglerlab); rewrite it with `stragglerlab "
                         f"whatif --run {folder}`", summary.path or None)
    w = summary.workers
    return JobSeries(
        name=summary.job_name, compute_ideal=summary.compute_ideal, slowdown=summary.S,
        worker_score=w.grid(), steps=st.step, step_slowdown=st.s,
        step_time_actual_s=st.traced_s, step_time_simulated_s=st.t_s,
        step_time_ideal_s=st.t_ideal_s,
        columns=None if w.has_layout else [int(r) for r in w.rank], validity=summary.validity)


def _banner(fig: Figure, validity: Validity | None) -> None:
    """Across the top of an invalid result's picture: no verdict (or forced), and why."""
    if validity is None or validity.valid:
        return
    text = "\n".join(textwrap.wrap(validity.banner(), BANNER_CHARS)[:BANNER_LINES])
    with figure_style():
        fig.text(0.5, 0.995, text, ha="center", va="top", fontsize=6.5, color="white",
                 bbox={"facecolor": "tab:red", "edgecolor": "none", "pad": 2.5})


def heatmap_figure(summary: WhatIfSummary, title: str = "", source: str = "") -> Figure:
    """The worker heatmap (DP rank x PP rank, min(S_dp, S_stage), Fig. 14 colours; one row
    of ranks where the layout is unknown)."""
    js = job_series(summary)
    fig = worker_heatmap_figure(js.worker_score, title=title, source=source,
                                columns=js.columns)
    _banner(fig, js.validity)
    return fig


def step_slowdown_figure(summary: WhatIfSummary, title: str = "",
                         source: str = "") -> Figure:
    """Step times (actual, simulated T, ideal T_ideal) above S per step, one x axis."""
    js = job_series(summary)
    n = len(js.steps)
    marker = "o" if n <= MARKERS_UP_TO else None
    line = {"marker": marker, "markersize": 3, "linewidth": 1.1}
    with figure_style():
        fig = new_figure(min(MAX_FIGURE_WIDTH, max(COLUMN_WIDTH * 1.4, 1.6 + 0.12 * n)), 3.8)
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1.0, 1.2])
        top.plot(js.steps, js.step_time_simulated_s, color="black", label="simulated T", **line)
        top.plot(js.steps, js.step_time_ideal_s, color="tab:green", linestyle="--",
                 label="ideal T_ideal", **line)
        # On top and hollow: the actual times mostly sit on the simulated ones.
        top.plot(js.steps, js.step_time_actual_s, color="tab:blue", label="actual (trace)",
                 linestyle=":", markerfacecolor="none", **line)
        top.set_ylabel("step time (s)")
        tallest = float(np.max([js.step_time_actual_s, js.step_time_simulated_s]))
        top.set_ylim(0, 1.35 * tallest if tallest > 0 else 1.0)  # room for the legend
        top.legend(loc="upper right", ncols=3, frameon=False)
        bottom.plot(js.steps, js.step_slowdown, color="tab:red", label="S per step", **line)
        bottom.axhline(js.slowdown, color="tab:red", linestyle="--", linewidth=0.8,
                       label=f"job S = {js.slowdown:.3f}")
        bottom.axhline(STRAGGLING, color="0.45", linestyle=":", linewidth=0.9,
                       label=f"straggling (S >= {STRAGGLING})")
        lo = min(0.98, float(np.min(js.step_slowdown)) - 0.02)
        hi = max(STRAGGLING + 0.05, float(np.max(js.step_slowdown)) + 0.03)
        bottom.set_ylim(lo, hi)
        bottom.set_ylabel("slowdown S")
        bottom.set_xlabel("step")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        bottom.legend(loc="best", ncols=3, frameon=False)
        if title:
            fig.suptitle(title)
        source_note(fig, source)
    _banner(fig, js.validity)
    return fig


def _hottest(cells: np.ndarray, columns: list[int] | None = None) -> dict:
    p, d = np.unravel_index(int(np.nanargmax(cells)), cells.shape)
    if columns is not None:
        return {"score": float(cells[p, d]), "rank": int(columns[d])}
    return {"score": float(cells[p, d]), "dp_rank": int(d), "stage": int(p)}


def write_job_pictures(summary: WhatIfSummary, out_dir: str | Path,
                       title: str = "", source: str = "", pdf: bool = True) -> list[Path]:
    """Write heatmap.png and step-slowdown.png (with .pdf when pdf, and each a .json of
    the numbers drawn, schema SCHEMA) into out_dir; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js = job_series(summary)
    common = {"schema": SCHEMA, "job": js.name, "title": title, "source": source,
              "compute_ideal": js.compute_ideal, "slowdown": js.slowdown,
              "validity": None if js.validity is None else js.validity.to_dict()}
    numbers = {
        HEATMAP: {"worker_score": [[None if np.isnan(v) else float(v) for v in row]
                                   for row in js.worker_score],
                  "hottest_worker": _hottest(js.worker_score, js.columns),
                  **({} if js.columns is None else {"ranks": js.columns})},
        STEP_SLOWDOWN: {"steps": js.steps.tolist(), "step_slowdown": js.step_slowdown.tolist(),
                        "step_time_actual_s": js.step_time_actual_s.tolist(),
                        "step_time_simulated_s": js.step_time_simulated_s.tolist(),
                        "step_time_ideal_s": js.step_time_ideal_s.tolist()},
    }
    draw = {HEATMAP: heatmap_figure, STEP_SLOWDOWN: step_slowdown_figure}
    paths: list[Path] = []
    for name in PICTURES:
        fig = draw[name](summary, title=title, source=source)
        with figure_style():  # the PDF's font embedding is read when saving
            images = save_figure(fig, out / name, pdf=pdf)
        sidecar = out / f"{name}.json"
        atomic_write_json(sidecar, {**common, "name": name,
                                    "paths": [p.name for p in images], **numbers[name]})
        paths += [*images, sidecar]
    return paths
