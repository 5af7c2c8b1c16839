"""Evidence of the `whatif` detector: what its diagnosis reads off the what-if analysis.

Offline it is the run folder's whatif.json (`read_evidence`, written by `stragglerlab
whatif`); online a fresh analysis of the steps seen so far (`Evidence.analyse`). Both use
the paper's mean compute ideal. The diagnosis itself is in whatif.py.

    ev = read_evidence(run)          # run: stragglerlab.analysis.detectors.base.Run
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglerlab.analysis.detectors.base import Run
from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif
from stragglerlab.run.results import IdealView, WhatIfResult
from stragglerlab.run.run_folder import WHATIF_JSON, RunFolder
from stragglerlab.run.whatif_record import WhatIfRecord
from stragglerlab.util.errors import InputError


@dataclass
class Evidence:
    """What the diagnosis reads off the what-if analysis (mean ideal, the paper's)."""

    steps: np.ndarray
    """Analysed step numbers, ascending."""
    view: IdealView
    """Slowdown, S_t, S_dp, S_stage (mean and per step), worker scores, M_W, M_S."""
    fwd_bwd_correlation: float | None
    """Sequence-imbalance signature."""
    comm_excess_by_worker: np.ndarray
    """[pp, dp], s: comm transfer time over the op type's median."""
    launch_by_dp_rank: np.ndarray | None = None
    """[dp, steps]: per step, the no-delay step time with one DP rank's launch delays
    restored over the no-delay step time (the method's launch attribution); None where the
    job's launch slowdown is under the attribution threshold (1.03)."""
    launch_by_stage: np.ndarray | None = None
    """[pp, steps]: the same per stage, or None."""

    @classmethod
    def from_record(cls, record: WhatIfRecord) -> Evidence:
        """From whatif.json (offline)."""
        return cls(np.asarray(record.steps), record.ideal(ComputeIdeal.MEAN.value),
                   record.fwd_bwd_correlation, record.comm_excess_by_worker,
                   record.launch_by_dp_rank, record.launch_by_stage)

    @classmethod
    def analyse(cls, run: Run) -> Evidence:
        """From a fresh analysis of the run's trace (online: the sliding window)."""
        return cls.from_result(run_whatif(run.trace, run.meta, where=run.path,
                                          compute_ideal=ComputeIdeal.MEAN).result)

    @classmethod
    def from_result(cls, result: WhatIfResult) -> Evidence:
        """From a what-if result in memory (the mean ideal's, the paper's)."""
        launch = {name: _launch_ratios(result, name) for name in ("dp_rank", "stage")}
        return cls(np.asarray(result.steps), result.ideal_view(), result.fwd_bwd_correlation,
                   np.asarray(result.comm_excess_by_worker), launch["dp_rank"], launch["stage"])


def _launch_ratios(result: WhatIfResult, name: str) -> np.ndarray | None:
    """[groups, steps] launch slowdown per group of `name` (dp_rank, stage, in group
    order) and step, or None where the result has no launch attribution."""
    got = result.launch_step_ratios(name)
    if got is None:
        return None
    groups, ratios = got
    return ratios[np.argsort(groups)]


def read_evidence(run: Run) -> Evidence:
    """The run folder's whatif.json as Evidence; InputError when it was not written yet."""
    folder = RunFolder(path=Path(run.path))
    if not folder.has_whatif:
        raise InputError(f"no {WHATIF_JSON} in this run folder: the whatif detector reads the "
                         f"what-if result; run `stragglerlab whatif --run {run.path}` first",
                         run.path or None)
    # RunFolder reads and checks the file (its layout against meta.yaml, by the record
    # this reader needs); here its steps and ops against the trace.
    record = folder.whatif_record()
    stale = _describes_another_trace(record, run)
    if stale:
        raise InputError(f"{WHATIF_JSON} was written from another trace than this folder's "
                         f"({stale}): trace.parquet or meta.yaml changed since `stragglerlab "
                         f"whatif` ran; run `stragglerlab whatif --run {run.path}` again",
                         run.path or None)
    return Evidence.from_record(record)


def _describes_another_trace(record: WhatIfRecord, run: Run) -> str:
    """How the what-if record and the run's trace differ ('' when they agree): its layout
    (the reader checks it against meta.yaml; a folder without one has the parquet's meta),
    its steps, its op count. A findings file drawn from a stale record would name workers
    and steps of a job that is no longer there."""
    mine, theirs = run.meta, record.job_meta
    for key in ("dp_size", "pp_size", "world_size"):
        if getattr(mine, key) != getattr(theirs, key):
            return f"its {key} {getattr(theirs, key)}, the trace's {getattr(mine, key)}"
    steps = np.unique(run.trace["step"].to_numpy())
    if len(steps) != len(record.steps) or (steps != np.asarray(record.steps)).any():
        return (f"its steps {record.steps[0]}..{record.steps[-1]} ({len(record.steps)}), "
                f"the trace's {int(steps[0])}..{int(steps[-1])} ({len(steps)})")
    n_ops = record.doc.get("n_ops")
    if isinstance(n_ops, int) and n_ops != len(run.trace):
        return f"its {n_ops:,} ops, the trace's {len(run.trace):,}"
    return ""
