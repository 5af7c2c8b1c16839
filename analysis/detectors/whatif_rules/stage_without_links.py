"""Rule `stage_without_links`: a throttled link's transfers enter the ideal and can hide a
heavy stage, so the steps outside every slow link's window on the board are re-analysed
for one (`whatif_stage.stage_without_links`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import Board, Exclusion, Threshold
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.detectors.whatif_stage import stage_without_links
from stragglerlab.run.findings import Finding, RootCause

THRESHOLDS: tuple[Threshold, ...] = ()
"""None of its own: the `stage` rule's, on the steps outside the links' windows."""


EXCLUDES = Exclusion(board_has=frozenset({RootCause.STAGE_IMBALANCE}))
"""Not run once a heavy stage is named: the links hid none."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The heavy stage the links hid, if any (nothing without links)."""
    if not board.links:
        return []
    stage = stage_without_links(s.run, board.links, s.steps, s.config)
    return [] if stage is None else [stage]
