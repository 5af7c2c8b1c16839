"""Rule `stage`: the job straggles, one stage's S_stage stands `worker_threshold` over the
lightest's, its DP ranks alike, computation carrying it -> `stage-imbalance` on it; unless
its per-microbatch variation follows sum(seq_len^2), which is sequences
(`whatif_stage.stage_imbalance`, `whatif_sequence.sequences_or_stage`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import (
    NO_EXCLUSION,
    Board,
    NoiseStatistic,
    Threshold,
    Unit,
)
from stragglerlab.analysis.detectors.whatif_sequence import sequences_or_stage
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.detectors.whatif_stage import stage_imbalance
from stragglerlab.run.findings import Finding

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="stage_ratio", value=1.1, unit=Unit.RATIO,
        what=("the heaviest stage's S_stage over the lightest's that names a heavy stage"),
        noise=(NoiseStatistic(1.0, ("stage_ratio",)),),
        provenance="""\
        The heaviest stage's S_stage over the lightest's that names a heavy stage (the stage
        rule, `whatif_stage.stage_imbalance`). A field of its own, at `worker_threshold`'s
        value, so that each threshold means one thing."""),
    Threshold(
        name="stage_constancy", value=0.3, unit=Unit.SHARE,
        what=("a heavy stage's excess in the weaker half of the steps over the stronger half's"),
        provenance="""\
        A stage imbalance is an offset constant over the run (it comes from the partition):
        the heavy stage's excess over the lightest stage in the weaker half of the steps must be
        at least this share of the stronger half's, else a device slowed from some step on.
        Set on dev: stage-imbalance runs 0.55-0.87, slow workers with a step window 0.01-0.04."""),
    Threshold(
        name="peer_share", value=0.6, unit=Unit.SHARE,
        what=("stage peers are named too when their excess is at least this share of the "
              "worst's"),
        provenance="""\
        Stage peers are named too when their excess is at least this share of the worst's."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The heavy stage (or the sequences it turns out to be)."""
    stage = stage_imbalance(s.run, s.view, s.steps, s.config)
    return [] if stage is None else [sequences_or_stage(s.run, stage, s.seq_corr, s.config)]
