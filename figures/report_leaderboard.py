"""The report's leaderboard section: detectors ranked by F1, every score with its interval.

From the checked scores file (figures/scores.py) it builds report blocks:

* the leaderboard: one row per detector, sorted by rank-level F1 (best first),
  with F1, root-cause accuracy, precision, recall, latency and slowdown error,
  each as `value [lo, hi]` (the 95% bootstrap interval over cases);
* the headline detector's confusion matrix as a table, and the confusion-matrix
  figure of every detector (`fig_confusion`, when the figures folder has it);
* per detector, a compact fault kind x layout family table: F1 [interval] /
  cause accuracy (runs);
* the per-fault-kind table of every metric (as before the leaderboard).

Latency and slowdown error are the per-fault ones (`fault_median_latency_steps`,
`fault_slowdown_error`) where the file has them, else the run-level ones of
older score files. `figures/report.py` places these blocks; nothing to run here:

    blocks = score_blocks(read_scores(path), "", figures=[])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stragglerlab.figures.report_blocks import Block
from stragglerlab.figures.scores import DetectorScore, ScoreFile, Slice, confusion_matrices, fmt

SCORE_FIGURES = ("fig_confusion", "fig_sensitivity")
"""Figure outputs shown in the leaderboard section, not among the paper's figures."""
SCORE_METRICS = ("precision", "recall", "f1", "root_cause_accuracy", "median_latency_steps",
                 "slowdown_error")
"""Columns of the per-fault-kind table (keys of the `stragglerlab score` JSON)."""


@dataclass(frozen=True)
class BoardFigure:
    """A figure shown in the leaderboard section (from its `<NAME>.json`)."""

    title: str
    """The figure's title."""
    image: Path | None
    """Its PNG, None when it has none."""
    note: str
    """What it shows, or why it has no data."""


@dataclass(frozen=True)
class Column:
    """One leaderboard column: its title and the score keys it shows (first present wins)."""

    title: str
    """Column header."""
    keys: tuple[str, ...]
    """scores.json keys, newest first (legacy fallbacks after)."""

    def cell(self, s: Slice) -> str:
        """`value [lo, hi]` of this column in one slice."""
        return s.first(*self.keys).cell()


COLUMNS = (
    Column("F1", ("f1",)),
    Column("cause accuracy", ("root_cause_accuracy",)),
    Column("precision", ("precision",)),
    Column("recall", ("recall",)),
    Column("latency (steps)", ("fault_median_latency_steps", "median_latency_steps")),
    Column("slowdown error", ("fault_slowdown_error", "slowdown_error")),
)
"""The leaderboard's score columns, in order."""


def leaderboard_rows(scores: ScoreFile) -> list[list[str]]:
    """[rank, detector, F1, cause accuracy, precision, recall, latency, slowdown error, runs]."""
    return [[str(i), f"`{d.name}`", *(c.cell(d.overall) for c in COLUMNS),
             fmt(d.overall.n_runs)]
            for i, d in enumerate(scores.ranked(), 1)]


def kind_family_cell(s: Slice | None) -> str:
    """`F1 [lo, hi] / cause (runs)` of one kind x family cell, `-` when it has no run."""
    if s is None:
        return "-"
    return (f"{s.get('f1').cell(2)} / {fmt(s.metrics.get('root_cause_accuracy'), 2)} "
            f"({fmt(s.n_runs)})")


def kind_family_table(d: DetectorScore, families: list[str]) -> Block | None:
    """Rows: fault kinds; columns: layout families; None without a breakdown."""
    if not d.by_kind_family:
        return None
    kinds = sorted({k for k, _ in d.by_kind_family}, key=lambda k: (k == "clean", k))
    rows = [[k, *(kind_family_cell(d.by_kind_family.get((k, f))) for f in families)]
            for k in kinds]
    return Block("table", header=["fault kind", *families], rows=rows)


def confusion_table(scores: ScoreFile) -> list[Block]:
    """The headline (best-F1) detector's confusion matrix: rows true cause, columns
    predicted, cells runs ([] when the file has no confusion matrix)."""
    mats = confusion_matrices(scores)
    if not mats or not mats[0].runs:
        return []
    m = mats[0]
    rows = [[f"true {t}", *(str(n) if n else "·" for n in row)]
            for t, row in zip(m.labels, m.counts) if any(row)]
    return [Block("p", f"Confusion matrix of the headline detector `{m.detector}` (runs; "
                       f"{m.right()} of {m.runs} with the right cause):"),
            Block("table", header=["", *(f"→ {p}" for p in m.labels)], rows=rows)]


def _plain(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _per_kind(scores: ScoreFile) -> list[Block]:
    rows = [[d.name, kind, *(_plain(s.metrics.get(m)) for m in SCORE_METRICS),
             _plain(s.n_runs)]
            for d in scores.detectors for kind, s in sorted(d.by_kind.items())]
    if not rows:
        return []
    return [Block("h3", "Per fault kind"),
            Block("table", header=["detector", "fault kind", *SCORE_METRICS, "runs"],
                  rows=rows)]


def score_blocks(scores: ScoreFile | None, why: str,
                 figures: list[BoardFigure]) -> list[Block]:
    """The leaderboard section (`why` when there are no scores; `figures`: the
    confusion-matrix figure, [] when the figures folder lacks it)."""
    blocks = [Block("h2", "Detector leaderboard")]
    if scores is None:
        return blocks + [Block("p", why)]
    boot = ("Brackets: the 95% bootstrap interval over cases (runs). Latency: median "
            "steps from a fault's first step to the first online finding naming it; "
            "slowdown error: median relative error of the estimated slowdown.")
    blocks += [Block("p", "Each detector scored against the runs' ground truth "
                          "(faults.json) by `stragglerlab score`, ranked by rank-level F1. "
                          + boot),
               Block("table", header=["#", "detector", *(c.title for c in COLUMNS), "runs"],
                     rows=leaderboard_rows(scores))]
    confusion = confusion_table(scores)
    if confusion or figures:
        blocks += [Block("h3", "Confusion matrices: true vs predicted root cause"), *confusion]
    for f in figures:
        if f.image is not None:
            blocks.append(Block("img", f.title, image=f.image))
        if f.note:
            blocks.append(Block("p", f.note))
    families = scores.families()
    tables = [(d, kind_family_table(d, families)) for d in scores.ranked()]
    tables = [(d, t) for d, t in tables if t is not None]
    if tables:
        blocks += [Block("h3", "Per fault kind × layout family"),
                   Block("p", "Cell: F1 [95% interval] / root-cause accuracy (runs); `-`: no "
                              "run of that kind in that layout family. A run with several "
                              "fault kinds counts under each.")]
        for d, table in tables:
            blocks += [Block("p", f"**`{d.name}`**"), table]
    return blocks + _per_kind(scores)
