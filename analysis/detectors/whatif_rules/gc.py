"""Rule `gc`: measured GC pauses outside the planned `gc` op take at least
`gc_min_share` of the job's time -> `gc-pauses` on the ranks that pause
(`whatif_failure.gc_pauses`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_failure import gc_pauses
from stragglerlab.analysis.detectors.whatif_rules import (
    NO_EXCLUSION,
    Board,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="gc_min_share", value=0.01, unit=Unit.JOB_SHARE,
        what=("measured GC pause time over job time that makes GC a cause"),
        noise=(NoiseStatistic(0.0, ("gc_pause_share",)),),
        per_step=True,
        provenance="""\
        Measured GC pause time over job time that makes GC a cause."""),
    Threshold(
        name="gc_rank_share", value=0.1, unit=Unit.SHARE,
        what=("a rank is named for GC when its pauses reach this share of the worst rank's"),
        provenance="""\
        A rank is named for GC when its pauses are at least this share of the worst rank's."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The GC finding, if the pauses cost enough."""
    found = gc_pauses(s.run, s.view.slowdown, s.steps, s.config)
    return [] if found is None else [found]
