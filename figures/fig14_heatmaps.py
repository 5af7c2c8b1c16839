"""Fig. 14: worker heatmaps min(S_dp, S_stage) for worker issue / stage imbalance / sequence
imbalance, from testbed runs and from the artifact's reference traces.

Top row: three testbed runs, one per root cause (a slow-worker run, a
stage-imbalance run, a seq-imbalance run, each unmitigated), from their
`whatif/whatif.json` `worker_score`. Bottom row: the same heatmap of the
reference traces trace-AR (one slowed worker) and trace-ST (stage imbalance),
from their what-if results `<reference_whatif_dir>/<job>/whatif.json` (the
workflow's `results/reference/<job>/whatif.json`, written by `stragglerlab
whatif`; this figure never re-runs the analysis), mean ideal as the artifact.
Each panel is drawn by `figures.fig14_heatmap.plot_worker_heatmap` into
`<NAME>-<panel>.png` and the panels are assembled into `<NAME>.png`/`.pdf`.
Built by `stragglerlab figures --runs ... --reference DIR --only fig14_heatmaps
--out results/figures` (reference what-if looked up in results/reference/).

The reference cells are checked against the artifact's own result: a cell of
the artifact's heatmap is min(blocking_decompose_by_dp_rank[d],
blocking_decompose_by_stage[p]) of `result-<job>.json`. Both, and their
largest difference, are in `ours["reference"]`.

    from stragglerlab.figures.fig14_heatmaps import artifact_cells, reference_cells
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.image import imread

from stragglerlab.figures.data import FigureData
from stragglerlab.figures.fig14_heatmap import plot_worker_heatmap
from stragglerlab.figures.registry import FigureResult, no_data
from stragglerlab.figures.style import figure_style, new_figure, save_figure, source_note
from stragglerlab.figures.trace_common import runs_with_fault
from stragglerlab.run.whatif_reader import read_whatif_summary
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import Checker, echo, load_json

NAME = "fig14_heatmaps"
TITLE = "Fig. 14: worker heatmaps (worker issue / stage imbalance / sequence imbalance)"
PAPER = ("worker issue: one hot cell; stage imbalance: a hot last-stage row; sequence "
         "imbalance: a hot DP column varying by step (artifact: AR cell (DP0,PP0)=1.97, "
         "ST last stage 1.17/1.18)")
INPUTS = ("runs", "whatif", "reference")
"""Run-folder files this figure reads, plus the reference traces' what-if (figures/registry.py)."""
REFERENCE_JOBS = ("AR", "ST")
"""The artifact's sample traces in the reference folder."""
REFERENCE_ROLE = {"AR": "worker issue", "ST": "stage imbalance"}
MATCH_RTOL = 1e-4
"""Relative tolerance of the reference-vs-artifact cell check."""
PANELS = (
    ("worker issue", "slow-worker"),
    ("stage imbalance", "stage-imbalance"),
    ("sequence imbalance", "seq-imbalance"),
)
"""(panel title, fault kind) of the testbed row."""


def artifact_cells(result: dict) -> np.ndarray:
    """The artifact's heatmap cells [pp, dp] from its result JSON (min of its two tables)."""
    meta = result["job_meta"]
    by_dp = result["blocking_decompose_by_dp_rank"]
    by_stage = result["blocking_decompose_by_stage"]
    dp = np.array([by_dp[str(d)] for d in range(int(meta["dp_size"]))], dtype=float)
    stage = np.array([by_stage[str(p)] for p in range(int(meta["pp_size"]))], dtype=float)
    return np.minimum(stage[:, None], dp[None, :])


def read_artifact_cells(path: Path) -> np.ndarray:
    """artifact_cells of the artifact's result JSON at path; one InputError when it is not one."""
    fix = "pass the artifact's reference-traces folder (result-AR.json, result-ST.json) unchanged"
    chk = Checker(path, fix)
    raw = chk.mapping(load_json(path, "artifact result JSON", fix), "result")
    JobMeta.from_dict(chk.mapping(raw.get("job_meta"), "job_meta"), str(path))  # sizes capped
    try:
        cells = artifact_cells(raw)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise InputError(f"not the artifact's result JSON ({type(e).__name__}: "
                         f"{echo(str(e))}); {fix}", str(path)) from None
    if not np.isfinite(cells).all():
        raise InputError(f"the heatmap cells are not all finite numbers; {fix}", str(path))
    return cells


def reference_cells(whatif_json: Path) -> np.ndarray:
    """Our worker scores [pp, dp] of a reference trace, from its whatif.json (mean ideal)."""
    return read_whatif_summary(whatif_json, "mean").workers.grid()


def whatif_command(ref_dir: Path, job: str, data: FigureData) -> str:
    """The command that writes the what-if result this figure reads for reference job `job`."""
    out = (Path(data.reference_whatif_dir) if data.reference_whatif_dir is not None
           else Path("results") / "reference") / job
    return (f"stragglerlab whatif --trace {ref_dir / f'trace-{job}.parquet'} "
            f"--meta {ref_dir / f'meta-{job}.yaml'} --out {out}")


def _unmitigated(run, kind: str) -> bool:
    return not any(f.get("kind") == kind and (f.get("requested") or {}).get("rebalance")
                   for f in run.faults)


def testbed_panels(data: FigureData) -> list[tuple[str, object, np.ndarray]]:
    """(title, run, cells) per root cause present: of the analysed unmitigated runs, the
    built-in scenario of that kind, else the one with the largest S."""
    out = []
    for title, kind in PANELS:
        runs = [r for r in runs_with_fault(data, kind, lambda r, k=kind: _unmitigated(r, k))
                if r.whatif_summary is not None and r.whatif_summary.workers.s.size]
        if runs:
            # The built-in scenario named like the kind if present, else the clearest case.
            run = max(runs, key=lambda r, k=kind: (r.scenario == k, r.whatif_summary.S))
            out.append((title, run, run.whatif_summary.workers.grid()))
    return out


def _hottest(cells: np.ndarray) -> dict:
    p, d = np.unravel_index(int(np.nanargmax(cells)), cells.shape)
    return {"max_cell": round(float(cells[p, d]), 4), "max_cell_dp_rank": int(d),
            "max_cell_stage": int(p)}


def build(data: FigureData, out_dir: Path) -> FigureResult:
    """Draw every panel whose data is present, then the assembled figure."""
    out_dir = Path(out_dir)
    panels: list[tuple[str, Path]] = []  # (row, png)
    ours: dict = {}
    testbed = {}
    for title, run, cells in testbed_panels(data):
        slug = title.replace(" ", "-")
        png = out_dir / f"{NAME}-{slug}.png"
        plot_worker_heatmap(cells, png, title=f"{title}: {run.label}",
                            source=f"testbed run {run.label}", pdf=True)
        panels.append(("testbed", png))
        testbed[title] = {"run": run.label, "S": round(run.whatif_summary.S, 4),
                          "cells": cells.tolist(), **_hottest(cells)}
    if testbed:
        ours["testbed"] = testbed
    reference = {}
    not_analysed = []
    ref_dir = Path(data.reference_dir) if data.reference_dir is not None else None
    for job in REFERENCE_JOBS:
        if ref_dir is None or not (ref_dir / f"trace-{job}.parquet").exists():
            continue
        whatif_json = data.reference_whatif(job)
        if whatif_json is None:
            not_analysed.append(f"trace-{job} has no what-if result; run "
                                f"`{whatif_command(ref_dir, job, data)}` first.")
            continue
        cells = reference_cells(whatif_json)
        _same_job(cells, ref_dir / f"meta-{job}.yaml", whatif_json,
                  f"the what-if of another trace; run `{whatif_command(ref_dir, job, data)}`")
        entry = {"cells": cells.tolist(), **_hottest(cells)}
        result_path = ref_dir / f"result-{job}.json"
        if result_path.exists():
            expected = read_artifact_cells(result_path)
            _same_job(expected, ref_dir / f"meta-{job}.yaml", result_path,
                      f"the artifact's result of another job than trace-{job}; pass the "
                      "artifact's reference-traces folder unchanged")
            entry["artifact_cells"] = expected.tolist()
            entry["max_abs_diff_vs_artifact"] = float(np.abs(expected - cells).max())
            entry["matches_artifact"] = bool(np.allclose(cells, expected, rtol=MATCH_RTOL,
                                                         atol=1e-9))
        png = out_dir / f"{NAME}-reference-{job}.png"
        plot_worker_heatmap(cells, png, title=f"trace-{job} ({REFERENCE_ROLE[job]})",
                            source=f"reference trace trace-{job} (artifact)", pdf=True)
        panels.append(("reference", png))
        reference[job] = entry
    if reference:
        ours["reference"] = reference
    if not panels:
        return no_data(NAME, TITLE, PAPER, out_dir, "slow-worker / stage-imbalance / "
                       "seq-imbalance runs with whatif.json, or the reference traces with "
                       "their what-if results" + "".join(f" ({m})" for m in not_analysed))
    paths = _assemble(panels, out_dir)
    paths += [p.with_suffix(s) for _, p in panels for s in (".png", ".pdf")]
    sources = []
    if testbed:
        sources.append("testbed runs " + ", ".join(v["run"] for v in testbed.values()))
    if reference:
        sources.append("reference traces " + ", ".join(f"trace-{j}" for j in reference))
    note = " ".join([_note(testbed, reference), *not_analysed])
    return FigureResult(name=NAME, paths=paths, source="; ".join(sources), paper=PAPER,
                        ours=ours, note=note)


def _same_job(cells: np.ndarray, meta_path: Path, source: Path, what: str) -> None:
    """InputError unless `cells` ([pp, dp], read from `source`) has the DP x PP layout of
    the reference job's meta-<job>.yaml: a heatmap of another job compares nothing."""
    if not meta_path.is_file():
        return
    meta = JobMeta.load(meta_path)
    if cells.shape != (meta.pp_size, meta.dp_size):
        raise InputError(f"holds a DP {cells.shape[1]} x PP {cells.shape[0]} heatmap, but "
                         f"{meta_path.name} says DP {meta.dp_size} x PP {meta.pp_size}: "
                         f"{what}", str(source))


def _note(testbed: dict, reference: dict) -> str:
    parts = []
    for job, e in reference.items():
        if "matches_artifact" in e:
            verdict = ("equal the artifact's heatmap cells" if e["matches_artifact"]
                       else "DIFFER from the artifact's heatmap cells")
            parts.append(f"trace-{job}: our cells {verdict} (max |diff| "
                         f"{e['max_abs_diff_vs_artifact']:.1e}); hottest cell "
                         f"{e['max_cell']:.2f} at (DP {e['max_cell_dp_rank']}, "
                         f"PP {e['max_cell_stage']}).")
    for title, e in testbed.items():
        parts.append(f"{title} ({e['run']}, S {e['S']:.2f}): hottest cell {e['max_cell']:.2f} "
                     f"at (DP {e['max_cell_dp_rank']}, PP {e['max_cell_stage']}).")
    missing = [t for t, _ in PANELS if t not in testbed]
    if missing:
        parts.append("No testbed run for: " + ", ".join(missing) + ".")
    return " ".join(parts)


def _assemble(panels: list[tuple[str, Path]], out_dir: Path) -> list[Path]:
    """Put the panel PNGs side by side, testbed row above the reference row."""
    rows = [[p for r, p in panels if r == row] for row in ("testbed", "reference")]
    rows = [r for r in rows if r]
    n_cols = max(len(r) for r in rows)
    images = [[imread(p) for p in r] for r in rows]
    row_h = [max(im.shape[0] for im in r) for r in images]
    col_w = max(im.shape[1] for r in images for im in r)
    scale = 3.2 / col_w  # inches per pixel: each panel about 3.2 in wide
    with figure_style():
        fig = new_figure(3.2 * n_cols, scale * sum(row_h) + 0.3)
        grid = fig.add_gridspec(len(rows), n_cols, height_ratios=row_h)
        for i, r in enumerate(images):
            for j in range(n_cols):
                ax = fig.add_subplot(grid[i, j])
                ax.set_axis_off()
                if j < len(r):
                    ax.imshow(r[j], interpolation="lanczos")
        source_note(fig, "top: testbed runs (whatif.json); bottom: reference traces "
                    "trace-AR / trace-ST (artifact), their whatif.json")
        return save_figure(fig, out_dir / NAME, pdf=True)
