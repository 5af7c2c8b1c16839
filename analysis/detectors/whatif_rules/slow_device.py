"""Rule `slow_device`: a worker whose own compute, per unit of modelled work and without
its GC pauses, holds `device_compute_ratio` over the median of its stage's other DP ranks
-> `slow-worker` on it, whether or not it straggles: 1F1B's slack or another fault may
keep a slow device off the critical path (`whatif_device.slow_devices`). Workers a
finding on the board names are left to that finding, except a `gc-pauses` one: this
signal leaves GC pauses out, so GC cannot explain it, and a slow device on a rank that
also pauses (job-wide GC pauses every rank) is a fault of its own."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_device import slow_devices
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding, RootCause


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow devices on workers not yet named."""
    not_gc = [f for f in board.findings if f.root_cause is not RootCause.GC_PAUSES]
    return slow_devices(s.run, s.steps, s.config, not_gc, s.scores, s.grid)
