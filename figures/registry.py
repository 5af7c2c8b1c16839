"""The figures registry: which figure modules exist, in figure order, and how one is built.

Every figure module defines

    NAME: str    # output basename, e.g. "fig03_waste_cdf"
    TITLE: str   # one line, shown in the report
    PAPER: str   # the paper's number(s) for it, short (design.md §6)
    INPUTS: tuple[str, ...]   # optional, what it reads (INPUT_KINDS); default: all of them
    def build(data: FigureData, out_dir: Path) -> FigureResult

and writes `out_dir/<NAME>.png` and `.pdf`. `build_figure` also writes
`out_dir/<NAME>.json` (the FigureResult; `paths` are file names relative to
that folder). A figure without the data it needs still writes an image saying
"no data: needs ..." (`no_data`) and returns ours = {}; it never crashes.

    from stragglerlab.figures.registry import build_figure, figure_names
    for name in figure_names():
        result = build_figure(name, data, Path("results/figures"))
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from stragglerlab.atomic import atomic_write_json
from stragglerlab.errors import InputError

FIGURES: list[str] = [
    "stragglerlab.figures.fig03_waste_cdf",
    "stragglerlab.figures.fig04_step_slowdown_cdf",
    "stragglerlab.figures.fig05_waste_by_optype",
    "stragglerlab.figures.fig06_mw_cdf",
    "stragglerlab.figures.fig07_ms_cdf",
    "stragglerlab.figures.fig08_seq_timeline",
    "stragglerlab.figures.fig09_mb_time_vs_seqsq",
    "stragglerlab.figures.fig10_seq_len_hist",
    "stragglerlab.figures.fig11_fwd_bwd_correlation",
    "stragglerlab.figures.fig12_long_context",
    "stragglerlab.figures.fig13_gc_timeline",
    "stragglerlab.figures.fig14_heatmaps",
    "stragglerlab.figures.sim_discrepancy_cdf",
    "stragglerlab.figures.table_s6",
    "stragglerlab.figures.table_mitigation",
]
"""Figure modules in figure order (B2's trace-based figures are added here as they land)."""

REQUIRED = ("NAME", "TITLE", "PAPER", "build")
"""What a figure module must define."""

INPUT_KINDS = {
    "runs": "every run's run.json, meta.yaml and faults.json",
    "whatif": "every run's whatif/whatif.json",
    "traces": "every run's trace.parquet (and the files train writes beside it, e.g. gc/)",
    "reference": "the artifact's reference traces and their what-if results",
}
"""What a figure can read; the workflow gives each figure's rule only its INPUTS."""


@dataclass
class FigureResult:
    """What one figure shows, for the report: files, data source, the paper's and our numbers."""

    name: str
    """The module's NAME (output basename)."""
    paths: list[Path]
    """Files written (png, pdf)."""
    source: str
    """Where the data came from, e.g. 'testbed runs (34 jobs)', 'reference traces (artifact)'."""
    paper: str
    """The paper's number(s), as the module's PAPER."""
    ours: dict[str, float | str] = field(default_factory=dict)
    """Our measured numbers to print beside the paper's ({} when there was no data)."""
    note: str = ""
    """Plain statement of agreement or disagreement with the paper, or why there is no data."""
    title: str = ""
    """The module's TITLE (filled in by build_figure when left empty)."""

    def to_json(self, relative_to: Path | None = None) -> dict:
        """JSON form; paths relative to `relative_to` (the figures folder) when given."""
        def rel(p: Path) -> str:
            if relative_to is not None:
                try:
                    return str(Path(p).resolve().relative_to(Path(relative_to).resolve()))
                except ValueError:
                    pass
            return str(p)

        return {
            "name": self.name,
            "title": self.title,
            "paths": [rel(p) for p in self.paths],
            "source": self.source,
            "paper": self.paper,
            "ours": self.ours,
            "note": self.note,
        }


def _short(module_path: str) -> str:
    return module_path.rsplit(".", 1)[-1]


def load_module(module_path: str) -> ModuleType:
    """Import a figure module and check it defines NAME, TITLE, PAPER and build."""
    module = importlib.import_module(module_path)
    missing = [a for a in REQUIRED if not hasattr(module, a)]
    if missing:
        raise TypeError(f"figure module {module_path} lacks {', '.join(missing)}")
    return module


def figure_names() -> list[str]:
    """NAME of every registered figure, in figure order."""
    return [load_module(m).NAME for m in FIGURES]


def figure_inputs(name: str) -> tuple[str, ...]:
    """The INPUT_KINDS figure `name` reads (all of them when its module does not say)."""
    module = find_module(name)
    kinds = tuple(getattr(module, "INPUTS", tuple(INPUT_KINDS)))
    unknown = [k for k in kinds if k not in INPUT_KINDS]
    if unknown:
        raise TypeError(f"figure module {module.__name__} INPUTS names unknown kind(s) "
                        f"{', '.join(unknown)}; known: {', '.join(INPUT_KINDS)}")
    return kinds


def find_module(name: str) -> ModuleType:
    """The figure module whose NAME (or module name) is `name`; InputError if none."""
    for m in FIGURES:
        if _short(m) == name:
            return load_module(m)
    for m in FIGURES:
        module = load_module(m)
        if module.NAME == name:
            return module
    raise InputError(f"unknown figure {name!r}; known: {', '.join(figure_names())}")


def build_figure(name: str, data, out_dir: Path) -> FigureResult:
    """Build one figure into out_dir and write out_dir/<NAME>.json beside its images."""
    module = find_module(name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: FigureResult = module.build(data, out_dir)
    if not result.title:
        result.title = module.TITLE
    atomic_write_json(out_dir / f"{module.NAME}.json", result.to_json(relative_to=out_dir))
    return result


def no_data(name: str, title: str, paper: str, out_dir: Path, needs: str,
            source: str = "") -> FigureResult:
    """Write the 'no data: needs ...' image for a figure that lacks its inputs."""
    from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note

    message = f"no data: needs {needs}"
    with figure_style():
        fig = new_figure(4.0, 1.6)
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.62, title, ha="center", va="center", fontsize=9, wrap=True)
        ax.text(0.5, 0.3, message, ha="center", va="center", fontsize=9, color="tab:red",
                wrap=True)
        source_note(fig, source)
        paths = save_figure(fig, Path(out_dir) / name, pdf=True)
    return FigureResult(name=name, paths=paths, source=source or "no data", paper=paper, ours={},
                        note=message, title=title)
