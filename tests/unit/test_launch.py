"""Launch-delay attribution (analysis/launch.py) on testbed traces of pure DP and pure PP.

tests/data/testbed/{pure-dp,pure-pp} are short real runs of our testbed
(DP 4 x PP 1 and DP 1 x PP 4, 5 traced steps). The artifact's tool cannot read
pure-DP traces (KeyError on embedding-grads-all-reduce); ours reads both,
end to end through `stragglerlab whatif`, launch decomposition included.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from stragglerlab.analysis.frame import build_frame
from stragglerlab.analysis.graph import build_graph
from stragglerlab.analysis.launch import FIRST_OP, first_ops, launch_decomposition
from stragglerlab.analysis.simulate import simulate
from stragglerlab.analysis.whatif import attribution_type
from stragglerlab.cli import main
from stragglerlab.trace.trace_io import read_trace
from tests.unit.conftest import DATA

TESTBED = DATA / "testbed"


def _whatif(case: str, tmp_path) -> dict:
    out = tmp_path / case
    assert main(["whatif", "--run", str(TESTBED / case), "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "artifact-format" / "result.json").read_text())


def _frame(case: str):
    df, meta = read_trace(TESTBED / case / "trace.parquet", TESTBED / case / "meta.yaml")
    graph = build_graph(df[(df.step == df.step.min()) & (df.dp_rank == 0)], meta, case)
    frame = build_frame(df, graph, meta, case)
    return graph, frame, meta


def test_pure_pp_testbed_trace_gets_its_launch_decomposition(tmp_path, capsys):
    result = _whatif("pure-pp", tmp_path)
    assert result["job_meta"]["dp_size"] == 1 and result["job_meta"]["pp_size"] == 4
    launch = result["launch_slowdown"]
    assert launch >= 1.03  # this run's untraced CPU work is above the artifact's threshold
    by_stage, by_dp = result["launch_decompose_by_stage"], result["launch_decompose_by_dp_rank"]
    assert set(by_stage) == {"0", "1", "2", "3"} and set(by_dp) == {"0"}
    assert FIRST_OP in result["launch_decompose_by_optype"]
    # Delays are >= 0 but for rounding (>-10 ms kept), and the replay is monotone in them:
    # restoring some delays gives at least T and at most what restoring all of them gives.
    for table in ("optype", "stage", "dp_rank"):
        for value in result[f"launch_decompose_by_{table}"].values():
            assert 0.99 < value <= launch * 1.001, (table, value)
    # With one DP rank, restoring its delays restores them all: the launch slowdown itself.
    assert by_dp["0"] == pytest.approx(launch, rel=1e-9)
    per_step = result["launch_decompose_by_stage_per_step"]
    assert set(per_step) == set(result["launch_step_slowdown"])


def test_pure_dp_testbed_trace_reads_and_decomposes(tmp_path):
    result = _whatif("pure-dp", tmp_path)
    assert result["job_meta"]["pp_size"] == 1 and result["job_meta"]["dp_size"] == 4
    assert result["launch_slowdown"] < 1.03  # below the threshold: null, as the artifact writes
    assert result["launch_decompose_by_stage"] is None
    # Forced on, the attribution covers every DP rank, and the single stage holds all delays.
    graph, frame, meta = _frame("pure-dp")
    value = frame.sim_value(graph)
    times = launch_decomposition(graph, frame, value, meta.pp_size, attribution_type, 1.03)
    t_nodelay = simulate(graph, value).step_time
    t_all = simulate(graph, value, frame.launch_delay).step_time
    assert sorted(times.by_dp_rank) == [0, 1, 2, 3] and list(times.by_stage) == [0]
    np.testing.assert_allclose(times.by_stage[0], t_all, rtol=1e-12)
    assert all((t >= t_nodelay - 1e-9).all() for t in times.by_dp_rank.values())


def test_first_op_is_where_each_stage_starts_its_pipeline():
    graph, _, _ = _frame("pure-pp")
    firsts = first_ops(graph)
    assert [(graph.optype[n], int(graph.seq_id[n]), int(graph.stage[n])) for n in firsts] == [
        ("forward-compute", 0, 0), ("forward-recv", 0, 1), ("forward-recv", 0, 2),
        ("forward-recv", 0, 3)]


def test_per_rank_variants_equal_one_at_a_time_simulations():
    graph, frame, meta = _frame("pure-dp")
    value, delay = frame.sim_value(graph), frame.launch_delay
    times = launch_decomposition(graph, frame, value, meta.pp_size, attribution_type, 1.03)
    for d in range(meta.dp_size):
        only_d = np.zeros_like(delay)
        only_d[:, :, d] = delay[:, :, d]
        np.testing.assert_allclose(times.by_dp_rank[d], simulate(graph, value, only_d).step_time,
                                   rtol=1e-12)
