"""bocd: Bayesian online change-point detection per rank, as Greyhound / Falcon do.

Source: Falcon (Wu et al., "FALCON: Pinpointing and Mitigating Stragglers for
Large-Scale Hybrid-Parallel Training", arXiv 2410.12588) and its follow-up
Greyhound run BOCD (Adams & MacKay, "Bayesian Online Changepoint Detection",
arXiv 0710.3742) on each worker's iteration time and on its computation and
communication times, then localize the fail-slow to the workers whose series
changed. Here, per rank and per step, the series are the rank's compute time
and its communication time (rank_metrics.py), each normalized by its own
median over the first `warmup_steps` steps (y = x / baseline - 1), and BOCD
runs with a Gaussian likelihood of known noise and a conjugate Normal prior
on each segment's mean, constant hazard 1 / `hazard_lambda` (vectorized over
every rank and metric at once; the recursion runs once per step).

A series has an upward change when its MAP run length says a segment started
after the warm-up and that segment's mean is `min_shift` over the baseline.
Localization (Falcon compares workers): a rank whose compute shift is
`min_shift` over the median rank's -> `slow-worker`; otherwise a rank whose
communication shift is `min_shift` over the median rank's -> `net-throttle`.

Defaults: hazard_lambda 100 steps, noise_sd 0.05 (relative), prior_sd 0.5,
min_shift 0.1 (Falcon's 10% fail-slow bar), warmup_steps 3; none tuned on our
cases. What it cannot see: anything present from the first step (stage or
sequence imbalance, a slow worker from step 0: no change to detect), GC
pauses that do not shift a segment's mean, causes beyond compute vs comm,
and, because waiting is inside a rank's comm time, which end of a slow link
is the slow one when both ends wait alike.

    stragglerlab detect --run RUN --detector bocd --out RUN/detect
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from stragglerlab.analysis.detectors.base import Detector, Finding, RootCause, Run, TraceNeed
from stragglerlab.analysis.detectors.config_ranges import SD_MAX, SD_MIN, in_range
from stragglerlab.analysis.detectors.rank_metrics import rank_step_metrics


@dataclass(frozen=True, kw_only=True)
class BocdConfig:
    """Parameters of the bocd detector (literature defaults, not tuned on our cases)."""

    hazard_lambda: float = 100.0
    """Expected segment length, steps (constant hazard 1/lambda; Adams & MacKay's example)."""
    noise_sd: float = 0.05
    """Known per-step noise of a normalized series (5% step-to-step jitter)."""
    prior_sd: float = 0.5
    """Prior spread of a segment's mean (normalized units)."""
    min_shift: float = 0.1
    """Relative rise of a segment over the baseline that counts (Falcon: 10% fail-slow)."""
    warmup_steps: int = 3
    """Steps whose median is each series' baseline."""

    def __post_init__(self) -> None:
        in_range(self, "hazard_lambda", 1, lo_open=True,
                 why="it is an expected segment length in steps and 1/lambda a change "
                     "probability under 1 (at 1, log(1 - 1/lambda) is log 0)")
        for name in ("noise_sd", "prior_sd"):
            in_range(self, name, SD_MIN, SD_MAX,
                     why="it is a spread in relative units whose square and reciprocal "
                         "the recursion takes (0 divides by zero, 1e300 overflows)")
        in_range(self, "warmup_steps", 1,
                 why="each series' baseline is the median of its warm-up steps")


def bocd_map_segments(y: np.ndarray, cfg: BocdConfig) -> tuple[np.ndarray, np.ndarray]:
    """BOCD over series y [series, steps]: after every step t, the start index of the MAP
    segment and that segment's mean so far, each [series, steps]. NaNs count as 0."""
    y = np.nan_to_num(np.asarray(y, dtype=float), nan=0.0)
    n, t_max = y.shape
    h = 1.0 / cfg.hazard_lambda
    var0, varx = cfg.prior_sd ** 2, cfg.noise_sd ** 2
    log_r = np.zeros((n, 1))                # log P(run length r), r = 0..t
    mu = np.zeros((n, 1))                   # posterior mean of the segment mean, per r
    var = np.full((n, 1), var0)             # its variance
    starts = np.zeros((n, t_max), dtype=np.int64)
    for t in range(t_max):
        x = y[:, t:t + 1]
        pred_var = var + varx
        log_pred = -0.5 * (np.log(2 * np.pi * pred_var) + (x - mu) ** 2 / pred_var)
        grow = log_r + log_pred + np.log(1 - h)
        cp = np.logaddexp.reduce(log_r + log_pred + np.log(h), axis=1, keepdims=True)
        log_r = np.concatenate([cp, grow], axis=1)
        log_r -= np.logaddexp.reduce(log_r, axis=1, keepdims=True)
        post_var = 1.0 / (1.0 / var + 1.0 / varx)
        post_mu = post_var * (mu / var + x / varx)
        mu = np.concatenate([np.zeros((n, 1)), post_mu], axis=1)
        var = np.concatenate([np.full((n, 1), var0), post_var], axis=1)
        # Run length r after step t: the segment holds steps t-r+1..t (r = 0: a change
        # is expected next; count the step itself).
        starts[:, t] = t + 1 - np.maximum(np.argmax(log_r, axis=1), 1)
    csum = np.concatenate([np.zeros((n, 1)), np.cumsum(y, axis=1)], axis=1)
    ends = np.arange(1, t_max + 1)[None, :]
    means = (csum[:, 1:] - np.take_along_axis(csum, starts, axis=1)) / (ends - starts)
    return starts, means


class BocdDetector(Detector):
    """Per-rank BOCD on compute and communication time, localized against the peers."""

    name = "bocd"
    description = "Greyhound/Falcon-style BOCD change points on per-rank compute and comm time"
    needs = TraceNeed.STEP_TIMES

    def __init__(self, config: BocdConfig | None = None) -> None:
        self.config = config or BocdConfig()

    def detect(self, run: Run) -> list[Finding]:
        """Change points of the whole run's per-rank series (online: of the steps so far)."""
        cfg = self.config
        if run.trace.empty or run.trace["step"].nunique() <= cfg.warmup_steps + 1:
            return []
        m = rank_step_metrics(run.trace, run.meta)
        out: list[Finding] = []
        for metric, cause in (("compute", RootCause.SLOW_WORKER),
                              ("comm", RootCause.NET_THROTTLE)):
            x = m.values[metric]
            base = np.nanmedian(x[:, :cfg.warmup_steps], axis=1, keepdims=True)
            if not np.isfinite(base).any():
                continue
            y = x / np.where(base > 0, base, np.nan) - 1.0
            starts, means = bocd_map_segments(y, cfg)
            # A step is changed when its MAP segment began after the warm-up, holds 2+
            # steps and sits min_shift over the baseline.
            seg_len = np.arange(1, len(m.steps) + 1)[None, :] - starts
            changed = (starts >= cfg.warmup_steps) & (seg_len >= 2)
            up_t = np.where(changed, means, 0.0)
            up = up_t.max(axis=1)
            hit = changed & (up_t >= cfg.min_shift) & \
                (up_t >= np.median(up_t, axis=0, keepdims=True) + cfg.min_shift)
            for r in np.flatnonzero(hit.any(axis=1)):
                steps_hit = np.flatnonzero(hit[r])
                first = int(starts[r, steps_hit[0]])
                out.append(Finding(
                    [run.rank_ref(int(r))], int(m.steps[first]), int(m.steps[steps_hit[-1]]),
                    cause, confidence=float(min(1.0, 0.5 + up[r])),
                    detail={"metric": metric, "shift": float(up[r]),
                            "config": asdict(cfg)}))
            if out:
                return out  # compute explains it: comm changes are the peers waiting
        return out
