"""minder: similarity of each rank's metrics to its peers', denoised over a window (Minder).

Source: Deng et al., "Minder: Faulty Machine Detection for Large-scale
Distributed Model Training" (NSDI'25, arXiv 2411.01791). Minder collects a
vector of per-machine monitoring metrics, denoises each metric over a time
window (an LSTM-VAE reconstruction there), computes for every machine its
distance to the other machines in each window (machines of a training job
behave alike), and flags the machine whose distance is the largest and stays
above a threshold for `continuity` consecutive windows.

Here the machines are the traced ranks and the metric vector per step is
(iteration, compute, communication) time (rank_metrics.py). Ranks are
compared within their pipeline stage when the stage has peers (stages
legitimately differ in cost), else across the job; each metric is scaled by
its median over the compared ranks in that step; the denoiser is a rolling
median over `window_steps` steps (a robust stand-in for the VAE, no
training); a rank's score is the Euclidean distance of its denoised vector to
the peers' median vector. A rank is flagged when it has the largest score of
its group for at least `continuity` consecutive steps with score >=
`threshold`. Minder names a faulty machine, not a cause; to fit the scorer,
the flag is `slow-worker` when compute dominates its distance, else
`net-throttle`.

Defaults: window_steps 5, continuity 4 (Minder: 4 consecutive minutes of
windows), threshold 0.15 (relative distance; provisional, to be set on dev
if tuned at all: the field's threshold is on its own normalized metrics).
What it cannot see: job-wide causes (stage or sequence imbalance, GC on
every rank), faults shorter than `continuity`, and, with one rank per group,
anything (pure PP without DP peers is compared across stages).

    stragglerlab detect --run RUN --detector minder --out RUN/detect
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run, TraceNeed
from stragglerlab.analysis.detectors.rank_metrics import METRICS, rank_step_metrics


@dataclass(frozen=True, kw_only=True)
class MinderConfig:
    """Parameters of the minder detector."""

    window_steps: int = 5
    """Rolling-median denoising window, steps."""
    continuity: int = 4
    """Consecutive steps a rank must be the group's most distant one (Minder's continuity)."""
    threshold: float = 0.15
    """Distance (relative units) a flagged step needs; provisional, to be set on dev."""


class MinderDetector(Detector):
    """Distance of each rank's denoised metric vector to its peers', with continuity."""

    name = "minder"
    description = "Minder-style: distance of each rank's metric vector to its peers', denoised"
    needs = TraceNeed.STEP_TIMES

    def __init__(self, config: MinderConfig | None = None) -> None:
        self.config = config or MinderConfig()

    def scores(self, run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, distance [world, steps], compute share of the distance [world, steps])."""
        cfg = self.config
        m = rank_step_metrics(run.trace, run.meta)
        x = np.stack([np.nan_to_num(m.values[k], nan=0.0) for k in METRICS])  # [k, w, s]
        # Denoise: rolling median over steps, per rank and metric (vectorized by pandas).
        k, w, s = x.shape
        flat = pd.DataFrame(x.reshape(k * w, s).T)
        den = flat.rolling(cfg.window_steps, min_periods=1).median().to_numpy().T
        x = den.reshape(k, w, s)
        groups = m.stage_of_rank if run.meta.dp_size > 1 else np.zeros(w, dtype=int)
        dist = np.zeros((w, s))
        share = np.zeros((w, s))
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            ref = np.median(x[:, idx, :], axis=1, keepdims=True)          # [k, 1, s]
            rel = (x[:, idx, :] - ref) / np.maximum(ref, 1e-9)
            dist[idx] = np.sqrt((rel ** 2).sum(axis=0))
            share[idx] = rel[METRICS.index("compute")] ** 2 / np.maximum((rel ** 2).sum(0),
                                                                          1e-18)
        return m.steps, dist, share

    def detect(self, run: Run) -> list[Finding]:
        """Flag ranks that stay the most distant of their group (see the module docstring)."""
        cfg = self.config
        if run.trace.empty or run.trace["step"].nunique() < cfg.continuity:
            return []
        steps, dist, share = self.scores(run)
        groups = (np.arange(dist.shape[0]) // run.meta.dp_size if run.meta.dp_size > 1
                  else np.zeros(dist.shape[0], dtype=int))
        group_max = np.zeros_like(dist)
        for g in np.unique(groups):
            idx = groups == g
            group_max[idx] = dist[idx].max(axis=0)
        top = (dist >= group_max) & (dist >= cfg.threshold) & (group_max > 0)
        # Length of the run of consecutive flagged steps ending at each step (vectorized).
        count = np.cumsum(top, axis=1)
        run_len = count - np.maximum.accumulate(np.where(~top, count, 0), axis=1)
        longest, ends = run_len.max(axis=1), run_len.argmax(axis=1)
        out = []
        for r in np.flatnonzero(longest >= cfg.continuity):  # one finding per flagged rank
            best, best_end = int(longest[r]), int(ends[r])
            first = best_end - best + 1
            comp = float(share[r, first:best_end + 1].mean())
            out.append(Finding(
                [run.rank_ref(int(r))], int(steps[first]), int(steps[best_end]),
                RootCause.SLOW_WORKER if comp >= 0.5 else RootCause.NET_THROTTLE,
                confidence=float(min(1.0, 0.5 + dist[r, first:best_end + 1].mean())),
                detail={"distance": float(dist[r, first:best_end + 1].mean()),
                        "compute_share": comp, "consecutive_steps": int(best),
                        "config": asdict(cfg)}))
        return out
