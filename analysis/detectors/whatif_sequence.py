"""Sequence-length imbalance for the `whatif` detector (the `sequence` rule).

Sequence imbalance is per-microbatch variation in compute that follows each
microbatch's sum(seq_len^2) (attention cost), not one slow worker and not a
constant offset per stage. Two pure functions of the what-if evidence and the trace:

    sequence_imbalance(evidence, steps, seq_corr, dp_size, cfg)   # Finding | None
    sequences_or_stage(run, stage_finding, seq_corr, cfg)        # the stage, or sequences

The first names it for the whole job when either signal holds (forward/backward
correlation with a straggling job, or compute following sum(s^2) with S >= 1.03),
never where the trace shows every microbatch's lengths alike,
unless one worker explains the slowdown: with one DP rank M_W is not read, and
when the top worker explains most (M_W >= 0.5) it is explained and removed first
and the slowdown left must still reach the floor. The second tells a stage
finding whose per-microbatch variation follows sum(s^2) for sequences.
"""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.detectors.base import Finding, RootCause, Run
from stragglerlab.analysis.detectors.signatures import microbatch_variation_share
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_evidence import Evidence


def sequence_imbalance(evidence: Evidence, steps: np.ndarray, seq_corr: float | None,
                       dp_size: int, cfg: WhatIfDetectorConfig,
                       uniform_lengths: bool = False) -> Finding | None:
    """The job straggles, not because of one worker, and long microbatches are slow.
    uniform_lengths: the trace records the microbatches' lengths and they hardly vary
    (`signatures.lengths_uniform`): the forward/backward signature then has some other
    cause (a window whose steps straddle a slowdown moves both alike), and nothing is
    named."""
    if uniform_lengths:
        return None
    result = evidence.view
    signals = {"fwd_bwd_correlation": evidence.fwd_bwd_correlation,
               "seq_len_correlation": seq_corr}
    thresholds = {"fwd_bwd_correlation": cfg.seq_correlation,
                  "seq_len_correlation": cfg.seq_len_correlation}
    # Each signal against its own threshold; the margin of the clearer one.
    margins = {k: v - thresholds[k] for k, v in signals.items() if v is not None}
    margin = max(margins.values(), default=None)
    if margin is None or margin < 0:
        return None
    # Σs² following compute time is the mechanism itself: the method's attribution
    # threshold suffices; the fwd-bwd signature alone needs a straggling job.
    by_lengths = margins.get("seq_len_correlation", -1.0) >= 0
    floor = cfg.seq_min_slowdown if by_lengths else cfg.straggling_slowdown
    # With one DP rank M_W's top worker is a whole stage: it cannot tell one worker from
    # lengths that slow every stage, so there the Σs² signal decides alone.
    one_worker = result.m_w.rem >= cfg.mw_worker and (dp_size > 1 or not by_lengths)
    left = None
    if one_worker and by_lengths:
        # The top worker explains most (a slow device beside the lengths, or in a small
        # job the rank that drew the long sequences): explained and removed, the
        # slowdown left, 1 + (S - 1)(1 - M_W), must still reach the floor.
        left = 1.0 + (result.slowdown - 1.0) * (1.0 - min(result.m_w.rem, 1.0))
        one_worker = left < floor
    if result.slowdown < floor or one_worker:
        return None
    return Finding(
        [], int(steps[0]), int(steps[-1]), RootCause.SEQ_IMBALANCE,
        confidence=float(min(1.0, 0.5 + margin * 2)),
        estimated_slowdown=result.slowdown,
        detail={**signals, "slowdown": result.slowdown, "m_w": result.m_w.rem,
                **({"slowdown_left": left} if left is not None else {})})


def sequences_or_stage(run: Run, stage: Finding, corr: float | None,
                       cfg: WhatIfDetectorConfig) -> Finding:
    """Per-microbatch variation that follows sum(s^2) is sequences, not the stage."""
    share = microbatch_variation_share(run.trace)
    if share is None or corr is None or share < cfg.mb_variation_share \
            or corr < cfg.seq_len_correlation:
        return stage
    return Finding([], stage.first_step, stage.last_step, RootCause.SEQ_IMBALANCE,
                   confidence=stage.confidence, estimated_slowdown=stage.estimated_slowdown,
                   detail={"microbatch_variation_share": share,
                           "seq_len_correlation": corr})
