"""Rule `slow_device`: a worker whose own compute, per unit of modelled work and without
its GC pauses, holds `device_compute_ratio` over the median of its stage's other DP ranks
-> `slow-worker` on it, whether or not it straggles: 1F1B's slack or another fault may
keep a slow device off the critical path (`whatif_device.slow_devices`). Excluded
(`EXCLUDES`): workers a finding on the board names are left to that finding, except a
`gc-pauses` one: this signal leaves GC pauses out, so GC cannot explain it, and a slow
device on a rank that also pauses (job-wide GC pauses every rank) is a fault of its own."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_device import slow_devices
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
        name="device_compute_ratio", value=1.1, unit=Unit.RATIO,
        what=("`compute_over_peers` held over `min_steps` consecutive steps that names a slow "
              "device, straggling or not (set on paced compute)"),
        noise=(NoiseStatistic(1.0, ("compute_over_peers",)),
               NoiseStatistic(1.0, ("shift_over_other_stages", "shift_own"), both=True),),
        provenance="""\
        A worker is a slow device when its work-normalized compute (GC pauses out) over the
        median of its stage's other DP ranks holds at least this over `min_steps`
        consecutive steps (`whatif_device.py`), whether or not it straggles. Set for compute
        paced to the warm-up rate (the default, and how the splits run): on the paced dev split
        (44 runs, 170 workers with DP peers) every worker that is not a slow device holds at
        most 1.081 (a GC victim, which the GC rule names; sequence imbalance, on the CPU rule,
        1.077; clean runs 1.022), the slow devices 1.105-2.83 (and 1.036 for one of 1.24x over
        a 4-step window); held out, the built-ins and clean runs (108 runs, 342 workers) hold
        at most 1.067 elsewhere and 1.398 on their slow devices. The `paced-rate` noise floor
        of clean runs is 1.004. Unpaced, CPU noise widens the spread (dev material, 74 runs
        with DP peers: workers that are not slow devices up to 1.163, most slow devices 1.247
        or more), where 1.2 would sit in the gap."""),
)



EXCLUDES = Exclusion.any_cause_but(RootCause.GC_PAUSES)


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow devices, wherever they are (the arbitration leaves named workers to their
    findings, `EXCLUDES`)."""
    return slow_devices(s.run, s.steps, s.config, [], s.scores, s.grid,
                        over=s.compute_over_peers)
