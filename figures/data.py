"""Inputs of the figures, loaded once: one `RunSummary` per run folder, and the reference traces.

A run folder is what `stragglerlab train` writes (`trace.parquet`, `meta.yaml`,
`faults.json`, `run.json`) plus `whatif/whatif.json` from `stragglerlab whatif`
(the Snakemake layout is `results/<scenario>/<seed>/`). Everything small is read
here; the trace itself only when a figure asks for it (`RunSummary.trace()`).

    from stragglerlab.figures.data import load_figure_data
    data = load_figure_data(["results/clean-dp2-pp2/0"], "tests/data/reference-traces")
    for run in data.analysed_runs():
        print(run.scenario, run.seed, run.whatif["slowdown"], run.mean_step_time_s())

This module is a library; `stragglerlab figures` is the command that uses it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.figures.scores import ScoreFile, read_scores
from stragglerlab.run.run_folder import META_YAML, RUN_JSON, WHATIF_JSON, RunFolder
from stragglerlab.run.whatif_reader import summary_of_document
from stragglerlab.run.whatif_summary import WhatIfSummary
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.errors import InputError

REFERENCE_WHATIF_JSON = "whatif.json"
"""File name of a reference trace's what-if result inside `<reference_whatif_dir>/<job>/`."""
REFERENCE_WHATIF_DIR = "reference"
"""The reference traces' what-if results below the results root (`results/reference/<job>/`)."""

OUTCOME_OK = "ok"
OUTCOME_FAILED = "failed"


@dataclass
class RunSummary:
    """One run folder: its ground truth, run record and what-if result (the trace on demand)."""

    path: Path
    """The run folder."""
    scenario: str
    """Scenario name (run.json `scenario.name`, else `name`, else the meta's trial name)."""
    seed: int
    """Training seed of the run (run.json `seed`)."""
    meta: JobMeta
    """Parallel layout (meta.yaml)."""
    faults: list[dict]
    """Ground truth, faults.json records ([] for a clean run)."""
    record: dict
    """run.json as written by `stragglerlab train` (`record["scenario"]` is the full scenario)."""
    whatif: dict | None
    """whatif/whatif.json (WhatIfResult.to_json layout), None when absent or not a result."""
    outcome: str
    """'ok' or 'failed' (run.json `outcome`)."""
    _folder: RunFolder | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def whatif_summary(self) -> WhatIfSummary | None:
        """The what-if result as the one type both models share (stragglerlab.
        whatif_summary), None when the run has none or its analysis could not handle it
        (`slowdown` null)."""
        if self.whatif is None or self.whatif.get("slowdown") is None:
            return None
        return summary_of_document(self.whatif, str(self.path / WHATIF_JSON))

    @property
    def ok(self) -> bool:
        """The run finished without error."""
        return self.outcome == OUTCOME_OK

    @property
    def label(self) -> str:
        """'scenario/seed' for messages and legends."""
        return f"{self.scenario}/{self.seed}"

    def trace(self) -> pd.DataFrame:
        """The run's trace (read and validated on first call, cached)."""
        if self._folder is None:
            self._folder = RunFolder(path=self.path)
        return self._folder.trace()

    def step_times_s(self) -> dict[int, float]:
        """Measured step time per traced step, s: run.json `step_time_s` without warm-up.

        Only the steps that went into the trace (run.json `trace.complete_steps`,
        else every step from `warmup_steps` on) count, so the warm-up step (which
        includes one-off start-up work) never skews a mean. Falls back to the
        what-if result's `step_time_actual_s` when run.json has no step times.
        """
        raw = self.record.get("step_time_s") or {}
        times = {int(k): float(v) for k, v in raw.items() if v is not None}
        traced = (self.record.get("trace") or {}).get("complete_steps")
        if traced:
            keep = set(int(s) for s in traced)
            times = {s: t for s, t in times.items() if s in keep}
        else:
            warmup = int(((self.record.get("scenario") or {}).get("run") or {})
                         .get("warmup_steps", 0) or 0)
            times = {s: t for s, t in times.items() if s >= warmup}
        if not times and self.whatif:
            times = {int(k): float(v)
                     for k, v in (self.whatif.get("step_time_actual_s") or {}).items()}
        return dict(sorted(times.items()))

    def mean_step_time_s(self) -> float | None:
        """Mean measured step time over the traced steps, s (None when there is none)."""
        times = self.step_times_s()
        if times:
            return float(np.mean(list(times.values())))
        if self.whatif and self.whatif.get("t_actual_s") is not None:
            return float(self.whatif["t_actual_s"])
        return None

    def gpu_time_s(self) -> float:
        """Worker-seconds of the traced steps: world_size x sum of actual step times.

        The testbed's stand-in for the paper's GPU-hours (one traced worker per
        DP x PP cell, each a device). 0 without a what-if result.
        """
        if not self.whatif:
            return 0.0
        steps = self.whatif.get("step_time_actual_s") or {}
        total = float(sum(steps.values())) if steps else 0.0
        return total * self.meta.world_size

    def fault_kinds(self) -> list[str]:
        """Kinds of the injected faults (empty for a clean run)."""
        return [str(f.get("kind")) for f in self.faults if isinstance(f, dict)]


@dataclass
class FigureData:
    """Everything the figures draw from."""

    runs: list[RunSummary]
    """Run folders, in the order given."""
    reference_dir: Path | None = None
    """The artifact's reference traces folder (trace-AR/ST, result-*.json), if given."""
    reference_whatif_dir: Path | None = None
    """Folder of the reference traces' what-if results, `<job>/whatif.json` (the workflow's
    `results/reference/`, written by `stragglerlab whatif --trace ... --out DIR/<job>`)."""
    scores: ScoreFile | None = None
    """The detector scores of `stragglerlab score` (figures/scores.py), if given."""

    def reference_whatif(self, job: str) -> Path | None:
        """The what-if result of reference trace `job` (e.g. AR), None when not written."""
        if self.reference_whatif_dir is None:
            return None
        path = Path(self.reference_whatif_dir) / job / REFERENCE_WHATIF_JSON
        return path if path.is_file() else None

    def ok_runs(self) -> list[RunSummary]:
        """Runs that finished without error."""
        return [r for r in self.runs if r.ok]

    def analysed_runs(self) -> list[RunSummary]:
        """The population of the population figures: ok runs with a what-if result."""
        return [r for r in self.runs if r.ok and r.whatif is not None]

    def by_scenario(self, name: str, ok_only: bool = True) -> list[RunSummary]:
        """Runs of one scenario (ok ones only unless ok_only=False)."""
        return [r for r in self.runs if r.scenario == name and (r.ok or not ok_only)]

    def scenarios(self) -> list[str]:
        """Scenario names present, in first-seen order."""
        return list(dict.fromkeys(r.scenario for r in self.runs))


def _seed(record: dict, folder: Path) -> int:
    for value in (record.get("seed"), ((record.get("scenario") or {}).get("run") or {})
                  .get("seed"), folder.name):
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
    return 0


def _meta(folder: RunFolder, record: dict) -> JobMeta:
    if folder.has_meta:
        return folder.meta
    parallel = (record.get("scenario") or {}).get("parallel") or {}
    if record.get("outcome") != OUTCOME_OK and "dp" in parallel and "pp" in parallel:
        # A run that died early may lack meta.yaml; its scenario still says the layout.
        return JobMeta(dp_size=int(parallel["dp"]), pp_size=int(parallel["pp"]))
    raise InputError(f"run folder has no {META_YAML}; re-run `stragglerlab train`",
                     str(folder.path))


def load_run(folder: str | Path) -> RunSummary:
    """Read one run folder (not its trace) through RunFolder. InputError when it is bad."""
    run = RunFolder.open(folder)
    if not run.has_record:
        raise InputError(f"not a run folder: no {RUN_JSON} (pass folders written by "
                         "`stragglerlab train`, e.g. results/<scenario>/<seed>)", str(run.path))
    record = run.record.to_json()  # validated; error.rank against the layout when known
    meta = _meta(run, record)
    faults = [f.to_json() for f in run.faults] if run.has_faults else []
    whatif = None
    if run.has_whatif:
        raw = run.whatif
        # A marker written for a run the analysis could not handle has no slowdown.
        if raw.get("slowdown") is not None:
            whatif = raw
    scenario = ((record.get("scenario") or {}).get("name") or record.get("name")
                or meta.trial_name or run.path.name)
    return RunSummary(path=run.path, scenario=str(scenario), seed=_seed(record, run.path),
                      meta=meta, faults=faults, record=record, whatif=whatif,
                      outcome=record["outcome"], _folder=run)


def load_figure_data(run_dirs: list[str | Path],
                     reference_dir: str | Path | None = None,
                     reference_whatif_dir: str | Path | None = None,
                     scores: str | Path | None = None) -> FigureData:
    """Load every run folder once (duplicates dropped), check the reference folder and
    read the scores file (a missing or bad one is an InputError)."""
    runs: list[RunSummary] = []
    seen: set[Path] = set()
    for d in run_dirs:
        key = Path(d).resolve()
        if key in seen:
            continue
        seen.add(key)
        runs.append(load_run(d))
    ref = None
    if reference_dir is not None:
        ref = Path(reference_dir)
        if not ref.is_dir():
            raise InputError("reference traces folder not found (expected the artifact's "
                             "trace-*.parquet, meta-*.yaml, result-*.json)", str(ref))
        if not any(ref.glob("trace-*.parquet")):
            raise InputError("--reference: no reference trace here (expected the artifact's "
                             "trace-<job>.parquet with meta-<job>.yaml and result-<job>.json, "
                             "as in tests/data/reference-traces)", str(ref))
    return FigureData(runs=runs, reference_dir=ref,
                      reference_whatif_dir=(None if reference_whatif_dir is None
                                            else Path(reference_whatif_dir)),
                      scores=None if scores is None else read_scores(scores))


def nothing_to_draw(data: FigureData, results: list) -> str:
    """Why none of `results` (FigureResults, each 'no data') drew anything: the missing
    input when it is the one every figure of runs needs, else each figure's own need."""
    n = len(data.runs)
    if not data.runs:
        headline = ("no run folders with what-if results: pass --runs results/<scenario>/<seed> "
                    "... (folders of `stragglerlab train`, each analysed by `stragglerlab whatif "
                    "--run DIR`)")
    elif not data.ok_runs():
        headline = f"none of the {n} run folders finished ok (run.json outcome)"
    elif not data.analysed_runs():
        headline = (f"none of the {len(data.ok_runs())} ok run folders has a what-if result "
                    "(whatif/whatif.json): run `stragglerlab whatif --run DIR` on each first")
    else:
        headline = ""
    needs = [f"{r.name}: {r.note}" for r in results]
    if headline and len(results) > 3:  # every figure would say the same
        return headline
    return "; ".join([headline, *needs] if headline else needs)
