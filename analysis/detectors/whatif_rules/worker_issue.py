"""Rule `worker_issue`: the paper's worker issue (§5.1). The job straggles and fixing its
top ⌈3%⌉ workers removes most of it (M_W >= `mw_worker`), though no step stood out
enough for the per-step scores (a mild device over a long 1F1B steady state) ->
`slow-worker` on the top workers whose own compute is `compute_ratio` over their
peers' (`Signals.compute_over_peers`). Needs DP peers: with one DP rank the top worker
is a whole stage."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.whatif_rules import NO_EXCLUSION, Board, Threshold, Unit
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding, RootCause

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="mw_worker", value=0.5, unit=Unit.SHARE,
        what=("M_W at or above which the slowdown is one worker's (paper §5.1)"),
        provenance="""\
        M_W at or above which the slowdown is one worker's (paper §5.1), not the sequences';
        in a straggling job (S >= `straggling_slowdown`) with DP peers it also names the top
        workers whose own compute is slow when no step stood out (`whatif_rules/worker_issue`;
        the §6 level-1 job of the default suite: S 1.153, M_W 0.86, victim 1.14x the best
        worker, under `step_threshold`).
        Not read against a sum(seq_len^2) signal when there is one DP rank: then the top
        ⌈3%⌉ workers are a whole stage, and M_W cannot tell one worker from lengths that slow
        every stage's microbatch alike (dev pure-PP sequence run: M_W 0.83)."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The top workers that are slow devices, if the worker issue holds."""
    cfg, run, steps, result = s.config, s.run, s.steps, s.view
    if run.meta.dp_size < 2 or result.slowdown < cfg.straggling_slowdown \
            or result.m_w.rem < cfg.mw_worker or not result.top_workers:
        return []
    compute = s.compute_over_peers  # [pp, dp, steps]
    if compute is None:
        return []
    own = {(d, p): float(np.median(compute[p, d])) for d, p in result.top_workers}
    slow = sorted(w for w, r in own.items() if r >= cfg.compute_ratio)
    if not slow:
        return []
    return [Finding(
        [run.worker(d, p) for d, p in slow], int(steps[0]), int(steps[-1]),
        RootCause.SLOW_WORKER,
        confidence=float(min(1.0, 0.5 + (result.m_w.rem - cfg.mw_worker))),
        estimated_slowdown=result.slowdown,
        detail={"m_w": result.m_w.rem,
                "compute_ratio": {f"dp{d}-pp{p}": own[d, p] for d, p in slow}})]
