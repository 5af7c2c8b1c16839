"""Rule `pipeline_link`: a P2P sender nearly all of whose pairs are slower than the other
senders' in its place, or a worker nearly all of the pairs it sends or receives are (a
link throttled both ways), by `link_step_share` of a step -> `net-throttle` on it
(`whatif_links.slow_links`). Pairs to a worker the board names slow do not count."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_links import slow_links
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow P2P links beside the findings on the board."""
    return slow_links(s.run, s.steps, s.config, s.evidence.comm_excess_by_worker,
                      s.view.slowdown, board.findings, s.p2p_pairs)
