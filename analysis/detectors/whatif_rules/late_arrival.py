"""Rule `late_arrival`: a DP rank that reaches its collectives late, with nothing traced to
show for it -> `net-delay` on it.

A delay outside the traced ops (a late posting, a slow network path before the
collective starts) is what the method calls launch delay: the untraced time between an
op's dependencies and its start. The what-if attributes it (design.md, launch-delay
attribution): per step, the no-delay frame with one DP rank's launch delays put back,
simulated, over the no-delay step time. A rank whose launch delays alone slow the step
by `late_arrival_ratio` over the median of the other DP ranks' (each rank's own launch
noise divided out), held over `min_steps` consecutive steps, is arriving late. Its stage
is the one whose launch slowdown stands highest over that window (the only one without
stages). The attribution exists only where the job's launch slowdown reaches the
method's threshold (1.03), so a run whose untraced time is in the noise has no table and
no finding; needs DP peers. Excluded (`EXCLUDES`): workers a finding on the board names
are left to it.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.whatif_device import median_of_others
from stragglerlab.analysis.detectors.whatif_rules import (
    Board,
    Exclusion,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding, RootCause

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="late_arrival_ratio", value=1.05, unit=Unit.RATIO,
        what=("a DP rank's launch slowdown (its launch delays alone restored) over the other DP "
              "ranks' median, held over `min_steps`, that names a late arrival (`net-delay`)"),
        noise=(NoiseStatistic(1.0, ("late_arrival_ratio",)),),
        provenance="""\
        A DP rank arrives late (`whatif_rules/late_arrival.py`) when the step with only its
        launch delays restored, over the no-delay step, is at least this over the median of
        the other DP ranks' for `min_steps` consecutive steps: its untraced wait alone costs
        the step 5 % more than the other ranks' own. Set from the noise, before any dev case
        was scored with it (`benchmarks/late_arrival_floor.py`, which
        computes the attribution whatever the job's launch slowdown): fresh paced clean runs of
        pure DP 2 and 4, DP 2 x PP 2, DP 2 x PP 4 and DP 4 x PP 4 (seeds 101-104, 20 runs; job
        launch slowdown 1.003-1.012, so none has the table) and the six §6 slow-worker runs of
        seeds 95-96 hold at most 1.011 (90th percentile 1.008); the
        eight unpaced testbed traces of the differential set at most 1.039 (a throttled
        link; a clean DP 2 x PP 2 1.033, which 1.03, the method's attribution threshold, would
        have named), besides 1.076 on the slow worker of `slow-worker-3`, whose CPU quota
        slows its untraced work too (a slow-worker finding names it first). 1.05 stands over
        all of them."""),
)



def over_other_ranks(launch: np.ndarray) -> np.ndarray:
    """[n, steps] launch slowdowns -> each over the median of the other n - 1 (n >= 2)."""
    return launch / np.maximum(median_of_others(launch[None])[0], 1e-12)


def held_over(ratio: np.ndarray, steps: int) -> np.ndarray:
    """[n, T] -> [n, T - steps + 1]: the least of every `steps` consecutive values."""
    return np.lib.stride_tricks.sliding_window_view(ratio, steps, axis=1).min(axis=2)


EXCLUDES = Exclusion.any_cause_but()


def rule(s: Signals, board: Board) -> list[Finding]:
    """Late-arriving DP ranks (the arbitration leaves named workers to their findings,
    `EXCLUDES`)."""
    cfg, run, steps = s.config, s.run, s.steps
    launch = s.evidence.launch_by_dp_rank
    w = cfg.min_steps
    if launch is None or launch.shape[0] < 2 or launch.shape[1] < w:
        return []
    held = held_over(over_other_ranks(launch), w)
    by_stage = s.evidence.launch_by_stage
    out = []
    for d in np.flatnonzero(held.max(axis=1) >= cfg.late_arrival_ratio):
        where = np.flatnonzero(held[d] >= cfg.late_arrival_ratio)
        first, last = int(where[0]), int(where[-1] + w - 1)
        stage = 0
        if by_stage is not None and by_stage.shape[0] >= 2:
            stage = int(np.argmax(over_other_ranks(by_stage)[:, first:last + 1].mean(axis=1)))
        peak = float(held[d].max())
        out.append(Finding(
            [run.worker(int(d), stage)], int(steps[first]), int(steps[last]),
            RootCause.NET_DELAY,
            confidence=float(min(1.0, 0.5 + (peak - cfg.late_arrival_ratio) * 5)),
            estimated_slowdown=float(max(launch[d, first:last + 1].mean(), 1.0)),
            detail={"test": "late-arrival", "late_arrival_ratio": peak}))
    return out
