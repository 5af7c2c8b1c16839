"""The `whatif` detector's sequence-imbalance checks (analysis/detectors/whatif_sequence.py)
on synthetic jobs whose microbatch lengths vary, analysed as the workflow does."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, get_detector
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace
from tests.unit.whatif_runs import cells as _cells


def test_long_sequences_slow_every_stage_alike_is_sequence_imbalance(whatif_run):
    # Microbatch cost follows sum(seq_len^2) on every stage: variation per microbatch, not a
    # per-stage offset and not one worker, so the whole job is named.
    run = whatif_run(dp_size=2, pp_size=2, n_steps=12, seq_imbalance_sigma=0.6)
    (finding,) = get_detector("whatif").detect(run)
    assert finding.root_cause is RootCause.SEQ_IMBALANCE
    assert finding.ranks == []
    assert finding.detail["seq_len_correlation"] > 0.9


def test_seq_len_correlation_ignores_stage_offsets_and_busy_steps():
    from stragglerlab.analysis.detectors.signatures import seq_len_correlation
    df, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=3, n_steps=8,
                                             seq_imbalance_sigma=0.5, last_stage_factor=3.0))
    with_offsets = df.copy()
    busy = with_offsets["step"] % 2 == 1  # every other step slower on every worker
    with_offsets.loc[busy, "duration"] *= 2.0
    assert seq_len_correlation(df) > 0.9
    assert seq_len_correlation(with_offsets) > 0.9
    fixed, _ = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=3, n_steps=8))
    assert "seq_len_sq_sum" not in fixed.columns and seq_len_correlation(fixed) is None
    shuffled = df.copy()
    fwd = shuffled["optype"] == "forward-compute"
    shuffled.loc[fwd, "seq_len_sq_sum"] = np.random.default_rng(0).permutation(
        shuffled.loc[fwd, "seq_len_sq_sum"].to_numpy())
    assert abs(seq_len_correlation(shuffled)) < 0.3


def test_mild_sequence_imbalance_in_pure_pp_is_named(whatif_run):
    # One DP rank: the top worker is a whole stage, so M_W cannot say "one worker"; and a
    # mild job slowdown, between the attribution threshold (1.03) and straggling (1.1),
    # is enough when compute time follows sum(seq_len^2).
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector, WhatIfDetectorConfig

    run = whatif_run(dp_size=1, pp_size=2, n_steps=12, seq_imbalance_sigma=0.25)
    (finding,) = WhatIfDetector().detect(run)
    assert finding.root_cause is RootCause.SEQ_IMBALANCE and finding.ranks == []
    s = finding.estimated_slowdown
    assert 1.03 <= s < 1.1, s  # the case the straggling threshold alone would miss
    strict = WhatIfDetector(WhatIfDetectorConfig(seq_min_slowdown=1.1))
    assert strict.detect(run) == []


def test_sequence_imbalance_beside_a_slow_device_names_both(whatif_run):
    # The slow device is the top worker (M_W >= 0.5), which alone used to rule out
    # sequences; explained and removed, the lengths still cost the job at least 1.03, and
    # the device is named from its own compute against its DP peer's.
    run = whatif_run(dp_size=2, pp_size=2, n_steps=12, seq_imbalance_sigma=0.6,
               slow_workers=(SlowWorker(dp_rank=0, stage=1, factor=2.5, first_step=4),))
    found = {f.root_cause: f for f in get_detector("whatif").detect(run)}
    assert set(found) == {RootCause.SEQ_IMBALANCE, RootCause.SLOW_WORKER}
    assert _cells(found[RootCause.SLOW_WORKER]) == [(0, 1)]
    assert found[RootCause.SLOW_WORKER].first_step == 4
    assert found[RootCause.SEQ_IMBALANCE].detail["m_w"] >= 0.5
    seq = found[RootCause.SEQ_IMBALANCE].detail
    assert seq["slowdown_left"] == pytest.approx(1 + (seq["slowdown"] - 1) * (1 - seq["m_w"]))
    assert seq["slowdown_left"] >= 1.03
    # Left under the floor (a stricter one here), the top worker explains the job alone.
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector, WhatIfDetectorConfig
    strict = WhatIfDetector(WhatIfDetectorConfig(seq_min_slowdown=seq["slowdown_left"] + 0.01))
    assert {f.root_cause for f in strict.detect(run)} == {RootCause.SLOW_WORKER}


def test_a_trace_whose_lengths_are_alike_is_never_sequence_imbalance(whatif_run):
    """The forward/backward signature with a straggling job names sequences only where the
    trace does not show every microbatch's length alike: an online window whose steps
    straddle a throttle's first step moved forward and backward alike (S 1.9, correlation
    0.97) in a fixed-length job."""
    from stragglerlab.analysis.detectors.signatures import lengths_uniform
    from stragglerlab.analysis.detectors.whatif import WhatIfDetector

    run = whatif_run(dp_size=2, pp_size=2, n_steps=12, seq_imbalance_sigma=0.6)
    assert not lengths_uniform(run.trace)
    (found,) = WhatIfDetector().detect(run)
    assert found.root_cause is RootCause.SEQ_IMBALANCE
    fixed = run.trace.copy()
    fwd = fixed["optype"] == "forward-compute"
    fixed.loc[fwd, "seq_len_sq_sum"] = 1024.0 ** 2        # every microbatch 1,024 tokens
    assert lengths_uniform(fixed)
    run.trace = fixed
    # (the compute still varies, so other rules may name what it does; never sequences)
    assert RootCause.SEQ_IMBALANCE not in [f.root_cause for f in WhatIfDetector().detect(run)]
    # No lengths in the trace (the artifact's traces): the signature still decides.
    assert not lengths_uniform(fixed.drop(columns="seq_len_sq_sum"))
