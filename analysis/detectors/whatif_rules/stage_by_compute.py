"""Rule `stage_by_compute`: a stage whose forward and backward ops take
`stage_compute_ratio` over the other stages' on every DP rank in nearly every step ->
`stage-imbalance` on it. A link, a slow worker or GC can carry the job's S, but none
lengthens the partition's compute ops (`whatif_stage.stage_by_compute`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.detectors.whatif_stage import stage_by_compute
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """The stage heavy by its own compute, if any."""
    stage = stage_by_compute(s.run, s.steps, s.config)
    return [] if stage is None else [stage]
