"""Rule `job_wide`: a regime change every rank shares, named by what changed over time.

When no rule across ranks named anything (the arbitration's `UNLESS_ANY`) and the job's
step time over a sustained window of steps (`analysis.over_time.change_point`: every
step inside beyond every step outside) is `job_wide_ratio` times its time outside, the
change is reported: its window, the op kind carrying it (`job-wide-comm` when that is
communication, else `job-wide-compute`), whether every rank's own time of the kind moved,
and the link where send/recv pairs or the ring's order place it (then its ranks are
named; else none: the whole job). For example: "from step 6, grads-reduce-scatter takes
13.9x longer on every rank: a shared link or switch, not a straggler". A slow link every
member of a ring waits on, or the only link of a pipeline, leaves no faster peer for any
comparison across ranks; only the same ops' own earlier steps show it (design.md, "Over
time as well as across ranks"). A failed run is left to the failure findings."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.over_time import over_time
from stragglerlab.findings import Finding, RootCause


def rule(s: Signals, board: Board) -> list[Finding]:
    """The job-wide regime change, if any (board empty: the arbitration sees to it)."""
    cfg, run = s.config, s.run
    steps, cp = s.step_change
    if cp is None or run.outcome != "ok" or cp.factor < cfg.job_wide_ratio:
        return []
    part = cp.slow_part(steps)
    if part is None:  # faster over a window with steps on both sides: no slow regime
        return []
    meta = run.meta
    ot = over_time(run.trace, meta.dp_size, meta.pp_size, ratio=cfg.job_wide_ratio,
                   ring_step_share=cfg.ring_step_share)
    ranks = sorted({r for link in ot.links for r in link.ranks})
    cause = RootCause.JOB_WIDE_COMM if ot.comm else RootCause.JOB_WIDE_COMPUTE
    return [Finding([run.rank_ref(r) for r in ranks], part[0], part[1], cause,
                    confidence=float(min(1.0, 0.5 + (cp.factor - cfg.job_wide_ratio))),
                    estimated_slowdown=float(cp.factor),
                    detail={"test": "over-time", "job_wide_ratio": float(cp.factor),
                            # the threshold in force: the configured one, or raised just
                            # over the family's noise over time (the floor's job_wide_ratio)
                            "job_wide_threshold": float(cfg.job_wide_ratio),
                            "note": ot.note(), "over_time": ot.to_dict()})]
