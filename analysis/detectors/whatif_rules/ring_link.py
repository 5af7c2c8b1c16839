"""Rule `ring_link`: in every stage's DP group of 3 or more ranks, the rank whose ring
neighbours leave the reduce-scatter and the all-gather late and early in the pattern a
throttled ring link leaves, by `ring_step_share` of a step -> `net-throttle` on it; with
two DP ranks and no stages, the one link (`whatif_ring.ring_links`). The ring neighbours
of a worker the board names a slow device or GC victim (`Board.slowed`, which the
arbitration sets) are not named: that worker's own slowness shows in its ring. Where the
ring's transfers changed regime, a rank is named only if its score keeps its sign over the
slower regime (`over_time.holds_sign`): a ring slowed alike leaves zero-mean noise there."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_ring import ring_links
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
        name="ring_step_share", value=0.05, unit=Unit.STEP_SHARE,
        what=("share of a step the ring neighbours' signed excess must hold"),
        noise=(NoiseStatistic(0.0, ("ring_step_share",)),),
        per_step=True,
        provenance="""\
        In a DP group of >= 3 ranks, a rank is a slow link when its ring neighbours' signed
        transfer excess (`whatif_ring.py`: reduce-scatter before it late and after it early,
        all-gather the other way) holds at least this share of a step over `min_steps`
        consecutive steps. Set on dev (the pure-DP runs with >= 3 ranks of dev,
        paced dev, the extra network cases, the other-layout cases and the default suite, 33
        runs): the five throttled runs (68-143 Mbit/s, DP 3 and 4) measure 0.096-0.150, each
        on its victim; every other run at most 0.023 (sequence imbalance), clean runs at most
        0.014, delays at most 0.010. 0.05 sits in the gap, about twice the highest other.
        Read in every stage's DP group too, at the same value: on the dev material with
        stages and >= 3 DP ranks (25 runs, 208 workers) the
        throttled ranks 0.077-0.170 (and 0.031 for one beside a heavy stage in DP 4 x PP 4,
        which the P2P worker test names), every other worker at most 0.026."""),
    Threshold(
        name="two_rank_step_share", value=0.05, unit=Unit.STEP_SHARE,
        what=("with two DP ranks and no stages, share of a step the one link's transfers must "
              "stay over the quietest window"),
        noise=(NoiseStatistic(0.0, ("two_rank_step_share",)),),
        per_step=True,
        provenance="""\
        With two DP ranks and no stages (one link, named with both ends), the least share of
        a step its transfers must stay over the run's quietest window (`whatif_ring.
        two_rank_link`). At `ring_step_share`'s value; on the dev material's 11 pure DP-2
        runs: the five throttles (23-131 Mbit/s) 0.51-1.23,
        three 8-14 ms delays 0.059-0.063 (named: a slow link), a 5 ms delay 0.024, the clean,
        GC and hang runs at most 0.012."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow ring links beside the findings on the board."""
    return ring_links(s.run, s.steps, s.config, s.view.slowdown, board.slowed)
