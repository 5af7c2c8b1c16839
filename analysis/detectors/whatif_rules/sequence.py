"""Rule `sequence`: the job straggles, not because of one worker (M_W < 0.5), and long
microbatches are slow (fwd-bwd correlation, or compute following sum(seq_len^2)) ->
`seq-imbalance` for the whole job (`whatif_sequence.sequence_imbalance`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_sequence import sequence_imbalance
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding


def rule(s: Signals, board: Board) -> list[Finding]:
    """The sequence-imbalance finding, if its signatures hold."""
    found = sequence_imbalance(s.evidence, s.steps, s.seq_corr, s.run.meta.dp_size, s.config)
    return [] if found is None else [found]
