"""Rule `stragglers`: stragglers by per-step worker score, then named by what slows them.

Per step, each worker's min(S_dp, S_stage) over the step's best worker's (a busy host
lifts every worker, a straggler lifts one). A worker is a straggler when, from its first
to its last step above `step_threshold` (at least `min_steps` of them), its mean ratio
is at least `worker_threshold`; that window is the finding's steps. Explain the worst,
remove it, re-score: several stragglers at once (`signatures.peel_stragglers`). A
straggler whose score over the best stands no further over its own other steps than the
run's noise over time is that noise (`analysis.over_time.over_own_noise`). Named:

* a straggler whose own compute (`Signals.compute_over_peers`: GC-free, per unit of
  modelled work, over its stage's other DP ranks' median) is `compute_ratio` or more,
  median over its window -> `slow-worker` (a slow device);
* every DP rank of a stage straggling, computation carrying the slowdown ->
  `stage-imbalance` on that stage (without DP peers: `slow-worker`, as no peer tells a
  straggler's own compute apart);
* any other straggler waits on communication -> `net-throttle`, on the rank whose comm
  ops collect the most transfer time over their op type's median (a slow link is in
  every slow group; a peer in only some).
"""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.signatures import (
    category_excess,
    peel_stragglers,
    relative_scores,
)
from stragglerlab.analysis.detectors.whatif_rules import (
    NO_EXCLUSION,
    Board,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.over_time import over_own_noise
from stragglerlab.run.findings import Finding, RootCause

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="step_threshold", value=1.15, unit=Unit.RATIO,
        what=("a step counts toward a straggler when the worker's score is this much over the "
              "best's"),
        provenance="""\
        A step counts toward a straggler when the worker's score is this much over the best's."""),
    Threshold(
        name="worker_threshold", value=1.1, unit=Unit.RATIO,
        what=("mean score over the best worker's, across the window, that names a straggler"),
        noise=(NoiseStatistic(1.0, ("relative_score",)),),
        provenance="""\
        Mean score over the best worker's, across the flagged window, that names a straggler."""),
    Threshold(
        name="compute_ratio", value=1.1, unit=Unit.RATIO,
        what=("`compute_over_peers`, median over a straggler's window, that names it a slow "
              "worker (`worker_issue`, `quiet_link` read it too)"),
        noise=(NoiseStatistic(1.0, ("compute_ratio",)),),
        provenance="""\
        A straggler whose own compute over its peers' (`Signals.compute_over_peers`: GC-free,
        work-normalized, over the median of its stage's other DP ranks), median over its
        straggling window, is at least this is a slow worker: the one compute measure every
        rule reads."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The stragglers, each named by its cause."""
    cfg, run, steps, result = s.config, s.run, s.steps, s.view
    scores = s.scores
    peeled = peel_stragglers(result.step_s_dp, result.step_s_stage,
                             step_threshold=cfg.step_threshold,
                             worker_threshold=cfg.worker_threshold, min_steps=cfg.min_steps)
    # A straggler's score over the step's best must stand over its own other steps by
    # more than the run's noise over time (`over_own_noise`), else it is that noise.
    relative = relative_scores(scores)
    peeled = [w for w in peeled if over_own_noise(relative[w[0], w[1]], w[2], w[3] + 1)]
    windows = {(p, d): (f, la) for p, d, f, la, _ in peeled}
    excess = {(p, d): r - 1.0 for p, d, _, _, r in peeled}
    if not windows:
        return []

    def finding(workers: list[tuple[int, int]], cause: RootCause, **evidence) -> Finding:
        first = min(windows[w][0] for w in workers)
        last = max(windows[w][1] for w in workers)
        rel = float(np.mean([1.0 + excess[w] for w in workers]))
        est = float(np.mean([scores[p, d, first:last + 1].mean() for p, d in workers]))
        return Finding(
            [run.worker(d, p) for p, d in sorted(workers)],
            int(steps[first]), int(steps[last]), cause,
            confidence=float(min(1.0, 0.5 + (rel - cfg.worker_threshold) * 2)),
            estimated_slowdown=max(est, 1.0),
            detail={"relative_score": rel, **evidence,
                    "worker_score": {f"dp{d}-pp{p}": float(scores[p, d].mean())
                                     for p, d in workers}})

    found = []
    compute = s.compute_over_peers  # [pp, dp, steps]
    if compute is not None:  # a worker whose own compute is slow is a slow device
        for w in sorted(windows):
            first, last = windows[w]
            own = float(np.median(compute[w[0], w[1], first:last + 1]))
            if own >= cfg.compute_ratio:
                found.append(finding([w], RootCause.SLOW_WORKER, compute_ratio=own))
        for f in found:
            w = (f.ranks[0].stage, f.ranks[0].dp_rank)
            del windows[w], excess[w]
    if not windows:
        return found
    compute_excess, comm_excess = category_excess(result)
    if compute_excess >= comm_excess:
        for stage in sorted({p for p, _ in windows}):
            members = [w for w in windows if w[0] == stage]
            if run.meta.dp_size > 1 and len(members) == run.meta.dp_size:
                found.append(finding(members, RootCause.STAGE_IMBALANCE))
                for w in members:
                    del windows[w], excess[w]
        if not windows or compute is None:
            # Without DP peers a straggler's own compute cannot be told apart.
            return found + [finding([w], RootCause.SLOW_WORKER) for w in sorted(windows)]
    # Stragglers whose own compute is not slow wait on communication: a slow link. Name
    # the rank whose comm ops collect the most excess over the run (a link slows both
    # ends of a P2P pair; its rank alone is in all the slow groups).
    first = min(w[0] for w in windows.values())
    last = max(w[1] for w in windows.values())
    by_worker = s.evidence.comm_excess_by_worker
    victim = tuple(int(i) for i in np.unravel_index(np.argmax(by_worker), by_worker.shape))
    excess[victim] = max(excess.values())  # the straggling it explains
    windows[victim] = (first, last)
    return found + [finding([victim], RootCause.NET_THROTTLE, compute_excess=compute_excess,
                            comm_excess=comm_excess, comm_excess_s=float(by_worker[victim]))]
