"""Rule `job_wide`: a regime change every rank shares, named by what changed over time.

When no rule across ranks named anything (the arbitration's `UNLESS_ANY`) and the job's
step time over a sustained window of steps (`analysis.over_time.change_point`: every
step inside beyond every step outside) changes, the change is reported when it is
`job_wide_ratio` times its time outside and a communication kind carries it
(`job-wide-comm`: the kind adding the most time of those that moved by
`over_time.KIND_RATIO`), or `job_wide_compute_ratio` times when compute does (or no one
kind moved: `job-wide-compute`). Two thresholds, two noise floors: a busier host slows a
clean job's compute (a shared 2-core host moved a clean run's step 1.7x), while clean
runs' communication-carried changes stay far smaller. Reported: the window, the kind,
whether every rank's own time of the kind moved,
and the link where send/recv pairs or the ring's order place it (then its ranks are
named; else none: the whole job). For example: "from step 6, grads-reduce-scatter takes
13.9x longer on every rank: a shared link or switch, not a straggler". A slow link every
member of a ring waits on, or the only link of a pipeline, leaves no faster peer for any
comparison across ranks; only the same ops' own earlier steps show it (design.md, "Over
time as well as across ranks"). Like a straggler, a regime holds `min_steps` steps (online
the rules across ranks then see those steps first, and a slow worker's waiting peers are
not a regime), and the kind carrying it must have moved on every rank that runs it (a slow
worker's peers wait in the collective, it does not). A communication kind carries it as
communication only where its transfer moved with it by `job_wide_kind_share` of a step
(`over_time.KindChange.transfer_moved`: a collective's least time over its ranks, a P2P
pair's latency from the later of its two starts); a kind whose time moved while its
transfer did not spent the time waiting on compute that a drifting host slowed, and the
change is held to the compute ratio. A failed run is left to the failure findings.

Where compute dominates the step, a ring's slower transfer moves the step time little (a
DP 4 ring with one throttled link on a loaded host: 1.23-1.39x, under the step's own noise
over time). So a collective kind's own time is held against its own earlier steps as well
(`analysis.over_time.collective_changes`): its least time over ranks per step, the time
every member spent in it, adding `job_wide_kind_share` of a normal step or more over a
sustained window of `min_steps` steps is named `job-wide-comm` too, with the kind's own
window. The share is held to its clean noise over time like the step ratio (the floor's
`job_wide_kind_share`); a change of the step time already named takes precedence, and
its finding carries the share too (the noise floor reads it either way)."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.over_time import (
    KIND_RATIO,
    CollectiveChange,
    changed_links,
    collective_changes,
    link_times,
    over_time,
)
from stragglerlab.run.findings import Finding, RootCause


def rule(s: Signals, board: Board) -> list[Finding]:
    """The job-wide regime change, if any (board empty: the arbitration sees to it)."""
    if s.run.outcome != "ok":
        return []
    kind = next((c for c in collective_changes(s.run.trace)
                 if c.n_steps >= s.config.min_steps and c.added_s > 0), None)
    return _step_change(s, kind) or _kind_change(s, kind)


def _step_change(s: Signals, kind: CollectiveChange | None) -> list[Finding]:
    """The job's step time changed beyond `job_wide_ratio` (or the compute ratio)."""
    cfg, run = s.config, s.run
    steps, cp = s.step_change
    least = min(cfg.job_wide_ratio, cfg.job_wide_compute_ratio)
    if cp is None or cp.factor < least:
        return []
    part = cp.slow_part(steps)
    if part is None:  # faster over a window with steps on both sides: no slow regime
        return []
    if int(np.searchsorted(steps, part[1], side="right")
           - np.searchsorted(steps, part[0])) < cfg.min_steps:
        return []  # a regime holds `min_steps`, as a straggler does (the rules across
        #            ranks then see the same steps first: online it pre-empts none of them)
    meta = run.meta
    ot = over_time(run.trace, meta.dp_size, meta.pp_size, ring_step_share=cfg.ring_step_share,
                   transfer_share=cfg.job_wide_kind_share)
    if ot.kinds and not ot.kinds[0].every_rank:
        return []  # the kind carrying it moved on some ranks only: not shared by every rank
    cause, field = ((RootCause.JOB_WIDE_COMM, "job_wide_ratio") if ot.comm else
                    (RootCause.JOB_WIDE_COMPUTE, "job_wide_compute_ratio"))
    threshold = getattr(cfg, field)
    if cp.factor < threshold:
        return []
    ranks = sorted({r for link in ot.links for r in link.ranks})
    return [Finding([run.rank_ref(r) for r in ranks], part[0], part[1], cause,
                    confidence=float(min(1.0, 0.5 + (cp.factor - threshold))),
                    estimated_slowdown=float(cp.factor),
                    # the statistic under its threshold's name (the noise floor reads it),
                    # and the threshold in force: configured, or raised just over the
                    # family's noise over time
                    detail={"test": "over-time", field: float(cp.factor),
                            "job_wide_threshold": float(threshold),
                            **({} if kind is None else
                               {"job_wide_kind_share": float(kind.share)}),
                            "note": ot.note(), "over_time": ot.to_dict()})]


def _kind_change(s: Signals, kind: CollectiveChange | None) -> list[Finding]:
    """A collective kind adds `job_wide_kind_share` of a step or more on every rank."""
    cfg, run = s.config, s.run
    if kind is None or kind.share < cfg.job_wide_kind_share:
        return []
    meta = run.meta
    steps = np.unique(run.trace["step"])
    links = changed_links(link_times(run.trace, meta.dp_size, meta.pp_size, steps),
                          kind.change, steps, KIND_RATIO, cfg.ring_step_share, kind.step_s)
    ranks = sorted({r for link in links for r in link.ranks})
    where = f" ({'; '.join(c.link for c in links)})" if links else ""
    note = f"{kind.note()}{where}: a shared link or switch, not a straggler"
    return [Finding([run.rank_ref(r) for r in ranks], kind.first_step, kind.last_step,
                    RootCause.JOB_WIDE_COMM,
                    confidence=float(min(1.0, 0.5 + (kind.share - cfg.job_wide_kind_share))),
                    estimated_slowdown=float(1 + kind.share),
                    detail={"test": "over-time, collective kind",
                            "job_wide_kind_share": float(kind.share),
                            "job_wide_threshold": float(cfg.job_wide_kind_share),
                            "note": note, "collective_change": kind.to_dict(),
                            "links": [c.to_dict() for c in links]})]

