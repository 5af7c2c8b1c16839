"""Detector confusion matrices: each run's true root cause vs the cause a detector predicted.

One panel per detector of `scores.json` (`stragglerlab score`), in leaderboard
order (by F1, best first: the headline detector is the first panel). Rows: the
true root cause (the run's fault kind, `none` for a clean run); columns: the
label of the detector's most confident finding (`none` without findings).
Cells are shares of the row's runs (colour) with the run count written in
them. The matrices, their labels and each detector's cause accuracy go into
`ours` (so into `fig_confusion.json`). Without a scores file it writes the
"no data" image.

Built by `stragglerlab figures --scores results/scores.json --only fig_confusion
--out results/figures` (the workflow's rule `figure_fig_confusion`, after `score`).
"""

from __future__ import annotations

from pathlib import Path

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.scores import Matrix, confusion_matrices

NAME = "fig_confusion"
TITLE = "Detector confusion matrices: true root cause vs predicted cause"
PAPER = "none (the testbed's detector benchmark; the paper scores no detectors)"
INPUTS = ("scores",)
"""What this figure reads (figures/registry.py): the scores file only."""
MAX_COLUMNS = 4
"""Panels per row of the grid."""
PANEL_INCHES = 2.9
"""Width and height of one panel."""


def _draw(mats: list[Matrix], out_dir: Path, source: str) -> list[Path]:
    from stragglerlab.figures.style import (  # matplotlib only when drawing
        SMALL_FONT_SIZE,
        figure_style,
        new_figure,
        save_figure,
        source_note,
    )

    ncols = min(len(mats), MAX_COLUMNS)
    nrows = -(-len(mats) // ncols)
    with figure_style():
        fig = new_figure(PANEL_INCHES * ncols + 0.6, PANEL_INCHES * nrows + 0.5)
        axes = fig.subplots(nrows, ncols, squeeze=False)
        image = None
        for k, (ax, m) in enumerate(zip(axes.flat, mats)):
            share = [[n / max(sum(row), 1) for n in row] for row in m.counts]
            image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
            ticks = range(len(m.labels))
            ax.set_xticks(ticks, m.labels, rotation=60, ha="right")
            ax.set_yticks(ticks, m.labels)
            for i, row in enumerate(m.counts):
                for j, n in enumerate(row):
                    if n:
                        ax.text(j, i, str(n), ha="center", va="center",
                                fontsize=SMALL_FONT_SIZE - 1,
                                color="white" if share[i][j] > 0.6 else "black")
            head = " (headline)" if k == 0 else ""
            ax.set_title(f"{m.detector}{head}: {m.right()}/{m.runs} right", fontsize=8)
            ax.set_xlabel("predicted cause")
            if k % ncols == 0:
                ax.set_ylabel("true cause")
        for ax in list(axes.flat)[len(mats):]:
            ax.set_axis_off()
        if image is not None:
            fig.colorbar(image, ax=axes, shrink=0.6, label="share of the row's runs")
        fig.suptitle(TITLE)
        source_note(fig, source)
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """One confusion-matrix panel per detector of the scores file."""
    if data.scores is None:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "detector scores (`stragglerlab figures --scores results/scores.json`)")
    mats = confusion_matrices(data.scores)
    if not mats or not any(m.runs for m in mats):
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "scores with a confusion matrix (rewrite them with `stragglerlab score`)",
                       source=f"scores: {data.scores.path}")
    runs = max(m.runs for m in mats)
    source = f"detector scores ({len(mats)} detectors, {runs} scored runs)"
    paths = _draw(mats, out_dir, source)
    head = mats[0]
    ours: dict = {
        "labels": head.labels,
        "headline": head.detector,
        "detectors": [m.detector for m in mats],
        "matrices": {m.detector: m.counts for m in mats},
        "cause_right": {m.detector: m.right() for m in mats},
        "runs": {m.detector: m.runs for m in mats},
    }
    worst = head.worst_confusion()
    note = (f"The headline detector `{head.detector}` (best F1) names the right cause in "
            f"{head.right()} of {head.runs} runs"
            + (f"; its most frequent confusion: {worst[0]} taken for {worst[1]} "
               f"({worst[2]} run{'s' if worst[2] != 1 else ''})." if worst else ".")
            + " Net-throttle/net-delay and hang/crash count as the same cause.")
    return FigureResult(NAME, paths, source, PAPER, ours, note, TITLE)
