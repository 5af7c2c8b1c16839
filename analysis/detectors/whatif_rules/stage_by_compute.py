"""Rule `stage_by_compute`: a stage whose forward and backward ops take
`stage_compute_ratio` over the other stages' on every DP rank in nearly every step ->
`stage-imbalance` on it. A link, a slow worker or GC can carry the job's S, but none
lengthens the partition's compute ops (`whatif_stage.stage_by_compute`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import (
    STAGE_LIKE,
    Board,
    Exclusion,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.detectors.whatif_stage import stage_by_compute
from stragglerlab.run.findings import Finding

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="stage_compute_ratio", value=1.1, unit=Unit.RATIO,
        what=("a stage's forward and backward compute over the other stages' that names it "
              "heavy by compute"),
        noise=(NoiseStatistic(1.0, ("stage_compute_ratio",)),),
        provenance="""\
        A stage whose forward and backward ops, on every DP rank, take this much over the
        other stages' in at least 90 % of the steps is heavy by its own compute
        (`whatif_stage.stage_by_compute`), whatever else slows the job: a link or a slow worker
        can dominate S and hide it from the S-based check. Set on dev (102 runs
        with pp >= 2: dev, the extra dev cases, the other-layout dev cases, the default
        suite): the 11 stage-imbalance runs' heavy stage measures 1.20-3.21 (the lowest beside
        a 21 Mbit/s throttle), every other run's heaviest stage <= 1.03 (clean runs <= 1.01);
        1.1 is the detector's straggler ratio, in the gap."""),
)



EXCLUDES = Exclusion(board_has=frozenset(STAGE_LIKE))
"""Not run once a stage or sequence imbalance is named."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The stage heavy by its own compute, if any."""
    stage = stage_by_compute(s.run, s.steps, s.config)
    return [] if stage is None else [stage]
