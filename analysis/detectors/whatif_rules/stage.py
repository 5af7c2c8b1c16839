"""Rule `stage`: the job straggles, one stage's S_stage stands `worker_threshold` over the
lightest's, its DP ranks alike, computation carrying it -> `stage-imbalance` on it; unless
its per-microbatch variation follows sum(seq_len^2), which is sequences
(`whatif_stage.stage_imbalance`, `whatif_sequence.sequences_or_stage`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_sequence import sequences_or_stage
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.analysis.detectors.whatif_stage import stage_imbalance
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """The heavy stage (or the sequences it turns out to be)."""
    stage = stage_imbalance(s.run, s.view, s.steps, s.config)
    return [] if stage is None else [sequences_or_stage(s.run, stage, s.seq_corr, s.config)]
