"""Detector sensitivity: fault recall by the fault's own measured slowdown, and false findings
on clean runs, for every detector of `scores.json` (`stragglerlab score`).

One line per detector (leaderboard order): the share of faults recalled in each bin of
measured slowdown (`analysis/suite_score.py`, SENSITIVITY_BINS; faults whose slowdown could
not be separated from another fault's are left out of the curve), the bin's fault count
under the axis; the legend gives each detector's false findings per 1,000 clean
worker-steps. A detector that only sees severe stragglers rises late; one that calls
noise a straggler shows it in its false-finding rate. Without a scores file it writes
the "no data" image.

Built by `stragglerlab figures --scores results/scores.json --only fig_sensitivity
--out results/figures` (the workflow's rule `figure_fig_sensitivity`, after `score`).
"""

from __future__ import annotations

from pathlib import Path

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.registry import FigureResult, no_data

NAME = "fig_sensitivity"
TITLE = "Detector sensitivity: fault recall by measured slowdown; false findings on clean runs"
PAPER = "none (the testbed's detector benchmark; the paper scores no detectors)"
INPUTS = ("scores",)
"""What this figure reads (figures/registry.py): the scores file only."""


def _draw(curves: dict, labels: list[str], counts: list[int], rates: dict, out_dir: Path,
          source: str) -> list[Path]:
    from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

    with figure_style():
        fig = new_figure(6.4, 3.8)
        ax = fig.subplots()
        x = range(len(labels))
        for name, recall in curves.items():
            rate = rates.get(name)
            tag = "-" if rate is None else f"{rate:.2f}"
            ax.plot(x, [float("nan") if r is None else r for r in recall], marker="o",
                    label=f"{name} (false/1k clean worker-steps: {tag})")
        ax.set_xticks(list(x), [f"{lab}\n({n} faults)" for lab, n in zip(labels, counts)])
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("fault's measured job slowdown")
        ax.set_ylabel("faults recalled")
        ax.legend(fontsize=6, loc="lower right")
        ax.grid(alpha=0.3)
        fig.suptitle(TITLE, fontsize=8)
        source_note(fig, source)
        return save_figure(fig, Path(out_dir) / NAME, pdf=True)


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """One recall-by-magnitude line per detector."""
    if data.scores is None:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "detector scores (`stragglerlab figures --scores results/scores.json`)")
    ranked = [d for d in data.scores.ranked() if d.sensitivity]
    if not ranked:
        return no_data(NAME, TITLE, PAPER, out_dir,
                       "scores with a sensitivity curve (rewrite them with `stragglerlab score`)",
                       source=f"scores: {data.scores.path}")
    bins = [b for b in ranked[0].sensitivity if b.lo is not None]
    labels = [b.label for b in bins]
    curves = {d.name: [b.recalled / b.n if b.n else None
                       for b in d.sensitivity if b.lo is not None] for d in ranked}
    rates = {d.name: d.overall.metrics.get("false_findings_per_1k_clean_worker_steps")
             for d in ranked}
    source = f"detector scores ({len(ranked)} detectors, {data.scores.path})"
    paths = _draw(curves, labels, [b.n for b in bins], rates, out_dir, source)
    head = ranked[0]
    ours = {"bins": labels, "faults": [b.n for b in bins], "recall": curves,
            "false_findings_per_1k_clean_worker_steps": rates}
    note = (f"Recall of `{head.name}` by bin: "
            + ", ".join(f"{lab} {'-' if r is None else f'{r:.2f}'}"
                        for lab, r in zip(labels, curves[head.name])) + ".")
    return FigureResult(NAME, paths, source, PAPER, ours, note, TITLE)
