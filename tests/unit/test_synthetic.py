"""Synthetic traces (workloads.synthetic): schema, reference conventions, what-if ground truth."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.whatif import analyze
from stragglerlab.cli import main
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.trace.validate import validate_trace
from stragglerlab.workloads.synthetic import (
    SlowWorker,
    SyntheticConfig,
    synthesize_trace,
    write_run,
)

SMALL = dict(dp_size=4, pp_size=4, n_microbatches=4, n_steps=4)


@pytest.fixture(scope="module")
def clean():
    df, meta = synthesize_trace(SyntheticConfig(**SMALL))
    return df, meta, analyze(df, meta, "clean")


@pytest.fixture(scope="module")
def slow():
    cfg = SyntheticConfig(**SMALL, slow_workers=(SlowWorker(dp_rank=1, stage=2, factor=2.0),))
    df, meta = synthesize_trace(cfg)
    return df, meta, analyze(df, meta, "slow")


@pytest.fixture(scope="module")
def imbalanced():
    df, meta = synthesize_trace(SyntheticConfig(**SMALL, last_stage_factor=2.0))
    return df, meta, analyze(df, meta, "imbalanced")


def test_round_trip_validates_and_writes_ground_truth(tmp_path):
    cfg = SyntheticConfig(dp_size=2, pp_size=3, n_microbatches=3, n_steps=3,
                          slow_workers=(SlowWorker(1, 2, 1.5, first_step=1),))
    faults = write_run(cfg, tmp_path)
    df, meta = read_trace(tmp_path / "trace.parquet")
    expected, _ = synthesize_trace(cfg)
    pd.testing.assert_frame_equal(df, expected)
    assert JobMeta.load(tmp_path / "meta.yaml") == meta == JobMeta(2, 3, trial_name="synthetic")
    assert json.loads((tmp_path / "faults.json").read_text()) == faults
    (fault,) = faults
    assert fault["kind"] == "slow-worker"
    assert fault["targets"] == [{"rank": 5, "dp_rank": 1, "stage": 2}]
    assert (fault["first_step"], fault["last_step"]) == (1, None)
    assert fault["requested"] == {"factor": 1.5}
    assert fault["measured"]["factor"] == pytest.approx(1.5, rel=0.05)


def test_deterministic_given_the_seed():
    a, _ = synthesize_trace(SyntheticConfig(seed=3))
    b, _ = synthesize_trace(SyntheticConfig(seed=3))
    c, _ = synthesize_trace(SyntheticConfig(seed=4))
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["duration"], c["duration"])


def test_schema_dtypes_and_reference_conventions(clean):
    df, meta, _ = clean
    validate_trace(df, meta, "synthetic")
    assert df.dtypes["start_ts"] == np.float64 and df.dtypes["seq_id"] == np.int64
    assert isinstance(df.dtypes["optype"], pd.CategoricalDtype)
    assert (df["rank"] == df["stage"] * meta.dp_size + df["dp_rank"]).all()
    assert (df.groupby("step")["start_ts"].min() == 0).all()
    # seq_id counts each optype per worker per step from 0.
    seq = df.groupby(["step", "rank", "optype"], observed=True)["seq_id"]
    assert (seq.min() == 0).all() and (seq.max() + 1 == seq.size()).all()
    compute = df["optype"].isin(["forward-compute", "backward-compute"])
    assert (df.loc[compute, "gmc"] == df.loc[compute, "stage"]).all()
    assert (df.loc[compute, "mc"] == 0).all() and (df.loc[compute, "mb_id"] >= 0).all()
    gc = df["optype"] == "gc"
    assert (df.loc[gc, "mb_id"] == 0).all() and (df.loc[gc, "duration"] == 0).all()
    assert (df.loc[~compute & ~gc, "mb_id"] == -1).all()
    dp_ops = df["optype"].isin(["params-all-gather", "grads-reduce-scatter"])
    assert (df.loc[dp_ops, "mc"] == 0).all() and (df.loc[~compute & ~dp_ops, "mc"] == -1).all()
    counts = df[df["step"] == 0].groupby(["stage", "optype"], observed=True).size()
    n = 4 * meta.dp_size
    assert "forward-recv" not in counts[0] and "backward-send" not in counts[0]
    assert "forward-send" not in counts[3] and "backward-recv" not in counts[3]
    assert counts[(1, "forward-recv")] == counts[(2, "backward-send")] == n
    assert set(df.loc[df["optype"] == "embedding-grads-all-reduce", "stage"]) == {0, 3}


def test_combined_ops_are_two_records_with_one_time(clean):
    df = clean[0]
    w = df[(df["step"] == 1) & (df["dp_rank"] == 0)]
    # Stage 0: send-forward-recv-backward = the last forward-send and the first backward-recv.
    s0 = w[w["stage"] == 0].set_index(["optype", "seq_id"])
    send, recv = s0.loc[("forward-send", 3)], s0.loc[("backward-recv", 0)]
    assert (send["start_ts"], send["duration"]) == (recv["start_ts"], recv["duration"])
    # Stage 3: send-backward-recv-forward = backward-send k with forward-recv k+1.
    s3 = w[w["stage"] == 3].set_index(["optype", "seq_id"])
    for k in range(3):
        send, recv = s3.loc[("backward-send", k)], s3.loc[("forward-recv", k + 1)]
        assert (send["start_ts"], send["duration"]) == (recv["start_ts"], recv["duration"])


def test_clean_trace_is_not_straggling(clean):
    result = clean[2]
    assert 1.0 <= result.simulation_discrepancy < 1.05
    assert result.slowdown < 1.05


def test_slow_worker_is_found(slow):
    _, meta, result = slow
    assert result.top_workers[0] == (1, 2)
    assert result.slowdown > 1.3
    by_dp = [result.by_dp_rank[d].mean() for d in range(meta.dp_size)]
    assert int(np.argmax(by_dp)) == 1
    assert np.unravel_index(np.argmax(result.worker_score), result.worker_score.shape) == (2, 1)
    assert result.simulation_discrepancy < 1.05


def test_stage_imbalance_points_at_the_last_stage(imbalanced):
    _, meta, result = imbalanced
    by_stage = [result.by_stage[p].mean() for p in range(meta.pp_size)]
    assert int(np.argmax(by_stage)) == meta.pp_size - 1
    assert result.m_s.rem > 0.5
    assert result.slowdown > 1.1


@pytest.mark.parametrize(("dp", "pp", "n_mb"), [(1, 1, 2), (3, 1, 2), (1, 3, 1), (2, 2, 5)])
def test_degenerate_shapes_analyse(dp, pp, n_mb):
    df, meta = synthesize_trace(SyntheticConfig(dp_size=dp, pp_size=pp, n_microbatches=n_mb,
                                                n_steps=2, jitter_dist="normal"))
    validate_trace(df, meta, "synthetic")
    has_dp = df["optype"].isin(["params-all-gather", "grads-reduce-scatter"]).any()
    assert has_dp == (dp > 1)
    result = analyze(df, meta, "synthetic")
    assert result.simulation_discrepancy < 1.05 and result.slowdown < 1.05


def test_large_job_is_fast():
    t0 = time.perf_counter()
    df, _ = synthesize_trace(SyntheticConfig(dp_size=64, pp_size=4, n_microbatches=8,
                                             n_steps=20))
    assert time.perf_counter() - t0 < 5
    assert df["rank"].nunique() == 256 and df["step"].nunique() == 20


def test_bad_config_raises():
    with pytest.raises(ValueError, match="slow worker"):
        synthesize_trace(SyntheticConfig(slow_workers=(SlowWorker(5, 0, 2.0),)))
    with pytest.raises(ValueError, match="forward_s"):
        synthesize_trace(SyntheticConfig(forward_s=[0.01, 0.02]))
    with pytest.raises(ValueError, match="jitter_dist"):
        synthesize_trace(SyntheticConfig(jitter_dist="uniform"))


def test_synth_verb(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["synth", "--out", str(out), "--dp", "2", "--pp", "2", "--microbatches", "2",
                 "--steps", "2", "--slow", "0,1,2.0,0,0", "--last-stage-factor", "1.2"]) == 0
    faults = json.loads((out / "faults.json").read_text())
    assert [f["kind"] for f in faults] == ["slow-worker", "stage-imbalance"]
    assert faults[0]["last_step"] == 0
    read_trace(out / "trace.parquet", out / "meta.yaml")
    assert main(["synth", "--out", str(tmp_path / "clean"), "--steps", "2"]) == 0
    assert json.loads((tmp_path / "clean" / "faults.json").read_text()) == []
    with pytest.raises(SystemExit):  # argparse: not numbers
        main(["synth", "--out", str(out), "--slow", "1,x"])
    capsys.readouterr()
    assert main(["synth", "--out", str(out), "--slow", "9,0,2"]) == 2  # outside the layout
    assert "outside DP 2 x PP 4" in capsys.readouterr().err
