"""The `whatif` detector's slow devices from own compute (analysis/detectors/whatif_device.py)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, Run
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_device import (
    normalized_compute,
    over_peers,
    slow_devices,
)
from stragglerlab.run.findings import Finding, RankRef
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def _run(**kw) -> tuple[Run, np.ndarray]:
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_steps=10, **kw))
    return Run(df, meta, "synthetic"), np.sort(df["step"].unique())


def _found(run: Run, steps: np.ndarray, found=()) -> list[Finding]:
    scores = np.ones((run.meta.pp_size, run.meta.dp_size, len(steps)))
    return slow_devices(run, steps, WhatIfDetectorConfig(), list(found), scores)


def test_a_slow_device_is_named_over_its_own_window():
    run, steps = _run(slow_workers=(SlowWorker(dp_rank=1, stage=0, factor=1.6,
                                               first_step=4, last_step=8),))
    (finding,) = _found(run, steps)
    assert finding.root_cause is RootCause.SLOW_WORKER
    assert [(r.dp_rank, r.stage) for r in finding.ranks] == [(1, 0)]
    assert (finding.first_step, finding.last_step) == (4, 8)
    assert finding.detail["compute_over_peers"] == pytest.approx(1.6, rel=0.1)


def test_clean_mild_and_already_named_workers_are_not_named():
    clean, steps = _run()
    assert _found(clean, steps) == []
    mild, steps = _run(slow_workers=(SlowWorker(dp_rank=0, stage=1, factor=1.05),))
    assert _found(mild, steps) == []
    slow, steps = _run(slow_workers=(SlowWorker(dp_rank=0, stage=1, factor=2.0),))
    named = Finding([RankRef(1, 0, 1)], 0, 9, RootCause.GC_PAUSES, 0.9)
    assert _found(slow, steps, [named]) == []


def test_long_sequences_are_work_not_a_slow_device():
    # Every microbatch's compute follows its sum(seq_len^2); whichever rank draws the long
    # ones is slower in time but not per unit of work.
    run, steps = _run(seq_imbalance_sigma=1.0, seed=3)
    raw = run.trace[run.trace["optype"].isin(["forward-compute", "backward-compute"])]
    per = raw.groupby(["stage", "dp_rank", "step"])["duration"].sum().unstack("dp_rank")
    assert (per.max(axis=1) / per.min(axis=1)).max() > 1.3  # the raw times differ a lot
    assert _found(run, steps) == []
    # ... while a slow device among them still is one.
    slow, steps = _run(seq_imbalance_sigma=1.0, seed=3,
                       slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=1.8),))
    assert [(r.dp_rank, r.stage) for f in _found(slow, steps) for r in f.ranks] == [(1, 1)]


def test_gc_pauses_inside_compute_are_not_device_time():
    run, steps = _run()
    trace = run.trace.copy()
    hit = trace["optype"].eq("forward-compute") & trace["dp_rank"].eq(0) & trace["stage"].eq(0)
    trace["gc_pause_s"] = np.where(hit, 0.04, 0.0)
    trace.loc[hit, "duration"] += 0.04
    assert _found(Run(trace, run.meta, "gc"), steps) == []
    ratio = over_peers(normalized_compute(trace.drop(columns="gc_pause_s"), 2, 2, steps))
    # Counted as compute, the pauses would look like a device.
    assert ratio[0, 0].min() > WhatIfDetectorConfig().device_compute_ratio


def test_one_dp_rank_has_no_peers():
    df, meta = synthesize_trace(SyntheticConfig(dp_size=1, pp_size=2, n_steps=8,
                                                slow_workers=(SlowWorker(0, 0, 2.0),)))
    run = Run(df, meta, "pure-pp")
    assert over_peers(normalized_compute(df, 2, 1, np.sort(df["step"].unique()))) is None
    assert _found(run, np.sort(df["step"].unique())) == []


def test_median_of_others_is_the_leave_one_out_median():
    from stragglerlab.analysis.detectors.whatif_device import median_of_others

    rng = np.random.default_rng(0)
    for n in (2, 3, 4, 5, 8, 9):
        grid = rng.normal(size=(3, n, 7))
        grid[0, 1, 2] = grid[0, 0, 2]  # a tie
        loo = np.stack([np.median(np.delete(grid, d, axis=1), axis=1) for d in range(n)],
                       axis=1)
        np.testing.assert_allclose(median_of_others(grid), loo)


def test_three_slow_steps_within_the_runs_own_swings_are_not_a_device():
    # On a shared host two DP ranks take turns being slow: rank 0 of stage 0 runs its
    # compute 0.77-1.31x its peer's, three steps in a row over 1.1 (steps 7-9), no
    # further over its other steps than it swings (`over_time.over_own_noise`).
    run, steps = _run()
    swings = [0.83, 0.97, 1.13, 1.27, 0.77, 0.98, 0.84, 1.31, 1.20, 1.15]
    df = run.trace
    cell = (df["dp_rank"] == 0) & (df["stage"] == 0) \
        & df["optype"].astype(str).isin(["forward-compute", "backward-compute"])
    for step, f in zip(steps, swings, strict=True):
        df.loc[cell & (df["step"] == step), "duration"] *= f
    assert _found(run, steps) == []
    # The same swings with the device 2x slower over steps 7-9: far over them, named.
    for step in steps[7:]:
        df.loc[cell & (df["step"] == step), "duration"] *= 2.0
    (finding,) = _found(run, steps)
    assert (finding.ranks[0].dp_rank, finding.ranks[0].stage) == (0, 0)
    assert (finding.first_step, finding.last_step) == (int(steps[7]), int(steps[9]))
