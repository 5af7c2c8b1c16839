"""Rule `stage_shift`: where a device has no unslowed DP peer (pure PP, or a whole stage
slowed), a stage whose own compute rose mid-run by `device_compute_ratio`, over its
earlier or later steps and over the other stages' -> `slow-worker` on its DP ranks
(`whatif_shift.slowed_stages`). Stage- and sequence-imbalance findings on the board are
not read: a heavy partition is what this rule tells apart from slow devices (the
precedence table drops a heavy stage on a stage that rose)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import STAGE_LIKE, Board
from stragglerlab.analysis.detectors.whatif_shift import slowed_stages
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """Stages whose compute rose mid-run, on workers no other finding names."""
    others = [f for f in board.findings if f.root_cause not in STAGE_LIKE]
    return slowed_stages(s.run, s.steps, s.config, others, s.scores, s.grid)
