"""Rule `quiet_link`: no straggler stands out, but one rank's comm ops collect
`link_over_median` times the median worker's transfer excess and `link_share` of the
job's time, its own compute not slow -> `net-throttle` on that rank (a mild slow link
that slows every rank it talks to about equally). The statistic is the whole run's; the
finding's window is where the rank's communication time per step is at its slower level
(`over_time.slow_regime`: changed 1.5x or more over a sustained window), else the run."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.signatures import step_time_total
from stragglerlab.analysis.detectors.whatif_rules import (
    NO_EXCLUSION,
    Board,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.over_time import COMM_KINDS, kind_times, slow_regime
from stragglerlab.run.findings import Finding, RootCause

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="link_share", value=0.1, unit=Unit.JOB_SHARE,
        what=("a rank's comm excess, as a share of job time, for the mild-link rule"),
        noise=(NoiseStatistic(0.0, ("comm_excess_share",)),),
        per_step=True,
        provenance="""\
        A rank's comm excess over its op types' medians, as a share of job time, that..."""),
    Threshold(
        name="link_over_median", value=1.25, unit=Unit.RATIO,
        what=("... and over the median worker's excess"),
        provenance="""\
        ...and over the median worker's, names a slow link when no straggler stands out."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The rank whose comm ops collect clearly the most excess, if any."""
    cfg, run, steps = s.config, s.run, s.steps
    by_worker = s.evidence.comm_excess_by_worker
    stage, dp_rank = (int(i) for i in np.unravel_index(np.argmax(by_worker), by_worker.shape))
    top = float(by_worker[stage, dp_rank])
    share = top / max(step_time_total(run.trace), 1e-12)
    over_median = top / max(float(np.median(by_worker)), 1e-12)
    if share < cfg.link_share or over_median < cfg.link_over_median:
        return []
    compute = s.compute_over_peers
    if compute is not None and np.median(compute[stage, dp_rank]) >= cfg.compute_ratio:
        return []  # its own compute is slow: a slow device, too mild to flag
    worker = run.worker(dp_rank, stage)
    first, last = _window(run.trace, worker.rank, steps)
    return [Finding([worker], first, last, RootCause.NET_THROTTLE,
                    confidence=float(min(1.0, 0.5 + (over_median - cfg.link_over_median))),
                    # At least 1, as every rule's: a throttle over most of a pure-PP run
                    # is its own optype's median, so the ideal takes it in and S reads
                    # under 1 (0.91 where steps went 1.1 s -> 3.4 s).
                    estimated_slowdown=max(s.view.slowdown, 1.0),
                    detail={"comm_excess_share": share,
                            "comm_excess_over_median": over_median})]


def _window(trace, rank: int, steps: np.ndarray) -> tuple[int, int]:
    """First and last step of the rank's slower regime of communication time per step
    (`over_time.slow_regime`), else of the run."""
    ops = trace[(trace["rank"] == rank) & trace["optype"].astype(str).isin(COMM_KINDS)]
    if ops.empty:
        return int(steps[0]), int(steps[-1])
    per_step = kind_times(ops).groupby("step")["time_s"].sum().reindex(steps)
    slow = slow_regime(steps, per_step.to_numpy(float))
    if slow is None:
        return int(steps[0]), int(steps[-1])
    at = steps[slow]
    return int(at[0]), int(at[-1])
