"""Two rules of the `whatif` detector that read the run, not the what-if: a failed run's
lost rank (before the rules) and measured GC pauses (the `gc` rule).

    failure_findings(run)                               # [] for a run that did not fail
    gc_pauses(run, slowdown, steps, config)             # Finding or None
"""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import gc_pauses_by_rank, step_time_total
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig


def failure_findings(run: Run) -> list[Finding]:
    """The rank a failed run lost, as a worker finding."""
    if run.outcome != "failed":
        return []
    rank = (run.error or {}).get("rank")
    if rank is None and run.last_step_by_rank:
        last = min(run.last_step_by_rank.values())
        stopped = [r for r, s in run.last_step_by_rank.items() if s == last]
        rank = stopped[0] if len(stopped) == 1 else None
    if rank is None:
        return []
    # The failing step follows the last one the rank finished. Its status file lags by
    # one (a step's end is reported with the next step's start), so the trace, which
    # holds every step all ranks finished, may know a later one.
    traced = int(run.trace["step"].max()) if not run.trace.empty else 0
    step = max(run.last_step_by_rank.get(int(rank), traced), traced) + 1
    # A dead process is a crash; a rank that stopped progressing (or timed out) hung.
    died = (run.error or {}).get("kind") == "worker-died"
    cause = RootCause.CRASH if died else RootCause.HANG
    return [Finding([run.rank_ref(int(rank))], step, step, cause, 1.0,
                    detected_at_step=step,
                    detail={"failure": (run.error or {}).get("kind", "stopped")})]


def gc_pauses(run: Run, slowdown: float, steps: np.ndarray,
              config: WhatIfDetectorConfig) -> Finding | None:
    """Rule 2: measured GC pauses outside the planned `gc` op take `gc_min_share` of the
    job's time -> `gc-pauses` on the ranks that pause."""
    pauses = gc_pauses_by_rank(run.trace)
    if pauses.empty or pauses.max() <= 0:
        return None
    share = float(pauses.max() / max(step_time_total(run.trace), 1e-12))
    if share < config.gc_min_share:
        return None
    pausing = pauses[pauses >= config.gc_rank_share * pauses.max()].index
    return Finding(
        [run.rank_ref(int(r)) for r in sorted(pausing)], int(steps[0]), int(steps[-1]),
        RootCause.GC_PAUSES, confidence=float(min(1.0, 0.5 + share * 5)),
        estimated_slowdown=slowdown,
        detail={"gc_pause_share": share,
                "gc_pause_s_by_rank": {str(k): float(v) for k, v in pauses.items()}})
