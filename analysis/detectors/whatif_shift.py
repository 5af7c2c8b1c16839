"""Slow devices with no unslowed DP peer, for the `whatif` detector: a stage whose own
compute rose mid-run.

`whatif_device.py` holds each worker against the other DP ranks of its stage. Two
cases leave it nothing to hold against: one DP rank (pure PP), and every DP rank of a
stage slowed at once (two slow workers in one DP-2 stage). Neither is a heavy stage,
though: a partition is heavy from the first step to the last (an offset constant per
stage), while a device slows from the step its fault starts. So per stage, its
fastest DP rank's work-normalized compute (`whatif_device.normalized_compute`: GC
pauses out, per unit of modelled work) is read over time, twice:

* over the median of the other stages' in the same step, so a busy host, which lifts
  every stage, is not a shift;
* on its own, so a two-stage job whose other stage slowed (which lowers this one's
  ratio outside that window) is not a shift of this one.

A stage is slowed over the steps [a, b] (at least `min_steps`) when in both readings
every step of the window is at least `shift_ratio` over every step outside
it (at least `SHIFT_REFERENCE_STEPS` of them; the first traced step is never one: it
is the run's least settled, and on dev it alone read 1.47 on a clean run). Its DP
ranks no other finding named are then `slow-worker` over that window.

What it cannot see: a device slowed from the start (no step before it; only the
partition, which no trace records, would tell it from a heavy stage), or from the
second traced step (one reference step).

    slowed_stages(run, steps, cfg, found, worker_scores)   # list[Finding]
"""

from __future__ import annotations

import warnings

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run, named_cells
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_device import median_of_others, normalized_compute

SHIFT_REFERENCE_STEPS = 2
"""Steps outside a window a shift needs, the first traced step not counted."""


def level_shift(series: np.ndarray, window: int,
                reference: int = SHIFT_REFERENCE_STEPS) -> tuple[float, int, int]:
    """The strongest rise of a series over a run of steps: over every [a, b] with
    b - a + 1 >= window and a >= 1, min(series[a..b]) over the max of the steps outside
    it but the first (at least `reference` of them). Returns (ratio, a, b), or
    (0.0, -1, -1) when the series is too short. One pass per start: O(T^2) in numpy
    over T steps, a few ms at T = 1000."""
    s = np.asarray(series, dtype=float)
    n = len(s)
    best = (0.0, -1, -1)
    if n < 1 + window + reference:
        return best
    suffix_max = np.append(np.maximum.accumulate(s[::-1])[::-1], -np.inf)  # max(s[i:])
    prefix_max = -np.inf
    for a in range(1, n - window + 1):
        if a > 1:
            prefix_max = max(prefix_max, s[a - 1])  # max(s[1:a])
        b = np.arange(a + window - 1, n)
        outside = (a - 1) + (n - 1 - b)
        ok = outside >= reference
        if not ok.any():
            break  # later starts only shrink the reference
        inside = np.minimum.accumulate(s[a:])[window - 1:]  # min(s[a..b]) per b
        ref = np.maximum(prefix_max, suffix_max[b + 1])
        ratio = np.where(ok, inside / np.maximum(ref, 1e-12), 0.0)
        k = int(np.argmax(ratio))
        if ratio[k] > best[0]:
            best = (float(ratio[k]), a, int(b[k]))
    return best


def shift_at(series: np.ndarray, a: int, b: int) -> float:
    """min(series[a..b]) over the max of series outside [a, b] but its first step."""
    s = np.asarray(series, dtype=float)
    ref = np.r_[s[1:a], s[b + 1:]]
    return float(s[a:b + 1].min() / max(float(ref.max()), 1e-12)) if len(ref) else 0.0


def slowed_stages(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
                  found: list[Finding], worker_scores: np.ndarray,
                  grid: np.ndarray | None = None) -> list[Finding]:
    """`slow-worker` findings for the DP ranks of a stage whose own compute rose mid-run
    (module docstring), on workers no finding in `found` names.

    worker_scores: the what-if's per-step worker score [pp, dp, steps], for the
    estimate of how much the stage held the job. grid: `normalized_compute` of the run
    over `steps` when the caller has it (computed here otherwise)."""
    pp, dp = run.meta.pp_size, run.meta.dp_size
    if pp < 2 or len(steps) < 1 + cfg.min_steps + SHIFT_REFERENCE_STEPS:
        return []
    if grid is None:
        grid = normalized_compute(run.trace, pp, dp, steps)
    if grid is None:
        return []
    with warnings.catch_warnings():  # a step a stage did not trace: its median, a no-shift
        warnings.simplefilter("ignore", RuntimeWarning)
        own = np.nanmin(grid, axis=1)  # [stage, step]: the stage's fastest DP rank
        own = np.where(np.isnan(own), np.nanmedian(own, axis=1, keepdims=True), own)
    if np.isnan(own).any():
        return []
    over_others = own / np.maximum(median_of_others(own[None])[0], 1e-12)
    named = named_cells(found)
    out = []
    for stage in range(pp):
        ratio, a, b = level_shift(over_others[stage], cfg.min_steps)
        if ratio < cfg.shift_ratio:
            continue
        rise = shift_at(own[stage], a, b)
        if rise < cfg.shift_ratio:
            continue  # the other stages fell, this one did not rise
        score = worker_scores[stage, :, a:b + 1] if worker_scores.size else np.ones(1)
        out += [Finding(
            [run.worker(d, stage)], int(steps[a]), int(steps[b]), RootCause.SLOW_WORKER,
            confidence=float(min(1.0, 0.5 + (min(ratio, rise) - cfg.shift_ratio) * 2)),
            estimated_slowdown=float(max(np.mean(score), 1.0)),
            detail={"test": "stage-shift", "shift_over_other_stages": ratio,
                    "shift_own": rise})
            for d in range(dp) if (d, stage) not in named]
    return out
