"""Rule `gc`: measured GC pauses outside the planned `gc` op take at least
`gc_min_share` of the job's time -> `gc-pauses` on the ranks that pause
(`whatif_failure.gc_pauses`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_failure import gc_pauses
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """The GC finding, if the pauses cost enough."""
    found = gc_pauses(s.run, s.view.slowdown, s.steps, s.config)
    return [] if found is None else [found]
