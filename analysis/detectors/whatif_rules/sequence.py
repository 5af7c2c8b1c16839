"""Rule `sequence`: the job straggles, not because of one worker (M_W < 0.5), and long
microbatches are slow (fwd-bwd correlation, or compute following sum(seq_len^2)) ->
`seq-imbalance` for the whole job (`whatif_sequence.sequence_imbalance`)."""

from __future__ import annotations

from stragglerlab.analysis.detectors.whatif_rules import NO_EXCLUSION, Board, Threshold, Unit
from stragglerlab.analysis.detectors.whatif_sequence import sequence_imbalance
from stragglerlab.analysis.detectors.whatif_signals import Signals
from stragglerlab.run.findings import Finding

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(
        name="seq_correlation", value=0.7, unit=Unit.CORRELATION,
        what=("fwd–bwd correlation of the sequence-imbalance signature (paper: 0.9 on GPU "
              "traces)"),
        provenance="""\
        fwd-bwd correlation (worker-step residuals) of the sequence-imbalance signature.

        The paper uses 0.9 on GPU traces; on this CPU testbed timing noise lowers it:
        sequence-imbalanced runs measure 0.80-0.91, every other fault kind <= 0.25."""),
    Threshold(
        name="seq_len_correlation", value=0.5, unit=Unit.CORRELATION,
        what=("correlation of a microbatch's compute time with its Σ seq_len² within (stage, "
              "step)"),
        provenance="""\
        Correlation, within (stage, step), of a microbatch's compute time with its
        sum(seq_len^2) (`signatures.seq_len_correlation`) that makes long sequences the cause.
        r = 0.5: sum(seq_len^2) explains a quarter of the per-microbatch variation. Set on dev:
        the three sequence-imbalanced runs measure 0.70, 0.79, 0.90 (a correlation pooled
        over the run, forward only, reads 0.37, 0.53, 0.75 on them); no other dev run varies its
        lengths (None)."""),
    Threshold(
        name="seq_min_slowdown", value=1.03, unit=Unit.RATIO,
        what=("job slowdown from which the Σs² signal names sequence imbalance (the method's "
              "attribution threshold)"),
        provenance="""\
        Job slowdown from which a clear sum(seq_len^2) signal (`seq_len_correlation`) names
        sequence imbalance: the method's own attribution threshold (design.md, App. A: the
        attributions are computed when S >= 1.03); the fwd-bwd signature alone keeps
        `straggling_slowdown`. The Σs² signal exists only where lengths vary, so it cannot fire
        on fixed-length jobs. Dev: the pure-PP sequence run measures S 1.042 at
        r = 0.90; the others 1.105 and 1.108."""),
    Threshold(
        name="mb_variation_share", value=0.5, unit=Unit.SHARE,
        what=("share of forward-time variance per microbatch that makes a stage candidate "
              "sequence imbalance (untuned)"),
        provenance="""\
        A stage-imbalance candidate is sequence imbalance instead when at least this share of
        forward-time variance is per microbatch within a worker-step (not a per-stage offset)
        and compute time follows sum(seq_len^2) at `seq_len_correlation`. Untuned: 0.5 is the
        midpoint of the two mechanisms' shares. Dev: stage-imbalance runs 0.03, 0.28,
        0.60 (with a throttle), seq-imbalance runs 0.79-1.0; their seq_len correlation (None
        for fixed lengths, 0.70-0.90 for seq runs) decided every case, so 0.5 was not moved."""),
)



EXCLUDES = NO_EXCLUSION
"""No finding on the board suppresses its candidates."""


def rule(s: Signals, board: Board) -> list[Finding]:
    """The sequence-imbalance finding, if its signatures hold."""
    found = sequence_imbalance(s.evidence, s.steps, s.seq_corr, s.run.meta.dp_size, s.config,
                               uniform_lengths=s.uniform_lengths)
    return [] if found is None else [found]
