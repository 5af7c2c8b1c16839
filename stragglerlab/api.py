"""The Python API for notebooks: one object per analysed job, DataFrames out.

    import stragglerlab
    job = stragglerlab.open("examples/slow-worker")          # a run folder, or
    job = stragglerlab.open("trace-ST.parquet", meta="meta-ST.yaml")
    job.summary()          # S, waste, discrepancy, M_W, M_S (a Series)
    job.workers()          # per worker: S_dp, S_stage, worker score (a DataFrame)
    job.optypes()          # S_t per op type
    job.steps()            # per-step S and step times
    job.detect("whatif")   # findings as a DataFrame (any registered detector)
    job.score("whatif")    # those findings against the run's ground truth
    job.truth()            # the injected faults, where the folder has faults.json
    job.heatmap()          # the worker heatmap (a matplotlib Figure)
    job.step_plot()        # S per step and the step times (a matplotlib Figure)

    stragglerlab.api.summary("imported")   # the same Series from any whatif.json: a run
                                           # folder's, an unannotated import's, a file

A thin facade: it hands off to the analyzers the verbs call (`analysis.whatif`,
the detector registry, `analysis.ground_truth`, the Fig. 14 heatmap) and keeps
each result, so a method computes once per job. It never writes into the folder.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Run, load_run
from stragglerlab.analysis.detectors.registry import get_detector
from stragglerlab.analysis.whatif import analyze
from stragglerlab.run.findings import Finding
from stragglerlab.run.general_record import is_general_import
from stragglerlab.run.results import WhatIfResult
from stragglerlab.run.run_folder import RunFolder
from stragglerlab.run.whatif_reader import read_whatif_summary
from stragglerlab.run.whatif_summary import WhatIfSummary
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.util.errors import InputError

__all__ = ["FINDING_COLUMNS", "Job", "open_job", "summary", "summary_series"]

FINDING_COLUMNS = ["root_cause", "dp_rank", "stage", "rank", "first_step", "last_step",
                   "confidence", "estimated_slowdown"]
"""Columns of `Job.detect`."""


class Job:
    """One traced job: a run folder, or a trace file with its meta."""

    def __init__(self, path: str | Path, meta: str | Path | None = None) -> None:
        path = Path(path)
        if path.is_dir() and is_general_import(path):
            raise InputError("an unannotated import (the general op model: ops.parquet, no "
                             "trace.parquet); Job reads op-level traces. Read its what-if with "
                             f"stragglerlab.api.summary({str(path)!r}) (or stragglerlab."
                             "whatif_reader.read_whatif_summary), or draw it: `stragglerlab "
                             f"plot --run {path}`", str(path))
        if path.is_dir():
            self.folder: RunFolder | None = RunFolder(path=path)
            trace_path, meta = self.folder.trace_path, meta or self.folder.meta_path
        elif path.is_file():
            self.folder, trace_path = None, path
        else:
            raise InputError("no run folder or trace file here; pass a folder with "
                             "trace.parquet and meta.yaml, or a trace .parquet", str(path))
        self.path = path
        self.trace, self.meta = read_trace(trace_path, meta)
        """The validated trace (design.md §3 columns) and its job meta."""
        self._findings: dict[str, list[Finding]] = {}

    def __repr__(self) -> str:
        return (f"Job({str(self.path)!r}: dp={self.meta.dp_size}, pp={self.meta.pp_size}, "
                f"{self.trace['step'].nunique()} steps, {len(self.trace):,} ops)")

    @functools.cached_property
    def _run(self) -> Run:
        if self.folder is not None:
            return load_run(self.path)
        return Run(self.trace, self.meta, str(self.path))

    def whatif(self) -> WhatIfResult:
        """The what-if analysis (mean compute ideal, the paper's), computed once."""
        return self._whatif

    @functools.cached_property
    def _whatif(self) -> WhatIfResult:
        return analyze(self.trace, self.meta, where=str(self.path))

    def summary(self) -> pd.Series:
        """S, the straggling verdict (None where the reproduction gate withholds it, with
        `validity` saying why), waste, simulation discrepancy, M_W, M_S and the fwd-bwd
        correlation (`summary_series` of the what-if's WhatIfSummary)."""
        return summary_series(self.whatif().summary(),
                              name=self.meta.trial_name or str(self.path))

    def workers(self) -> pd.DataFrame:
        """Per worker (dp_rank, stage): S_dp, S_stage and the worker score min of both,
        highest score first."""
        view = self.whatif().ideal_view()
        pp, dp = view.worker_score.shape
        stage, dp_rank = np.divmod(np.arange(pp * dp), dp)
        return pd.DataFrame({
            "dp_rank": dp_rank, "stage": stage,
            "s_dp": np.asarray(view.s_dp)[dp_rank], "s_stage": np.asarray(view.s_stage)[stage],
            "worker_score": view.worker_score.ravel()}).sort_values(
            "worker_score", ascending=False, kind="stable").reset_index(drop=True)

    def optypes(self) -> pd.DataFrame:
        """S_t per op type (P2P grouped per direction), highest first."""
        by = self.whatif().ideal_view().slowdown_by_optype
        return pd.DataFrame({"optype": list(by), "slowdown": list(by.values())}).sort_values(
            "slowdown", ascending=False, kind="stable").reset_index(drop=True)

    def steps(self) -> pd.DataFrame:
        """Per traced step: actual, simulated and ideal step time (s) and the step's S."""
        j = self.whatif().to_json()
        steps = [int(s) for s in j["step_slowdown"]]
        return pd.DataFrame({
            "step": steps,
            "actual_s": [j["step_time_actual_s"][str(s)] for s in steps],
            "simulated_s": [j["step_time_nodelay_s"][str(s)] for s in steps],
            "slowdown": [j["step_slowdown"][str(s)] for s in steps]})

    def findings(self, name: str = "whatif") -> list[Finding]:
        """A detector's findings (stragglerlab.run.findings.Finding), computed once per detector."""
        if name not in self._findings:
            detector = get_detector(name)
            if getattr(detector, "reads_whatif", False):  # hand it this job's analysis
                self._findings[name] = detector.detect(self._run, result=self.whatif())
            else:
                self._findings[name] = detector.detect(self._run)
        return list(self._findings[name])

    def detect(self, name: str = "whatif") -> pd.DataFrame:
        """A detector's findings over the whole job, one row per named worker (a job-level
        finding has dp_rank, stage and rank None)."""
        rows = [{"root_cause": f.root_cause.value,
                 "dp_rank": None if r is None else r.dp_rank,
                 "stage": None if r is None else r.stage,
                 "rank": None if r is None else r.rank,
                 "first_step": f.first_step, "last_step": f.last_step,
                 "confidence": f.confidence, "estimated_slowdown": f.estimated_slowdown}
                for f in self.findings(name) for r in (f.ranks or [None])]
        return pd.DataFrame(rows, columns=FINDING_COLUMNS)

    def score(self, name: str = "whatif") -> pd.DataFrame:
        """A detector's findings scored against this run's ground truth (`stragglerlab
        score`'s rules, one run): one row per injected fault (one `clean` row for a clean
        run) with whether a finding named its workers (`recalled`) and its cause, plus the
        run's worker-level true/false positives and negatives and predicted cause."""
        from stragglerlab.analysis.ground_truth import load_truths
        from stragglerlab.analysis.scoring import score_run

        if self.folder is None:
            raise InputError("scoring needs a run folder with its ground truth (faults.json); "
                             "a bare trace file has none", str(self.path))
        (truth,) = load_truths([self.path])
        s = score_run(truth, self.findings(name))
        run = {"detector": name, "tp": s.true_positives, "fp": s.false_positives,
               "fn": s.false_negatives, "predicted_cause": s.predicted_cause.value,
               "run_cause_right": s.cause_ok}
        faults = [{"kind": f.kind, "recalled": f.recalled, "cause_right": f.cause_right,
                   "measured_slowdown": f.measured_slowdown, "observable": f.observable}
                  for f in s.faults] or [{"kind": s.kind, "recalled": None,
                                          "cause_right": None, "measured_slowdown": None,
                                          "observable": None}]
        return pd.DataFrame([{**f, **run} for f in faults])

    def truth(self) -> pd.DataFrame:
        """The injected faults (faults.json), one row per target; empty for a clean run or
        a folder without ground truth."""
        if self.folder is None or not self.folder.has_faults:
            return pd.DataFrame(columns=["kind", "dp_rank", "stage", "rank", "first_step",
                                         "last_step"])
        rows = [{"kind": f.kind, "dp_rank": t.get("dp_rank"), "stage": t.get("stage"),
                 "rank": t.get("rank"), "first_step": f.first_step, "last_step": f.last_step}
                for f in self.folder.faults for t in (f.targets or [{}])]
        return pd.DataFrame(rows, columns=["kind", "dp_rank", "stage", "rank", "first_step",
                                           "last_step"])

    def heatmap(self, out: str | Path | None = None):
        """The worker heatmap (DP x stage, Fig. 14) as a matplotlib Figure; written as PNG
        too when `out` is given (`stragglerlab plot` draws the same)."""
        from stragglerlab.figures.job_pictures import heatmap_figure

        return self._picture(heatmap_figure, f"worker slowdown: {self._name}", out)

    def step_plot(self, out: str | Path | None = None):
        """The per-step slowdown (step times actual / simulated / ideal above S per step) as
        a matplotlib Figure; written as PNG too when `out` is given (as `stragglerlab plot`)."""
        from stragglerlab.figures.job_pictures import step_slowdown_figure

        return self._picture(step_slowdown_figure, f"per-step slowdown: {self._name}", out)

    @property
    def _name(self) -> str:
        return self.meta.trial_name or str(self.path)

    def _picture(self, draw, title: str, out: str | Path | None):
        from stragglerlab.figures.style import figure_style, save_figure

        fig = draw(self.whatif().summary(), title=title)
        if out is not None:
            with figure_style():
                save_figure(fig, out)
        return fig


def summary_series(s: WhatIfSummary, name: str | None = None) -> pd.Series:
    """A what-if result (either model's) as the Series `Job.summary()` and `summary()`
    return: slowdown, waste, straggling (None: no verdict), valid, validity (the gate's
    banner, or that the simulation reproduces the trace), simulation_discrepancy (traced /
    T - 1), m_w, m_s, fwd_bwd_correlation, steps, workers; and which model made it."""
    return pd.Series({"slowdown": s.S, "waste": s.waste, "straggling": s.straggling,
                      "valid": s.validity.valid,
                      "validity": s.validity.banner() or "reproduces the trace",
                      "simulation_discrepancy": s.discrepancy, "m_w": s.M_W, "m_s": s.M_S,
                      "fwd_bwd_correlation": s.fwd_bwd_correlation,
                      "steps": len(s.steps.step), "workers": len(s.workers.rank),
                      "model": s.model.value},
                     name=name if name is not None else (s.job_name or s.path))


def summary(path: str | Path, compute_ideal: str | None = None) -> pd.Series:
    """The what-if result at `path` as `Job.summary()`'s Series, whichever model wrote it:
    a run folder (whatif/whatif.json), an unannotated import's folder, or a whatif.json
    (stragglerlab.run.whatif_reader.read_whatif_summary; InputError for a bad file). Nothing is
    re-analysed."""
    return summary_series(read_whatif_summary(path, compute_ideal))


def open_job(path: str | Path, meta: str | Path | None = None) -> Job:
    """The job at `path` (a run folder, or a trace .parquet with `meta`)."""
    return Job(path, meta)

