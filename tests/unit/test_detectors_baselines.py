"""The four baseline detectors: rank-score, op-minmax, last-arrival, step-changepoint.

Synthetic traces (workloads.synthetic) with a known slow worker, and tiny hand-built
frames for the parts a synthetic job does not exercise (GC pauses, a late rank at
collectives, a step-time jump at a known step, a failed run).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.detectors.base import Finding, RankRef, RootCause, Run
from stragglerlab.analysis.detectors.last_arrival import LastArrivalDetector, binomial_sf
from stragglerlab.analysis.detectors.op_minmax import OpMinMaxConfig, OpMinMaxDetector
from stragglerlab.analysis.detectors.rank_score import RankScoreDetector
from stragglerlab.analysis.detectors.registry import DETECTORS, detector_names, get_detector
from stragglerlab.analysis.detectors.step_changepoint import StepChangepointDetector
from stragglerlab.trace.meta import JobMeta
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace

BASELINES = ("rank-score", "op-minmax", "last-arrival", "step-changepoint")
VICTIM = RankRef(rank=2, dp_rank=2, stage=0)  # global rank = stage * dp + dp_rank, dp = 4


def _run(**kwargs) -> Run:
    df, meta = synthesize_trace(SyntheticConfig(dp_size=4, pp_size=2, n_microbatches=4,
                                                n_steps=16, **kwargs))
    return Run(df, meta, "synthetic")


@pytest.fixture(scope="module")
def clean_run() -> Run:
    return _run()


@pytest.fixture(scope="module")
def slow_run() -> Run:
    return _run(slow_workers=(SlowWorker(dp_rank=2, stage=0, factor=1.5),))


def _flagged(findings: list[Finding]) -> set[RankRef]:
    return {r for f in findings for r in f.ranks}


# -- every baseline --------------------------------------------------------------------------


def test_registry_lists_and_instantiates_the_baselines():
    names = detector_names()
    for name in BASELINES:
        assert name in DETECTORS.builtin and name in names
        det = get_detector(name)
        assert det.name == name and det.description
    assert isinstance(get_detector("rank-score"), RankScoreDetector)
    assert isinstance(get_detector("step-changepoint"), StepChangepointDetector)


@pytest.mark.parametrize("name", BASELINES)
def test_clean_synthetic_run_gives_no_findings(name, clean_run):
    assert get_detector(name).detect(clean_run) == []


@pytest.mark.parametrize("name", ["rank-score", "op-minmax", "last-arrival"])
def test_slow_worker_is_flagged_as_worker(name, slow_run):
    findings = get_detector(name).detect(slow_run)
    assert VICTIM in _flagged(findings)
    mine = [f for f in findings if VICTIM in f.ranks]
    assert all(f.root_cause is RootCause.SLOW_WORKER for f in mine)
    assert all(0.5 <= f.confidence <= 1.0 for f in mine)
    # JSON-serializable, as `stragglerlab detect` writes them.
    json.dumps([f.to_dict() for f in findings])


@pytest.mark.parametrize("name", ["rank-score", "op-minmax"])
def test_compute_baselines_blame_only_the_victim(name, slow_run):
    findings = get_detector(name).detect(slow_run)
    assert _flagged(findings) == {VICTIM}
    (f,) = findings
    assert (f.first_step, f.last_step) == (0, 15)
    assert 1.0 < f.estimated_slowdown < 2.0


@pytest.mark.parametrize("name", ["rank-score", "op-minmax", "step-changepoint"])
def test_failed_runs_give_no_findings(name, slow_run):
    failed = Run(slow_run.trace, slow_run.meta, outcome="failed")
    assert get_detector(name).detect(failed) == []


# -- rank-score ------------------------------------------------------------------------------


def test_rank_score_matches_the_injected_factor(slow_run):
    (f,) = RankScoreDetector().detect(slow_run)
    # Score = best rank's time / victim's time ~ 1 / 1.5.
    assert f.detail["score_median_flagged"] == pytest.approx(1 / 1.5, abs=0.05)
    assert f.estimated_slowdown == pytest.approx(1.5, abs=0.1)


def test_rank_score_ignores_ops_that_took_no_time(slow_run):
    """Instants (zero-length ops) over zero-length ops read a 1e9 slowdown (a fuzz)."""
    from stragglerlab.analysis.detectors.rank_score import RankScoreConfig

    df = slow_run.trace.copy()
    df.loc[df["optype"] == "forward-compute", "duration"] = 0.0
    df.loc[(df["optype"] == "forward-compute") & (df["rank"] == 0), "duration"] = 1e-6
    only = RankScoreDetector(RankScoreConfig(ops=("forward-compute",)))
    assert only.detect(Run(df, slow_run.meta)) == []
    both = RankScoreDetector().detect(Run(df, slow_run.meta))
    assert all(f.estimated_slowdown < 3 for f in both), both


def test_rank_score_reports_a_heavy_stage_as_stage_imbalance():
    run = _run(last_stage_factor=1.8)
    findings = RankScoreDetector().detect(run)
    assert [f.root_cause for f in findings] == [RootCause.STAGE_IMBALANCE]
    assert findings[0].ranks == [run.worker(d, 1) for d in range(4)]
    assert findings[0].detail["stage_score"] == pytest.approx(1 / 1.8, abs=0.05)


def test_rank_score_tolerates_the_natural_stage_difference():
    # Stages differing by 20% are normal (our clean runs: ~17%): no finding.
    assert RankScoreDetector().detect(_run(last_stage_factor=1.2)) == []


def test_rank_score_online_reports_once_the_interval_median_turns():
    df, meta = synthesize_trace(SyntheticConfig(
        dp_size=2, pp_size=2, n_steps=6, slow_workers=(SlowWorker(1, 0, 1.6, first_step=2),)))
    (f,) = RankScoreDetector().detect_online(Run(df, meta))
    # Interval 0 is steps 0-4: its medians turn slow once most of its steps are (step 4).
    assert f.ranks == [RankRef(1, 1, 0)] and f.detected_at_step == 4 and f.first_step == 2


# -- op-minmax -------------------------------------------------------------------------------


def test_op_minmax_needs_the_outlier_in_two_intervals(clean_run):
    trace = clean_run.trace.copy()
    slow = ((trace["rank"] == 5) & trace["optype"].isin(["forward-compute", "backward-compute"])
            & (trace["step"] < 5)).to_numpy()
    trace.loc[slow, "duration"] *= 2.0  # one 5-step interval only
    run = Run(trace, clean_run.meta)
    assert OpMinMaxDetector().detect(run) == []
    (f,) = OpMinMaxDetector(OpMinMaxConfig(min_intervals=1)).detect(run)
    assert f.ranks == [run.rank_ref(5)] and (f.first_step, f.last_step) == (0, 4)


def test_op_minmax_reports_gc_pauses_as_gc(clean_run):
    trace = clean_run.trace.copy()
    pause = np.zeros(len(trace))
    fwd = ((trace["rank"] == 5) & (trace["optype"] == "forward-compute")
           & (trace["mb_id"] == 0)).to_numpy()
    pause[fwd] = 0.03  # 30 ms inside one forward per step, ~10% of a step
    trace["gc_pause_s"] = pause
    trace.loc[fwd, "duration"] += 0.03
    findings = OpMinMaxDetector().detect(Run(trace, clean_run.meta))
    assert [(f.root_cause, f.ranks) for f in findings] == [
        (RootCause.GC_PAUSES, [clean_run.rank_ref(5)])]


def test_op_minmax_blames_a_slow_sender_on_the_network(clean_run):
    trace = clean_run.trace.copy()
    send = ((trace["rank"] == 1) & (trace["optype"] == "forward-send")).to_numpy()
    trace.loc[send, "duration"] += 0.05  # 4 sends a step: +0.2 s on ~0.04 s
    findings = OpMinMaxDetector().detect(Run(trace, clean_run.meta))
    assert [(f.root_cause, f.ranks) for f in findings] == [
        (RootCause.NET_THROTTLE, [clean_run.rank_ref(1)])]
    assert findings[0].detail["ops"] == ["forward-send"]


def test_op_minmax_blames_the_shortest_rank_of_a_collective(clean_run):
    # The late arrival at a collective has the shortest duration: the others waited.
    trace = clean_run.trace.copy()
    rs = (trace["optype"] == "grads-reduce-scatter") & (trace["stage"] == 1)
    trace.loc[rs & (trace["rank"] != 6), "duration"] += 0.05
    findings = OpMinMaxDetector().detect(Run(trace, clean_run.meta))
    assert _flagged(findings) == {clean_run.rank_ref(6)}
    assert findings[0].root_cause is RootCause.NET_THROTTLE


# -- last-arrival ----------------------------------------------------------------------------


def _collective_frame(late_rank: int, n_steps: int, late_s: float) -> pd.DataFrame:
    """A pure-DP job (dp 4): per step one grads-reduce-scatter and one optimizer per rank."""
    step = np.repeat(np.arange(n_steps), 4)
    rank = np.tile(np.arange(4), n_steps)
    rng = np.random.default_rng(0)
    start = step * 1.0 + 0.5 + rng.uniform(0, 0.01, len(step)) + np.where(
        rank == late_rank, late_s, 0.0)
    coll = pd.DataFrame({"rank": rank, "dp_rank": rank, "stage": 0, "step": step,
                         "optype": "grads-reduce-scatter", "start_ts": start,
                         "duration": (step * 1.0 + 0.5 + late_s + 0.02) - start,
                         "seq_id": 0})
    opt = coll.assign(optype="optimizer", start_ts=step * 1.0 + 0.9, duration=0.05)
    first = coll.assign(optype="forward-compute", start_ts=step * 1.0, duration=0.4)
    return pd.concat([first, coll, opt], ignore_index=True)


def test_last_arrival_flags_the_rank_the_others_wait_for():
    run = Run(_collective_frame(late_rank=3, n_steps=12, late_s=0.1), JobMeta(4, 1))
    (f,) = LastArrivalDetector().detect(run)
    assert f.ranks == [run.rank_ref(3)] and f.root_cause is RootCause.SLOW_WORKER
    assert f.detail["last_arrivals"] == 12 and f.detail["fair_share"] == pytest.approx(3.0)
    assert (f.first_step, f.last_step) == (0, 11)


def test_last_arrival_ignores_a_late_rank_that_costs_no_wait():
    # Always last, but by 1 ms of a 1 s step: not a straggler worth reporting.
    run = Run(_collective_frame(late_rank=3, n_steps=12, late_s=0.011), JobMeta(4, 1))
    assert LastArrivalDetector().detect(run) == []


def test_last_arrival_flags_the_rank_that_stopped_in_a_failed_run():
    run = Run(_collective_frame(late_rank=0, n_steps=4, late_s=0.0), JobMeta(4, 1),
              outcome="failed", last_step_by_rank={0: 3, 1: 3, 2: 2, 3: 3})
    (f,) = LastArrivalDetector().detect(run)
    assert f.ranks == [run.rank_ref(2)] and (f.first_step, f.last_step) == (4, 4)
    (online,) = LastArrivalDetector().detect_online(run)
    assert online.ranks == [run.rank_ref(2)] and online.detected_at_step == 3


def test_binomial_tail_matches_direct_sum():
    from math import comb
    for k, n, p in [(0, 5, 0.3), (3, 5, 0.3), (5, 5, 0.5), (7, 20, 0.25), (21, 20, 0.5)]:
        direct = sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
        assert binomial_sf(k, n, p) == pytest.approx(min(direct, 1.0), rel=1e-9, abs=1e-15)


# -- step-changepoint ------------------------------------------------------------------------


def _step_frame(step_times: list[float]) -> Run:
    """One rank: a compute op and an optimizer per step; step i lasts step_times[i] s."""
    n = len(step_times)
    t = np.asarray(step_times)
    begin = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    df = pd.DataFrame({
        "rank": 0, "dp_rank": 0, "stage": 0, "step": np.repeat(np.arange(n), 2),
        "optype": np.tile(["forward-compute", "optimizer"], n),
        "start_ts": np.stack([begin, begin + t - 0.01], axis=1).ravel(),
        "duration": np.stack([t - 0.01, np.full(n, 0.01)], axis=1).ravel(),
    })
    return Run(df, JobMeta(1, 1))


def test_step_changepoint_detects_a_jump_within_two_steps():
    rng = np.random.default_rng(1)
    times = list(1.0 + rng.normal(0, 0.03, 20))
    times[12:] = [1.5 * x for x in times[12:]]
    (f,) = StepChangepointDetector().detect_online(_step_frame(times))
    assert f.ranks == [] and f.root_cause is RootCause.SLOW_WORKER
    assert f.first_step == 12 and f.last_step == 19
    assert 12 <= f.detected_at_step <= 14
    assert f.estimated_slowdown == pytest.approx(1.5, abs=0.08)
    (offline,) = StepChangepointDetector().detect(_step_frame(times))
    assert offline.first_step == 12 and offline.detail["alarm_step"] == f.detected_at_step


def test_step_changepoint_ignores_one_spike_and_small_drift():
    times = [1.0] * 8 + [3.0] + [1.0] * 5 + [1.1] * 8  # one 3x step, then +10% for good
    assert StepChangepointDetector().detect(_step_frame(times)) == []


def test_step_changepoint_confidence_grows_with_the_evidence():
    short = [1.0] * 8 + [2.0] * 2
    long = [1.0] * 8 + [2.0] * 8
    (a,) = StepChangepointDetector().detect(_step_frame(short))
    (b,) = StepChangepointDetector().detect(_step_frame(long))
    assert 0.5 <= a.confidence < b.confidence <= 1.0


def test_step_changepoint_on_a_synthetic_slow_worker_from_step_8():
    run = _run(slow_workers=(SlowWorker(dp_rank=2, stage=0, factor=2.0, first_step=8),))
    (f,) = StepChangepointDetector().detect_online(run)
    assert f.first_step == 8 and f.detected_at_step - 8 <= 1
    assert f.estimated_slowdown > 1.3


def test_step_times_of_float32_rows_in_step_order_are_the_unsorted_paths_bit_for_bit():
    """The in-order shortcut takes the difference in float64, as the general path does."""
    from stragglerlab.analysis.steps import step_times

    rng = np.random.default_rng(7)
    n = 4_000
    trace = pd.DataFrame({
        "step": np.repeat(np.arange(40), n // 40),
        "start_ts": (1.7e4 + rng.random(n) * 50).astype(np.float32),
        "duration": (rng.random(n) * 3).astype(np.float32),
    })
    in_order = step_times(trace)
    shuffled = step_times(trace.sample(frac=1.0, random_state=3))
    assert in_order.dtype == np.float64
    np.testing.assert_array_equal(in_order.to_numpy(), shuffled.sort_index().to_numpy())
