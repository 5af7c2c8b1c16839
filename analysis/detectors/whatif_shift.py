"""Slow devices with no unslowed DP peer, for the `whatif` detector: a stage whose own
compute rose mid-run.

`whatif_device.py` holds each worker against the other DP ranks of its stage. Two
cases leave it nothing to hold against: one DP rank (pure PP), and every DP rank of a
stage slowed at once (two slow workers in one DP-2 stage). Neither is a heavy stage,
though: a partition is heavy from the first step to the last (an offset constant per
stage), while a device slows from the step its fault starts. So per stage, its
fastest DP rank's work-normalized compute (`whatif_device.normalized_compute`: GC
pauses out, per unit of modelled work) is read over time:

* the stage's **rise**: over every window [a, b] of at least `min_steps` steps with a
  step before it, the window's lowest step over the highest of every step outside it
  (`level_shift`; the best window is kept);
* the rise **over the other stages' own rise on the same window** (their median), so a
  busy host, which lifts every stage at once, is not a shift. Reading each stage
  against its own reference first keeps a second slowed stage from hiding the first: a
  per-step ratio over the other stages mixes both
  faults' windows, and on dev it read 1.07 for a 1.31x device beside a 1.24x one.

A stage is slowed over [a, b] when both reach `shift_ratio`. Its DP ranks no other
finding named are then `slow-worker` over that window.

Leading steps still settling (`analysis.settling`, read on the job's step times) are
left out (on unpaced runs with one warm-up step the first traced step alone read 1.47 on
a clean run; paced, with three warm-up steps, it is settled). This statistic, with the first
step in and one reference step (`benchmarks/stage_shift_floor.py`), reads at most 1.016
on every stage of the dev split's runs that held no slowed device; at most 1.013 on 20
fresh paced clean runs with stages at 1024-token microbatches (DP 2 x PP 2, DP 2 x PP 4,
DP 4 x PP 4, pure PP 2 and 4; seeds 101-104) and 1.057 on 4 of pure PP 2 at 256 tokens;
at most 1.032 on the eight unpaced differential traces and the artifact's two samples;
while the dev split's pure-PP slow devices read 1.22-2.82. One reference step, with the
first step in, lets it see a device slowed from the second or third traced step, which
the splits' first steps (traced from step 3, faults from step 4) draw often.

What it cannot see: a device slowed from the first kept step (nothing before it; only
the partition, which no trace records, would tell it from a heavy stage).

    slowed_stages(run, steps, cfg, found, worker_scores)   # list[Finding]
"""

from __future__ import annotations

import warnings

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run, named_cells
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_device import normalized_compute
from stragglerlab.analysis.settling import settling_steps
from stragglerlab.analysis.steps import step_times

SHIFT_REFERENCE_STEPS = 1
"""Steps outside a window a shift needs (at least one of them before it)."""


def level_shift(series: np.ndarray, window: int,
                reference: int = SHIFT_REFERENCE_STEPS) -> tuple[float, int, int]:
    """The strongest rise of a series over a run of steps: over every [a, b] with
    b - a + 1 >= window and a >= 1, min(series[a..b]) over the max of every step outside
    it (at least `reference` of them). Returns (ratio, a, b), or (0.0, -1, -1) when the
    series is too short. One pass per start: O(T^2) in numpy over T steps, a few ms at
    T = 1000."""
    s = np.asarray(series, dtype=float)
    n = len(s)
    best = (0.0, -1, -1)
    if n < 1 + window or n < window + reference:
        return best
    suffix_max = np.append(np.maximum.accumulate(s[::-1])[::-1], -np.inf)  # max(s[i:])
    prefix_max = -np.inf
    for a in range(1, n - window + 1):
        prefix_max = max(prefix_max, s[a - 1])  # max(s[:a])
        b = np.arange(a + window - 1, n)
        ok = a + (n - 1 - b) >= reference
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
    """min(series[a..b]) over the max of series outside [a, b]; 0 when nothing is outside."""
    s = np.asarray(series, dtype=float)
    ref = np.r_[s[:a], s[b + 1:]]
    return float(s[a:b + 1].min() / max(float(ref.max()), 1e-12)) if len(ref) else 0.0


def settled_from(run: Run, steps: np.ndarray) -> int:
    """Index into `steps` of the first step past the job's leading settling steps."""
    times = step_times(run.trace[run.trace["step"].isin(steps)])
    return len(settling_steps(times.index, times.to_numpy()))


def stage_rises(own: np.ndarray, window: int) -> list[tuple[float, float, int, int]]:
    """Per stage of `own` [stage, step]: (its rise, that rise over the other stages'
    median rise on the same window, a, b); (0, 0, -1, -1) where the series is too short."""
    out = []
    for stage in range(own.shape[0]):
        rise, a, b = level_shift(own[stage], window)
        if a < 0:
            out.append((0.0, 0.0, -1, -1))
            continue
        others = [shift_at(own[o], a, b) for o in range(own.shape[0]) if o != stage]
        out.append((rise, rise / max(float(np.median(others)), 1e-12), a, b))
    return out


def slowed_stages(run: Run, steps: np.ndarray, cfg: WhatIfDetectorConfig,
                  found: list[Finding], worker_scores: np.ndarray,
                  grid: np.ndarray | None = None) -> list[Finding]:
    """`slow-worker` findings for the DP ranks of a stage whose own compute rose mid-run
    (module docstring), on workers no finding in `found` names.

    worker_scores: the what-if's per-step worker score [pp, dp, steps], for the
    estimate of how much the stage held the job. grid: `normalized_compute` of the run
    over `steps` when the caller has it (computed here otherwise)."""
    pp, dp = run.meta.pp_size, run.meta.dp_size
    if pp < 2 or len(steps) < 1 + cfg.min_steps:
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
    k = settled_from(run, steps)
    named = named_cells(found)
    out = []
    for stage, (rise, relative, a, b) in enumerate(stage_rises(own[:, k:], cfg.min_steps)):
        if min(rise, relative) < cfg.shift_ratio:
            continue
        a, b = a + k, b + k
        score = worker_scores[stage, :, a:b + 1] if worker_scores.size else np.ones(1)
        out += [Finding(
            [run.worker(d, stage)], int(steps[a]), int(steps[b]), RootCause.SLOW_WORKER,
            confidence=float(min(1.0, 0.5 + (min(rise, relative) - cfg.shift_ratio) * 2)),
            estimated_slowdown=float(max(np.mean(score), 1.0)),
            detail={"test": "stage-shift", "shift_own": rise,
                    "shift_over_other_stages": relative})
            for d in range(dp) if (d, stage) not in named]
    return out
