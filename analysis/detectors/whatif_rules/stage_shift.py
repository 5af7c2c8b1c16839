"""Rule `stage_shift`: where a device has no unslowed DP peer (pure PP, or a whole stage
slowed), a stage whose own compute rose mid-run by `device_compute_ratio`, over its
earlier or later steps and over the other stages' -> `slow-worker` on its DP ranks
(`whatif_shift.slowed_stages`). Excluded (`EXCLUDES`): workers another finding on the
board names, except a stage- or sequence-imbalance one: a heavy partition is what this
rule tells apart from slow devices (the precedence table drops a heavy stage on a stage
that rose)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import (
    STAGE_LIKE,
    Board,
    Exclusion,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_shift import slowed_stages
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="shift_ratio", value=1.2, unit=Unit.RATIO,
        what=("a stage's own compute rise, over its other steps and the other stages', with no "
              "unslowed DP peer"),
        noise=(NoiseStatistic(1.0, ("shift_over_other_stages", "shift_own"), both=True),),
        provenance="""\
        A stage whose own compute rose mid-run with no unslowed DP peer (`whatif_shift.py`:
        pure PP, or every DP rank of a stage slowed) is named when it rose by this much, over
        its other steps and over the other stages'. A field of its own, at
        `device_compute_ratio`'s value. A stage's rise is read over its own steps, then over
        the other stages' rise on the same window (the first traced step kept unless settling,
        one reference step). `benchmarks/stage_shift_floor.py`: no stage without a slowed
        device reads over 1.057 (dev split 1.016; 24 fresh paced clean runs with stages
        1.013, but 1.057 for pure PP 2 at 256-token microbatches), the dev split's pure-PP
        slow devices 1.22-2.82."""),
)



EXCLUDES = Exclusion.any_cause_but(*STAGE_LIKE)


def rule(s: Signals, board: Board) -> list[Finding]:
    """Stages whose compute rose mid-run, on each of their DP ranks (the arbitration
    leaves named workers to their findings, `EXCLUDES`)."""
    return slowed_stages(s.run, s.steps, s.config, [], s.scores, s.grid)
