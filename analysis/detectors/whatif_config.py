"""Thresholds of the `whatif` detector (stragglerlab.analysis.detectors.whatif): the one
typed config that `detect --set`, the workflow's `detector_settings` and the noise floor
set. Each field is a threshold a rule declares (`whatif_rules/`: its value, unit, the
statistic the noise floor reads for it and where the value came from, the paper's or the
dev runs', never the test split's); `tests/unit/test_whatif_thresholds.py` checks every
field is declared once, with this default.

    WhatIfDetector(WhatIfDetectorConfig(seq_len_correlation=0.6))
"""

from __future__ import annotations

from dataclasses import dataclass

from stragglerlab.analysis.detectors.config_ranges import in_range

RATIOS = ("straggling_slowdown", "seq_min_slowdown", "step_threshold", "worker_threshold",
          "stage_ratio", "compute_ratio", "link_over_median", "device_compute_ratio",
          "shift_ratio", "late_arrival_ratio", "stage_compute_ratio", "job_wide_ratio",
          "job_wide_compute_ratio")
"""Fields that are a measure over its reference (a slowdown S, a score over the best's, a
compute over the peers'): 1 takes the threshold away (the noise floor's relaxed
config), under 1 names ranks faster than their reference. The fields whose declared unit
is `Unit.RATIO` (a test checks the two agree)."""


@dataclass(frozen=True, kw_only=True)
class WhatIfDetectorConfig:
    """Thresholds of the whatif detector (defaults from the paper where it has one)."""

    straggling_slowdown: float = 1.1
    """Job slowdown S at which a job straggles (paper). Declared, with where its value comes
    from, in `whatif_rules/__init__.py`."""
    seq_correlation: float = 0.7
    """Fwd–bwd correlation of the sequence-imbalance signature (paper: 0.9 on GPU traces).
    Declared, with where its value comes from, in `whatif_rules/sequence.py`."""
    seq_len_correlation: float = 0.5
    """Correlation of a microbatch's compute time with its Σ seq_len² within (stage, step).
    Declared, with where its value comes from, in `whatif_rules/sequence.py`."""
    seq_min_slowdown: float = 1.03
    """Job slowdown from which the Σs² signal names sequence imbalance (the method's
    attribution threshold). Declared, with where its value comes from, in
    `whatif_rules/sequence.py`."""
    step_threshold: float = 1.15
    """A step counts toward a straggler when the worker's score is this much over the best's.
    Declared, with where its value comes from, in `whatif_rules/stragglers.py`."""
    worker_threshold: float = 1.1
    """Mean score over the best worker's, across the window, that names a straggler. Declared,
    with where its value comes from, in `whatif_rules/stragglers.py`."""
    stage_ratio: float = 1.1
    """The heaviest stage's S_stage over the lightest's that names a heavy stage. Declared,
    with where its value comes from, in `whatif_rules/stage.py`."""
    min_steps: int = 3
    """Counted steps a straggler (and a link or device window) needs. Declared, with where its
    value comes from, in `whatif_rules/__init__.py`."""
    compute_ratio: float = 1.1
    """`Signals.compute_over_peers`, median over a straggler's window, that names it a slow
    worker. Declared, with where its value comes from, in `whatif_rules/stragglers.py`."""
    peer_share: float = 0.6
    """Stage peers are named too when their excess is at least this share of the worst's.
    Declared, with where its value comes from, in `whatif_rules/stage.py`."""
    link_share: float = 0.1
    """A rank's comm excess, as a share of job time, for the mild-link rule. Declared, with
    where its value comes from, in `whatif_rules/quiet_link.py`."""
    link_over_median: float = 1.25
    """... and over the median worker's excess. Declared, with where its value comes from, in
    `whatif_rules/quiet_link.py`."""
    link_pair_share: float = 0.85
    """Share of a sender's (or worker's) P2P pairs over the reference upper quartile. Declared,
    with where its value comes from, in `whatif_rules/pipeline_link.py`."""
    link_excess_iqr: float = 1.0
    """Their median's distance over the reference median, in IQRs. Declared, with where its
    value comes from, in `whatif_rules/pipeline_link.py`."""
    link_min_pairs: int = 8
    """Pairs a link window needs. Declared, with where its value comes from, in
    `whatif_rules/pipeline_link.py`."""
    link_step_share: float = 0.03
    """The least share of a step a P2P link must cost. Declared, with where its value comes
    from, in `whatif_rules/pipeline_link.py`."""
    device_compute_ratio: float = 1.1
    """`Signals.compute_over_peers` held over `min_steps` consecutive steps that names a slow
    device, straggling or not: the same measure as `compute_ratio`, a different statistic
    of it (a held minimum, not a straggler's median), each with its own noise floor.
    Declared, with where its value comes from, in `whatif_rules/slow_device.py`."""
    shift_ratio: float = 1.2
    """A stage's own compute rise, over its other steps and the other stages', with no unslowed
    DP peer. Declared, with where its value comes from, in `whatif_rules/stage_shift.py`."""
    ring_step_share: float = 0.05
    """Share of a step the ring neighbours' signed excess must hold. Declared, with where its
    value comes from, in `whatif_rules/ring_link.py`."""
    two_rank_step_share: float = 0.05
    """With two DP ranks and no stages, share of a step the one link's transfers must stay over
    the quietest window. Declared, with where its value comes from, in
    `whatif_rules/ring_link.py`."""
    late_arrival_ratio: float = 1.05
    """A DP rank's launch slowdown (its launch delays alone restored) over the other DP ranks'
    median, held over `min_steps`, that names a late arrival (`net-delay`). Declared, with
    where its value comes from, in `whatif_rules/late_arrival.py`."""
    mw_worker: float = 0.5
    """M_W at or above which the slowdown is one worker's (paper §5.1). Declared, with where
    its value comes from, in `whatif_rules/worker_issue.py`."""
    job_wide_ratio: float = 1.2
    """The job's step time over a sustained window over outside it that names a job-wide regime
    change, when nothing across ranks was named (held to the floor's noise over time).
    Declared, with where its value comes from, in `whatif_rules/job_wide.py`."""
    job_wide_compute_ratio: float = 1.5
    """The same step-time ratio for a change carried by compute, or by no one kind (every
    device slowed alike; held to the floor's noise over time). Declared, with where its
    value comes from, in `whatif_rules/job_wide.py`."""
    job_wide_kind_share: float = 0.05
    """A collective kind's added time on every rank (its least time over ranks) over a
    sustained window of its own steps, as a share of the normal step, that names
    `job-wide-comm` where the step ratio did not (held to the floor's noise over time).
    Declared, with where its value comes from, in `whatif_rules/job_wide.py`."""
    online_window_steps: int = 12
    """Steps analysed after each step online. Declared, with where its value comes from, in
    `whatif_rules/__init__.py`."""
    gc_min_share: float = 0.01
    """Measured GC pause time over job time that makes GC a cause. Declared, with where its
    value comes from, in `whatif_rules/gc.py`."""
    gc_rank_share: float = 0.1
    """A rank is named for GC when its pauses reach this share of the worst rank's. Declared,
    with where its value comes from, in `whatif_rules/gc.py`."""
    stage_constancy: float = 0.3
    """A heavy stage's excess in the weaker half of the steps over the stronger half's.
    Declared, with where its value comes from, in `whatif_rules/stage.py`."""
    stage_compute_ratio: float = 1.1
    """A stage's forward and backward compute over the other stages' that names it heavy by
    compute. Declared, with where its value comes from, in
    `whatif_rules/stage_by_compute.py`."""
    mb_variation_share: float = 0.5
    """Share of forward-time variance per microbatch that makes a stage candidate sequence
    imbalance (untuned). Declared, with where its value comes from, in
    `whatif_rules/sequence.py`."""

    def __post_init__(self) -> None:
        for name in RATIOS:
            in_range(self, name, 1, why="it is a ratio over a reference, which the reference "
                     "itself (1) meets: under 1 ranks faster than their reference are named")
