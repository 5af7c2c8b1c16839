"""Analyse one window of complete steps: the what-if and the detectors' findings on it.

One window is the last K complete steps after a new step completed. Its result
is one JSON-ready dict, a line of `monitor/windows.jsonl`:

    {"schema": "stragglerlab.monitor-window/1", "kind": "window",
     "step": 17, "steps": [10, ..., 17], "dp_size": 2, "pp_size": 4,
     "slowdown": 1.31,                      # S of the window (Eq. 1)
     "worker_slowdown": [[...dp...], ...],  # min(S_dp, S_stage), [stage][dp_rank]
     "stage_slowdown": {"0": 1.01, ...}, "dp_slowdown": {"0": ...},
     "optype_slowdown": {"forward-compute": 1.2, ...},   # attribution by op type
     "findings": [{"detector", "cause", "ranks", "first_step", "last_step",
                   "estimated_slowdown", "confidence"}],
     "lag_s": 0.12,                # wall clock: records of `step` read -> window written
     "lag_from_step_end_s": 0.6,   # the trace clock (same host): step end -> written, or null
     "analysis_s": 0.08, "time": 1764100000.0,
     "window_steps": 8, "warmup_steps": 3}   # the settings it was analysed with (the
                                            # monitor adds them; older lines lack them)

The what-if runs once per window (stragglerlab.analysis.whatif.run_whatif); the
`whatif` detector diagnoses from that result, as its online mode does
(`WhatIfDetector.observe_step`); any other detector sees the window as a run
of its own (the default online replay with an `online_window_steps` window).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors import Detector, Run, get_detector
from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_evidence import Evidence
from stragglerlab.analysis.whatif import run_whatif
from stragglerlab.monitor.config import WINDOW_SCHEMA
from stragglerlab.run.findings import Finding
from stragglerlab.run.results import WhatIfResult
from stragglerlab.run.whatif_summary import WhatIfSummary
from stragglerlab.trace.meta import JobMeta

MAX_FINDING_RANKS = 64
"""Most ranks listed per finding in a window line (a whole-stage finding at 1,024 workers
names many; the count is kept)."""


def make_detectors(names: list[str], noise_floor: str = "default") -> dict[str, Detector]:
    """A fresh detector per name (InputError for an unknown one); the `whatif` detector's
    thresholds stand above `noise_floor` (a file, `default` or `none`; InputError for a bad
    file, before any window is analysed)."""
    detectors = {name: get_detector(name) for name in dict.fromkeys(names)}
    for det in detectors.values():
        if isinstance(det, WhatIfDetector):
            det.use_noise_floor(noise_floor)
    return detectors


def _r(x: float | None, digits: int = 5) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def finding_json(detector: str, f: Finding) -> dict:
    """A finding as the monitor writes and serves it."""
    ranks = [r.to_dict() for r in f.ranks]
    return {"detector": detector, "cause": f.root_cause.value,
            "ranks": ranks[:MAX_FINDING_RANKS], "n_ranks": len(ranks),
            "first_step": int(f.first_step), "last_step": int(f.last_step),
            "estimated_slowdown": _r(f.estimated_slowdown), "confidence": _r(f.confidence, 3)}


def finding_key(f: dict) -> str:
    """A finding's identity across windows: detector, cause and ranks."""
    ranks = ",".join(f"{r['dp_rank']}/{r['stage']}" for r in f["ranks"])
    return f"{f['detector']}:{f['cause']}:{ranks or 'job'}:{f['n_ranks']}"


def detect(detectors: dict[str, Detector], run: Run, result: WhatIfResult,
           window_steps: int | None = None) -> list[dict]:
    """Every detector's findings on the window run (`window_steps`: the monitor's window
    length, whose online noise floor the `whatif` detector holds findings to)."""
    out = []
    for name, det in detectors.items():
        if isinstance(det, WhatIfDetector):
            if run.trace["step"].nunique() < det.config.min_steps:
                continue
            found = det.diagnose(run, Evidence.from_result(result), window_steps=window_steps)
        else:
            found = det.detect(run)
        out += [finding_json(name, f) for f in found]
    return out


def analyse_window(df: pd.DataFrame, meta: JobMeta, detectors: dict[str, Detector],
                   where: str, testbed: bool, window_steps: int | None = None,
                   first_step: int | None = None) -> dict:
    """The window line (without lag fields) of a window trace `df` (`first_step`: the
    first step of the run the monitor saw; None: the window's own)."""
    t0 = time.perf_counter()
    result = run_whatif(df, meta, where).result
    run = Run(df, meta, where, testbed=testbed, first_step=first_step)
    findings = detect(detectors, run, result, window_steps)
    return {"schema": WINDOW_SCHEMA, "kind": "window", **window_numbers(result.summary()),
            "findings": findings, "analysis_s": round(time.perf_counter() - t0, 4)}


def window_numbers(s: WhatIfSummary) -> dict:
    """A window's what-if numbers (the window line's fields from `step` to `top_workers`),
    from its what-if result as a WhatIfSummary; the layout is the workers'."""
    steps = [int(x) for x in s.steps.step]
    grid = s.workers.grid()
    by = {name: {str(k): _r(v) for k, v in (table or {}).items()}
          for name, table in (("stage", s.by_stage), ("dp", s.by_dp_rank))}
    return {
        "step": steps[-1], "steps": steps,
        "dp_size": int(grid.shape[1]), "pp_size": int(grid.shape[0]),
        "slowdown": _r(s.S),
        "simulation_discrepancy": _r(1.0 + s.discrepancy),
        "valid": s.validity.valid,
        "validity": s.validity.banner(),
        "t_ideal_s": _r(s.T_ideal_s, 7),
        "step_time_s": _r(s.traced_step_s, 7),
        "worker_slowdown": [[_r(v, 4) for v in row] for row in grid.tolist()],
        "stage_slowdown": by["stage"], "dp_slowdown": by["dp"],
        "optype_slowdown": {k: _r(v) for k, v in s.by_kind.items()},
        "top_workers": [{"dp_rank": int(s.workers.dp_rank[i]), "stage": int(s.workers.stage[i])}
                        for i in np.searchsorted(s.workers.rank, s.top_workers)],
    }


def error_line(step: int | None, message: str, rank: int | None = None) -> dict:
    """A windows.jsonl line recording an error (a garbage part, a failed analysis)."""
    return {"schema": WINDOW_SCHEMA, "kind": "error", "step": step, "rank": rank,
            "message": message, "time": round(time.time(), 3)}
