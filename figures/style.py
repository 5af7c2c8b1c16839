"""Shared figure style: font sizes, resolution, atomic saving, data-source stamp.

Every figure module plots inside `with figure_style():` on a `new_figure(...)`
and writes with `save_figure(fig, path)`; figures that show data stamp where the
data came from with `source_note(fig, "testbed runs")`. Figures are built on
`matplotlib.figure.Figure` directly (no pyplot), so nothing needs a display and
nothing leaks between calls.

    from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note
    with figure_style():
        fig = new_figure(4.0, 3.0)
        ax = fig.add_subplot()
        ...
        source_note(fig, "reference traces (artifact)")
        save_figure(fig, "results/figures/fig3", pdf=True)  # fig3.png + fig3.pdf

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import matplotlib
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stragglerlab.util.atomic import atomic_write

FONT_SIZE = 9
"""Base font size (points): axis labels, legends."""
SMALL_FONT_SIZE = 7
"""Tick labels, cell annotations, source notes."""
TITLE_FONT_SIZE = 10
"""Axes titles and figure titles."""
DPI = 200
"""Resolution of saved PNGs (dots per inch)."""
COLUMN_WIDTH = 3.4
"""Width (inches) of a one-column figure in a two-column paper."""
MAX_FIGURE_WIDTH = 12.0
"""No figure is wider than this (inches), whatever the data size."""
NOTE_COLOR = "0.4"
"""Grey used for the 'data: ...' stamp."""

RC_PARAMS: dict[str, object] = {
    "font.size": FONT_SIZE,
    "axes.labelsize": FONT_SIZE,
    "axes.titlesize": TITLE_FONT_SIZE,
    "figure.titlesize": TITLE_FONT_SIZE,
    "legend.fontsize": SMALL_FONT_SIZE,
    "xtick.labelsize": SMALL_FONT_SIZE,
    "ytick.labelsize": SMALL_FONT_SIZE,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.05,
    "pdf.fonttype": 42,  # embed TrueType, editable text in the PDF
    "ps.fonttype": 42,
}


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    """Apply the shared rcParams for the duration of the block (restored after)."""
    with matplotlib.rc_context(RC_PARAMS):
        yield


def new_figure(width: float = COLUMN_WIDTH, height: float = 2.4) -> Figure:
    """A pyplot-free Figure with constrained layout, width capped at MAX_FIGURE_WIDTH."""
    return Figure(figsize=(min(width, MAX_FIGURE_WIDTH), height), layout="constrained")


def _base_path(path: str | Path) -> Path:
    p = Path(path)
    return p.with_suffix("") if p.suffix.lower() in (".png", ".pdf") else p


def save_figure(fig: Figure, path: str | Path, pdf: bool = False, dpi: int = DPI) -> list[Path]:
    """Write fig as PNG (and PDF when pdf=True) atomically; return the paths written.

    path may end in '.png' / '.pdf' or have no extension: 'out/fig3' and
    'out/fig3.png' both write 'out/fig3.png' (and 'out/fig3.pdf'). Each file is
    written to a temporary file in the same folder and renamed into place, so a
    reader never sees a half-written image.
    """
    base = _base_path(path)
    written: list[Path] = []
    for fmt in ("png", "pdf") if pdf else ("png",):
        target = base.parent / f"{base.name}.{fmt}"

        def _write(tmp: str, fmt: str = fmt) -> None:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.05)

        atomic_write(target, _write)
        written.append(target)
    return written


def source_note(ax_or_fig: Axes | Figure, text: str) -> Artist | None:
    """Stamp 'data: <text>' small and grey in the bottom-right corner, below everything.

    Given an Axes, the note goes on its figure. The note hangs below the figure's
    bottom edge, and saving with bbox_inches='tight' (as save_figure does) grows
    the canvas to include it, so it never covers tick or axis labels. Returns
    the Text artist, or None when text is empty.
    """
    if not text:
        return None
    fig = ax_or_fig.get_figure() if isinstance(ax_or_fig, Axes) else ax_or_fig
    if fig is None:
        raise ValueError("source_note: the Axes is not attached to a figure")
    label = text if text.startswith("data:") else f"data: {text}"
    return fig.text(
        0.995,
        0.0,
        label,
        ha="right",
        va="top",
        fontsize=SMALL_FONT_SIZE - 1,
        color=NOTE_COLOR,
        style="italic",
    )
