"""Rule `ring_link`: in every stage's DP group of 3 or more ranks, the rank whose ring
neighbours leave the reduce-scatter and the all-gather late and early in the pattern a
throttled ring link leaves, by `ring_step_share` of a step -> `net-throttle` on it; with
two DP ranks and no stages, the one link (`whatif_ring.ring_links`). The ring neighbours
of a worker the board names a slow device or GC victim are not named."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_links import slowed_workers
from stragglerlab.analysis.detectors.whatif_ring import ring_links
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow ring links beside the findings on the board."""
    return ring_links(s.run, s.steps, s.config, s.view.slowdown,
                      slowed_workers(board.findings))
