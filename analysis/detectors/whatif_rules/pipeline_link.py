"""Rule `pipeline_link`: a P2P sender nearly all of whose pairs are slower than the other
senders' in its place, or a worker nearly all of the pairs it sends or receives are (a
link throttled both ways), by `link_step_share` of a step -> `net-throttle` on it
(`whatif_links.slow_links`). Pairs to a worker the board names slow (`Board.slowed`,
which the arbitration sets) do not count."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_links import slow_links
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
        name="link_pair_share", value=0.85, unit=Unit.SHARE,
        what=("share of a sender's (or worker's) P2P pairs over the reference upper quartile"),
        provenance="""\
        A sender is a slow link (any layout with PP, beside other findings) over a window of
        `min_steps` steps where at least this share of its P2P pairs are slower than the upper
        quartile of the other senders' pairs in its place (same step, and with DP peers same
        stage and direction; receiver waiting; by chance about a quarter are); a worker is,
        where that share of the pairs it sends or receives are (`whatif_links.py`). Set on dev
        (windows of >= `link_min_pairs` pairs): the delayed or throttled senders
        measure 1.00 in 6 of 9, 0.92 in 2 (3 ms and 11 ms delays), 0.83 in one (a throttle
        named by another rule); every other sender at most 0.92 (a sequence-imbalanced run,
        costing 2.0 % of a step; the both-ways throttle's neighbour, 1.00, is resolved as
        one link), then 0.83. Worker test (dev, the extra dev cases, 17 more
        pure-layout network cases from other sampler seeds and the default suite): every
        throttled worker 1.00, every delayed one at most 0.83; other workers over 0.85 are a
        link's other end (resolved as one link) or touch a worker named slow."""),
    Threshold(
        name="link_excess_iqr", value=1.0, unit=Unit.IQRS,
        what=("their median's distance over the reference median, in IQRs"),
        provenance="""\
        ...and their median latency stands at least this many interquartile ranges of the
        reference pairs over the reference median (a delay out of the timing noise). Not
        tuned: one IQR; the flagged dev links measure 2.6-9.6."""),
    Threshold(
        name="link_min_pairs", value=8, unit=Unit.PAIRS,
        what=("pairs a link window needs"),
        provenance="""\
        ...over at least this many pairs in the window. Not tuned: with 8 pairs a share of
        0.85 (7 of 8) over the upper quartile happens by chance with probability 4e-4."""),
    Threshold(
        name="link_step_share", value=0.03, unit=Unit.STEP_SHARE,
        what=("the least share of a step a P2P link must cost"),
        noise=(NoiseStatistic(0.0, ("step_share",)),),
        per_step=True,
        provenance="""\
        ...and that excess, on every pair the sender posts in a step, is at least this share
        of the step time: the method's attribution threshold (S >= 1.03, design.md App. A) as
        the least a link must be able to cost. Dev: the flagged links 4.3-19 %; the other
        sender over `link_pair_share` 2.0 %; one throttle beside a stage imbalance 2.6 % (so
        missed). On the paper's trace-AR 63 sender windows pass the tests above (GPU P2P
        latency drifting between DP ranks); they cost at most 0.2 % of a step, and nothing
        is named."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """Slow P2P links beside the findings on the board."""
    return slow_links(s.run, s.steps, s.config, s.evidence.comm_excess_by_worker,
                      s.view.slowdown, board.slowed, s.p2p_pairs)
