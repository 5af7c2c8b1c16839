"""§6 against a control inside the run (figures/s6_control.py, table_s6's in-run rows): the
slow worker measured against the same run's clean steps, the what-if of its window, every
run's error and the host drift the control removes."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from stragglerlab.analysis.steps import step_times  # noqa: E402
from stragglerlab.figures.data import load_figure_data  # noqa: E402
from stragglerlab.figures.registry import build_figure  # noqa: E402
from stragglerlab.figures.s6_control import in_run  # noqa: E402
from stragglerlab.trace.trace_io import write_trace  # noqa: E402
from stragglerlab.workloads.synthetic import (  # noqa: E402
    SlowWorker,
    SyntheticConfig,
    ground_truth,
    synthesize_trace,
)


def _run(path, scenario: str, speed: float = 1.0, slower_from: int | None = None, **kwargs):
    cfg = SyntheticConfig(dp_size=4, pp_size=2, n_steps=12, seed=3, **kwargs)
    df, meta = synthesize_trace(cfg)
    df["start_ts"] *= speed
    df["duration"] *= speed  # a host that ran this process slower
    if slower_from is not None:  # ... and 20 % slower still from that step on
        late = df["step"] >= slower_from
        t0 = df.loc[late, "start_ts"].min()
        df.loc[late, "start_ts"] = t0 + (df.loc[late, "start_ts"] - t0) * 1.2
        df.loc[late, "duration"] *= 1.2
    path.mkdir(parents=True)
    write_trace(df, meta, path / "trace.parquet")
    meta.dump(path / "meta.yaml")
    (path / "faults.json").write_text(json.dumps(ground_truth(df, cfg)))
    times = step_times(df[["step", "start_ts", "duration"]])
    (path / "run.json").write_text(json.dumps({
        "name": scenario, "seed": 3, "outcome": "ok", "error": None,
        "scenario": {"name": scenario, "parallel": {"dp": 4, "pp": 2},
                     "run": {"steps": 12, "warmup_steps": 0, "seed": 3}},
        "step_time_s": {str(int(s)): float(t) for s, t in times.items()},
        "trace": {"complete_steps": [int(s) for s in times.index]}}))
    return path, times


def test_in_run_measures_the_window_against_its_own_clean_steps(tmp_path):
    slow, times = _run(tmp_path / "slow", "slow-worker-1", speed=0.9,
                       slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=2.0, first_step=5),))
    clean, _ = _run(tmp_path / "clean", "clean-dp4-pp2")
    data = load_figure_data([slow, clean])
    m = in_run(data.by_scenario("slow-worker-1")[0], data.by_scenario("clean-dp4-pp2"))
    assert m.window == (5, 11) and m.clean_steps == 5
    assert m.measured == pytest.approx(times[times.index >= 5].mean()
                                       / times[times.index < 5].mean())
    assert m.in_run_drift == pytest.approx(1.0, abs=0.02) and m.steady
    assert m.measured > 1.2 and set(m.estimated) == {"mean", "median"}
    assert m.drift == pytest.approx(0.9, rel=0.02)  # the slower host the control removes
    result = build_figure("table_s6", data, tmp_path / "fig")
    ours = result.ours
    assert ours["level1_control"] == "in-run" and ours["level1_measured"] == round(m.measured, 3)
    assert ours["level1_run_errors_pct"] == [round(100 * m.error("mean"), 1)]
    assert ours["level1_drift_min"] == ours["level1_drift_max"] == round(m.drift, 3)
    assert "in-run (5+ clean steps)" in ours["markdown"]
    assert f"| {m.drift:.3f}–{m.drift:.3f} |" in ours["markdown"]  # the drift it removed
    assert "every run is within" in result.note
    # Without a clean run of the same seed, the drift shown is the run's own.
    alone = build_figure("table_s6", load_figure_data([slow]), tmp_path / "alone").ours
    assert f"| {m.in_run_drift:.3f}–{m.in_run_drift:.3f} |" in alone["markdown"]


def test_a_fault_from_the_first_step_has_no_in_run_control(tmp_path):
    slow, _ = _run(tmp_path / "slow", "slow-worker-1",
                   slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=2.0, first_step=1),))
    data = load_figure_data([slow])
    assert in_run(data.by_scenario("slow-worker-1")[0], []) is None


def test_a_host_that_slows_mid_run_is_labelled_unsteady(tmp_path):
    fault = (SlowWorker(dp_rank=1, stage=1, factor=2.0, first_step=5),)
    steady, _ = _run(tmp_path / "steady", "slow-worker-1", slow_workers=fault)
    loaded, _ = _run(tmp_path / "loaded", "slow-worker-1", slower_from=5, slow_workers=fault)
    data = load_figure_data([steady, loaded])
    a, b = (in_run(r, []) for r in sorted(data.by_scenario("slow-worker-1"),
                                          key=lambda r: r.path.name != "steady"))
    assert b.measured == pytest.approx(1.2 * a.measured, rel=0.03)
    assert b.in_run_drift == pytest.approx(1.2, rel=0.02) and not b.steady and a.steady
    ours = build_figure("table_s6", data, tmp_path / "fig").ours
    # every run counts; the unsteady one is named beside the verdict
    assert ours["level1_measured"] == pytest.approx((a.measured + b.measured) / 2, abs=1e-3)
    assert len(ours["level1_unsteady_runs"]) == 1 and "1 unsteady" in ours["markdown"]


def test_the_estimate_divides_out_the_noise_the_clean_steps_straggle_by(tmp_path):
    # Jittery op times make every step straggle (S > 1 with no fault at all). The measured
    # ratio's denominator, the clean steps, carries that noise; the window's own S counts it
    # beside the fault, so S_window / S_clean is what compares with the measured ratio.
    slow, _ = _run(tmp_path / "slow", "slow-worker-1", jitter=0.25,
                   slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=2.0, first_step=5),))
    m = in_run(load_figure_data([slow]).by_scenario("slow-worker-1")[0], [])
    for ideal in ("mean", "median"):
        assert m.clean_slowdown[ideal] > 1.05  # the noise alone straggles
        assert m.estimated[ideal] == pytest.approx(
            m.window_slowdown[ideal] / m.clean_slowdown[ideal])
    # The median ideal does not move with the victim, so the ratio is the measured one up
    # to the simulation's error; the window's own S overstates it by the noise.
    assert m.error("median") == pytest.approx(0.0, abs=0.03)
    assert m.window_slowdown["median"] / m.measured - 1.0 > 0.10
    # The mean ideal takes the victim in (1 of the 8 workers' ops at 2x): it reads low.
    assert m.error("mean") < -0.05


def test_the_mean_ideals_own_shortfall_is_predicted_from_the_layout(tmp_path):
    # The slow worker is 1 of the 8 workers in every compute type's mean, so the window's
    # ideal is slowed with it and the mean-ideal estimate falls short by an amount the
    # layout alone predicts (costmodel.mean_ideal_shortfall); net of it, what is left is
    # the simulation's error, here with no timing noise.
    from stragglerlab.scenarios.costmodel import mean_ideal_shortfall

    slow, _ = _run(tmp_path / "slow", "slow-worker-1",
                   slow_workers=(SlowWorker(dp_rank=1, stage=1, factor=2.0, first_step=5),))
    m = in_run(load_figure_data([slow]).by_scenario("slow-worker-1")[0], [])
    assert (m.workers, m.pp) == (8, 2) and m.microbatches >= 1
    assert m.mean_shortfall == pytest.approx(mean_ideal_shortfall(
        m.measured, pp=2, microbatches=m.microbatches, workers=8))
    assert m.error("mean") < -0.05 and m.mean_shortfall < -0.05
    assert abs(m.net_error("mean")) < abs(m.error("mean")) / 2
    assert m.net_error("median") == m.error("median")  # the median has no such bias
    ours = build_figure("table_s6", load_figure_data([slow]), tmp_path / "fig").ours
    assert ours["level1_run_errors_net_pct"] == [round(100 * m.net_error("mean"), 1)]
    assert ours["level1_mean_shortfall_pct"] == [round(100 * m.mean_shortfall, 1)]
    assert "(net " in ours["markdown"]


def test_step_times_are_pandas_groupby_with_rows_by_step_or_not():
    """Rows by step (a window's frame) take a path without a sort; both give pandas' numbers
    (latest end - earliest start per step), bit for bit."""
    rng = np.random.default_rng(4)
    for trial in range(60):
        n = int(rng.integers(1, 200))
        step = rng.integers(0, 6, n)
        trace = pd.DataFrame({"step": np.sort(step) if trial % 2 else step,
                              "start_ts": rng.random(n) * 10.0 ** rng.integers(-6, 6),
                              "duration": rng.random(n)})
        end = trace["start_ts"] + trace["duration"]
        want = end.groupby(trace["step"]).max() - trace.groupby("step")["start_ts"].min()
        got = step_times(trace)
        assert np.array_equal(got.to_numpy(), want.to_numpy())
        assert got.index.tolist() == want.index.tolist()
