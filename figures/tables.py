"""Shared pieces of the table figures (§6 table, mitigation gains): seed pairing and drawing.

Two scenarios are compared over matching seeds: for every (seed, run length)
both have ok runs, the ratio of their mean step times (replicas averaged
first); the comparison is the mean of those per-seed ratios. Run length
(scenario `run.steps`) is part of the key so that runs of a shortened suite
(`--steps N`) are never paired with full-length ones.

This module is a library; it has nothing to run on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stragglerlab.figures.data import RunSummary
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note


@dataclass
class PairedRatio:
    """Mean step time of scenario A over scenario B, over matching seeds."""

    ratio: float
    """Mean over seeds of mean_step(A) / mean_step(B)."""
    seeds: list[int]
    """Seeds both scenarios ran (with the same run length)."""
    step_a_s: float
    """Mean step time of A over those seeds, s."""
    step_b_s: float
    """Mean step time of B over those seeds, s."""
    runs_a: list[RunSummary]
    """A's runs of those seeds."""
    runs_b: list[RunSummary]
    """B's runs of those seeds."""
    ratios: list[float] = field(default_factory=list)
    """The per-seed ratios mean_step(A) / mean_step(B), in seed order (the repeats)."""


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Mean and spread of repeated measurements."""

    mean: float
    """Mean over the repeats."""
    sd: float
    """Sample standard deviation (0 for one repeat)."""
    lo: float
    """Smallest repeat."""
    hi: float
    """Largest repeat."""
    n: int
    """Number of repeats."""

    def __post_init__(self) -> None:
        if self.n < 1 or not self.lo <= self.mean <= self.hi or self.sd < 0:
            raise ValueError(f"inconsistent spread {self}")

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        """Spread of a non-empty list of values."""
        if not values:
            raise ValueError("a spread needs at least one value")
        arr = np.asarray(values, dtype=float)
        mean = float(arr.mean())
        return cls(mean=min(max(mean, float(arr.min())), float(arr.max())),
                   sd=float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
                   lo=float(arr.min()), hi=float(arr.max()), n=len(arr))

    def cell(self, digits: int = 2, scale: float = 1.0) -> str:
        """'±sd (lo–hi)' for a table cell; '-' for one repeat."""
        if self.n < 2:
            return "-"
        f = f"{{:.{digits}f}}"
        return (f"±{f.format(scale * self.sd)} ({f.format(scale * self.lo)}–"
                f"{f.format(scale * self.hi)})")


def _key(run: RunSummary) -> tuple[int, int]:
    """(seed, configured steps) of a run."""
    steps = ((run.record.get("scenario") or {}).get("run") or {}).get("steps")
    return run.seed, int(steps) if isinstance(steps, int) else -1


def _by_seed(runs: list[RunSummary]) -> dict[tuple[int, int], list[RunSummary]]:
    out: dict[tuple[int, int], list[RunSummary]] = {}
    for run in runs:
        if run.mean_step_time_s() is not None:
            out.setdefault(_key(run), []).append(run)
    return out


def paired_ratio(a: list[RunSummary], b: list[RunSummary]) -> PairedRatio | None:
    """Step-time ratio A/B over the seeds (and run lengths) both have; None if they share none."""
    sa, sb = _by_seed(a), _by_seed(b)
    keys = sorted(set(sa) & set(sb))
    if not keys:
        return None
    step_a = np.array([np.mean([r.mean_step_time_s() for r in sa[k]]) for k in keys])
    step_b = np.array([np.mean([r.mean_step_time_s() for r in sb[k]]) for k in keys])
    return PairedRatio(ratio=float(np.mean(step_a / step_b)),
                       seeds=sorted({seed for seed, _ in keys}),
                       step_a_s=float(step_a.mean()), step_b_s=float(step_b.mean()),
                       runs_a=[r for k in keys for r in sa[k]],
                       runs_b=[r for k in keys for r in sb[k]],
                       ratios=[float(x) for x in step_a / step_b])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table (line breaks in header cells become spaces)."""
    head = [h.replace("\n", " ") for h in header]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


CHAR_INCHES = 0.062
"""Width of one character of the 7 pt table font, roughly (inches)."""
ROW_INCHES = 0.24
"""Height of one table row (inches)."""


def draw_table(out_base: Path, title: str, header: list[str], rows: list[list[str]],
               source: str, footnote: str = "") -> list[Path]:
    """Render a table as a figure (png + pdf), columns sized to their text; returns the paths.

    Header cells may hold '\n' for two-line labels.
    """
    def width(text: str) -> float:
        return max(len(line) for line in text.split("\n"))

    chars = [max([width(h)] + [width(r[i]) for r in rows]) for i, h in enumerate(header)]
    col_in = [CHAR_INCHES * c + 0.16 for c in chars]
    head_lines = max(h.count("\n") + 1 for h in header)
    table_h = ROW_INCHES * (len(rows) + head_lines)
    fig_w = max(sum(col_in), 4.0)
    with figure_style():
        fig = new_figure(fig_w, table_h + 0.45 + (0.2 if footnote else 0.0))
        fig.set_layout_engine(None)
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.set_axis_off()
        fig_h = fig.get_figheight()
        top = 1.0 - 0.35 / fig_h
        bottom = top - table_h / fig_h
        table = ax.table(cellText=rows, colLabels=header, cellLoc="center",
                         colWidths=[w / fig_w for w in col_in],
                         bbox=(0.0, bottom, sum(col_in) / fig_w, top - bottom))
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        unit = 1.0 / (len(rows) + head_lines)
        for (row, _), cell in table.get_celld().items():
            cell.set_edgecolor("0.75")
            cell.set_height(unit * (head_lines if row == 0 else 1))
            if row == 0:
                cell.set_facecolor("0.92")
                cell.set_text_props(weight="bold")
        fig.text(0.5, 1.0 - 0.06 / fig_h, title, ha="center", va="top", fontsize=9)
        if footnote:
            fig.text(0.0, bottom - 0.05 / fig_h, footnote, fontsize=6, color="0.3",
                     ha="left", va="top")
        source_note(fig, source)
        return save_figure(fig, out_base, pdf=True)
