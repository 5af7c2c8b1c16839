"""The `whatif` detector's slowed stages: compute that rose mid-run with no unslowed DP
peer (analysis/detectors/whatif_shift.py)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.analysis.detectors import RootCause, Run
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_shift import (
    level_shift,
    shift_at,
    slowed_stages,
    stage_rises,
)
from stragglerlab.run.findings import Finding, RankRef
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def _named(dp: int, pp: int, *slow: SlowWorker, found=(), **kw) -> list[tuple]:
    df, meta = synthesize_trace(SyntheticConfig(dp_size=dp, pp_size=pp, n_steps=12,
                                                slow_workers=slow, **kw))
    run, steps = Run(df, meta, "synthetic"), np.sort(df["step"].unique())
    scores = np.ones((pp, dp, len(steps)))
    return [((r.dp_rank, r.stage), f.first_step, f.last_step, f.root_cause)
            for f in slowed_stages(run, steps, WhatIfDetectorConfig(), list(found), scores)
            for r in f.ranks]


def test_level_shift_finds_the_window_and_reads_every_step_outside_it():
    ratio, a, b = level_shift(np.array([1, 1, 1, 1, 2, 2, 2, 2, 1, 1.0]), window=3)
    assert (ratio, a, b) == (pytest.approx(2.0), 4, 7)
    # The first step is a reference like any other (settling steps are dropped before).
    assert level_shift(np.array([1, 2, 2, 2.0]), window=3) == (pytest.approx(2.0), 1, 3)
    # A long step outside the window holds the rise down: every step must stand over it.
    assert level_shift(np.array([3, 1, 1, 2, 2, 2.0]), window=3)[0] == pytest.approx(2 / 3)
    assert level_shift(np.ones(3), window=3) == (0.0, -1, -1)  # no step before a window


def test_level_shift_is_the_brute_force_maximum():
    rng = np.random.default_rng(7)
    for _ in range(30):
        s = rng.lognormal(0, 0.3, size=int(rng.integers(6, 25)))
        best = max((shift_at(s, a, b), a, b) for a in range(1, len(s))
                   for b in range(a + 2, len(s)))
        ratio, a, b = level_shift(s, window=3)
        assert ratio == pytest.approx(best[0])
        assert shift_at(s, a, b) == pytest.approx(ratio)


def test_each_stage_is_read_against_its_own_steps_then_against_the_others_rise():
    # Two stages slowed at different steps (a 2-stage pure-PP job with two slow devices):
    # each rises over its own earlier steps, and the other's rise on that window is ~1.
    own = np.array([[1, 1.24, 1.24, 1.24, 1.24, 1.24, 1.24, 1.24],
                    [1, 1, 1, 1.31, 1.31, 1.31, 1.31, 1.31]])
    (r0, rel0, a0, _), (r1, rel1, a1, _) = stage_rises(own, window=3)
    assert (a0, a1) == (1, 3)
    assert r0 == pytest.approx(1.24) and rel0 == pytest.approx(1.24)
    assert r1 == pytest.approx(1.31) and rel1 == pytest.approx(1.31)
    # Every stage lifted at once (a busy host): each rises, none over the others.
    host = np.array([[1, 1, 1.5, 1.5, 1.5], [2, 2, 3, 3, 3.0]])
    assert [round(rel, 6) for _, rel, _, _ in stage_rises(host, window=3)] == [1.0, 1.0]


def test_a_pure_pp_device_slowed_mid_run_is_a_slow_worker_not_a_stage():
    (named,) = _named(1, 3, SlowWorker(dp_rank=0, stage=1, factor=1.8, first_step=5))
    assert named == ((0, 1), 5, 11, RootCause.SLOW_WORKER)


def test_a_whole_stage_slowed_names_each_unnamed_dp_rank_and_not_the_other_stage():
    slow = (SlowWorker(0, 1, 1.5, first_step=4), SlowWorker(1, 1, 2.0, first_step=4))
    assert sorted(_named(2, 2, *slow)) == [((0, 1), 4, 11, RootCause.SLOW_WORKER),
                                           ((1, 1), 4, 11, RootCause.SLOW_WORKER)]
    already = Finding([RankRef(3, 1, 1)], 4, 11, RootCause.SLOW_WORKER, 0.9)
    assert _named(2, 2, *slow, found=[already]) == [((0, 1), 4, 11, RootCause.SLOW_WORKER)]


def test_a_device_slowed_from_the_second_traced_step_is_found():
    # One step before it is reference enough: clean stages rise at most 1.06 (module doc).
    assert _named(1, 4, SlowWorker(0, 2, 1.6, first_step=1)) == [
        ((0, 2), 1, 11, RootCause.SLOW_WORKER)]


def test_two_pure_pp_stages_slowed_at_different_steps_are_both_named():
    slow = (SlowWorker(0, 0, 1.4, first_step=4), SlowWorker(0, 1, 1.5, first_step=6))
    assert sorted(_named(1, 2, *slow)) == [((0, 0), 4, 11, RootCause.SLOW_WORKER),
                                           ((0, 1), 6, 11, RootCause.SLOW_WORKER)]


def test_what_a_stage_shift_is_not():
    assert _named(2, 2) == []  # clean
    # One DP rank of a stage: its peer is the stage's fastest (whatif_device's case).
    assert _named(2, 2, SlowWorker(1, 1, 2.0, first_step=4)) == []
    # Slow from the first step: nothing to tell it from a heavy stage by.
    assert _named(1, 2, SlowWorker(0, 1, 2.0)) == []
    assert _named(2, 2, last_stage_factor=2.0) == []
    # Every worker slowed at once (a busy host): no stage rose over the others.
    host = [SlowWorker(d, s, 1.8, first_step=4) for d in range(2) for s in range(2)]
    assert _named(2, 2, *host) == []
    # Pure DP: no other stage to hold it against.
    assert _named(2, 1, SlowWorker(0, 0, 2.0, first_step=4), SlowWorker(1, 0, 2.0,
                                                                      first_step=4)) == []
