"""nvrx: NVIDIA resiliency extension's two straggler scores, relative and individual.

Source: nvidia-resiliency-ext, `straggler/reporting.py` (v0.4.1),
`Report.identify_stragglers(gpu_rel_threshold=0.75, gpu_indiv_threshold=0.75)`.
nvrx computes two performance scores per rank and reporting interval:

* relative: the best rank's median kernel time over this rank's (compare ranks
  with each other; `rank-score` is this score alone, per stage);
* individual: the rank's own best (lowest) median over the intervals seen so
  far over its current one (compare a rank with its own history), which sees a
  rank that slows down even when every peer is as slow or has no peer.

Here the kernels are forward and backward compute (nvrx leaves communication
out), one interval is `window_steps` steps, a rank's interval time is its
median compute per step, relative scores compare ranks within their pipeline
stage (dp peers), and a rank is flagged `slow-worker` when either score is
below its threshold in some interval; the finding spans its flagged intervals
and carries both scores.

Defaults: nvrx's thresholds 0.75 / 0.75, window_steps 5 (nvrx reports every
`report_time_interval` seconds). What it cannot see: communication (slow
links, delays), GC pauses, job-wide causes (stage, sequence imbalance), a
rank slow from the first interval without faster peers (individual has no
better past, relative no better peer), and slowdowns under 1.33x.

    stragglerlab detect --run RUN --detector nvrx --out RUN/detect
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run, TraceNeed
from stragglerlab.analysis.detectors.config_ranges import in_range
from stragglerlab.analysis.detectors.rank_metrics import rank_step_metrics


@dataclass(frozen=True, kw_only=True)
class NvrxConfig:
    """nvrx thresholds (its defaults)."""

    relative_threshold: float = 0.75
    """gpu_rel_threshold: flag below this relative score."""
    individual_threshold: float = 0.75
    """gpu_indiv_threshold: flag below this individual score."""
    window_steps: int = 5
    """Reporting interval, steps."""

    def __post_init__(self) -> None:
        for name in ("relative_threshold", "individual_threshold"):
            in_range(self, name, 0, 1, why="a score is the reference's time over the rank's, "
                     "at most 1: over 1 the reference itself is flagged, every rank named")


def interval_medians(compute: np.ndarray, window_steps: int) -> np.ndarray:
    """[world, intervals] median compute per step over each interval (NaN-aware)."""
    w, s = compute.shape
    n = max(1, s // window_steps)
    cut = compute[:, :n * window_steps] if s >= window_steps else compute
    return np.nanmedian(cut.reshape(w, n, -1), axis=2)


def nvrx_scores(med: np.ndarray, stage_of_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(relative, individual) scores [world, intervals], 1 = as fast as the reference."""
    best_peer = np.empty_like(med)
    for g in np.unique(stage_of_rank):
        idx = stage_of_rank == g
        best_peer[idx] = np.nanmin(med[idx], axis=0)
    relative = best_peer / np.maximum(med, 1e-12)
    own_best = np.fmin.accumulate(med, axis=1)
    individual = own_best / np.maximum(med, 1e-12)
    return relative, individual


class NvrxDetector(Detector):
    """nvrx's relative and individual compute scores."""

    name = "nvrx"
    description = "NVRx straggler scores: relative (vs peers) and individual (vs own past)"
    needs = TraceNeed.STEP_TIMES

    def __init__(self, config: NvrxConfig | None = None) -> None:
        self.config = config or NvrxConfig()

    def detect(self, run: Run) -> list[Finding]:
        """Ranks whose relative or individual score falls below its threshold."""
        cfg = self.config
        if run.trace.empty or run.trace["step"].nunique() < cfg.window_steps:
            return []
        m = rank_step_metrics(run.trace, run.meta)
        med = interval_medians(m.values["compute"], cfg.window_steps)
        relative, individual = nvrx_scores(med, m.stage_of_rank)
        flag = (relative < cfg.relative_threshold) | (individual < cfg.individual_threshold)
        out = []
        for r in np.flatnonzero(flag.any(axis=1)):
            hit = np.flatnonzero(flag[r])
            first = int(m.steps[min(hit[0] * cfg.window_steps, len(m.steps) - 1)])
            last = int(m.steps[min((hit[-1] + 1) * cfg.window_steps, len(m.steps)) - 1])
            worst = float(min(np.nanmin(relative[r, hit]), np.nanmin(individual[r, hit])))
            out.append(Finding(
                [run.rank_ref(int(r))], first, last, RootCause.SLOW_WORKER,
                confidence=float(min(1.0, 0.5 + 2 * (0.75 - worst))),
                detail={"relative_score": float(np.nanmin(relative[r])),
                        "individual_score": float(np.nanmin(individual[r])),
                        "config": asdict(cfg)}))
        return out
