"""The figures registry: which figure modules exist, in figure order, and how one is built.

Every figure module defines

    NAME: str    # output basename, e.g. "fig03_waste_cdf"
    TITLE: str   # one line, shown in the report
    PAPER: str   # the paper's number(s) for it, short (design.md §6)
    INPUTS: tuple[str, ...]   # optional, what it reads (INPUT_KINDS); default: all of them
    def build(data: FigureData, out_dir: Path) -> FigureResult

and writes `out_dir/<NAME>.png` and `.pdf`. `build_figure` also writes
`out_dir/<NAME>.json` (the FigureResult, with `"schema": "stragglerlab.figure/1"`;
`paths` are file names relative to that folder). A figure without the data it
needs still writes an image saying "no data: needs ..." (`no_data`) and returns
ours = {}; it never crashes.

    from stragglerlab.figures.registry import build_figure, figure_names
    for name in figure_names():
        result = build_figure(name, data, Path("results/figures"))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.plugins import Registry

FIGURE_SCHEMA = "stragglerlab.figure/1"
"""The `schema` value of a figure's `<NAME>.json` (older files have none)."""
REQUIRED = ("NAME", "TITLE", "PAPER", "build")
"""What a figure module must define."""


def _is_figure(module: object) -> str | None:
    missing = [a for a in REQUIRED if not hasattr(module, a)]
    if missing:
        return f"lacks {', '.join(missing)} (a figure module defines {', '.join(REQUIRED)})"
    return None


_PKG = "stragglerlab.figures"
FIGURES = Registry(kind="figure", group="stragglerlab.figures", check=_is_figure, builtin={
    "fig03_waste_cdf": f"{_PKG}.fig03_waste_cdf",
    "fig04_step_slowdown_cdf": f"{_PKG}.fig04_step_slowdown_cdf",
    "fig05_waste_by_optype": f"{_PKG}.fig05_waste_by_optype",
    "fig06_mw_cdf": f"{_PKG}.fig06_mw_cdf",
    "fig07_ms_cdf": f"{_PKG}.fig07_ms_cdf",
    "fig08_seq_timeline": f"{_PKG}.fig08_seq_timeline",
    "fig09_mb_time_vs_seqsq": f"{_PKG}.fig09_mb_time_vs_seqsq",
    "fig10_seq_len_hist": f"{_PKG}.fig10_seq_len_hist",
    "fig11_fwd_bwd_correlation": f"{_PKG}.fig11_fwd_bwd_correlation",
    "fig12_long_context": f"{_PKG}.fig12_long_context",
    "fig13_gc_timeline": f"{_PKG}.fig13_gc_timeline",
    "fig14_heatmaps": f"{_PKG}.fig14_heatmaps",
    "sim_discrepancy_cdf": f"{_PKG}.sim_discrepancy_cdf",
    "table_s6": f"{_PKG}.table_s6",
    "table_mitigation": f"{_PKG}.table_mitigation",
    "fig_confusion": f"{_PKG}.fig_confusion",
    "fig_sensitivity": f"{_PKG}.fig_sensitivity",
})
"""Figure NAME -> module, in figure order; plug-in figures register under the entry-point
group `stragglerlab.figures` (a module defining NAME, TITLE, PAPER, build, INPUTS)."""

INPUT_KINDS = {
    "runs": "every run's run.json, meta.yaml and faults.json",
    "whatif": "every run's whatif/whatif.json",
    "traces": "every run's trace.parquet (and the files train writes beside it, e.g. gc/)",
    "reference": "the artifact's reference traces and their what-if results",
    "scores": "the detector scores of `stragglerlab score` (scores.json)",
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

    @property
    def has_data(self) -> bool:
        """The figure was drawn from data, not the 'no data' image (ours is filled)."""
        return bool(self.ours)

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
            "schema": FIGURE_SCHEMA,
            "name": self.name,
            "title": self.title,
            "paths": [rel(p) for p in self.paths],
            "source": self.source,
            "paper": self.paper,
            "ours": self.ours,
            "note": self.note,
        }


def load_module(name: str) -> ModuleType:
    """The figure module registered as `name`, checked to define NAME, TITLE, PAPER, build."""
    return FIGURES.load(name)


def figure_names() -> list[str]:
    """NAME of every registered figure, in figure order (built-ins, then plug-ins)."""
    return FIGURES.names()


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
    """The figure module called `name`; InputError listing the known figures if none."""
    return load_module(name)


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
