"""Simulator semantics on hand-built graphs, and the batched DP-rank attribution."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stragglerlab.analysis.simulate as simulate_mod
from stragglerlab.analysis.frame import build_frame
from stragglerlab.analysis.graph import DepGraph, Group, build_graph
from stragglerlab.analysis.replays import restore_each_dp_rank as _restore_each_dp_rank
from stragglerlab.analysis.simulate import simulate
from stragglerlab.analysis.whatif import ideal_values
from stragglerlab.trace.meta import JobMeta
from tests.unit.conftest import DATA
from tests.unit.refdata import reference


def tiny_graph(dp_sync: bool) -> DepGraph:
    """a (compute) -> c1 ; b (compute) -> c2 ; {c1, c2} one comm group; d after c1."""
    g = DepGraph(
        optype=np.array(["forward-compute", "forward-compute", "x", "x", "optimizer"], object),
        seq_id=np.arange(5), stage=np.zeros(5, int), mb_id=np.full(5, -1),
        deps=[np.array([], int), np.array([], int), np.array([0]), np.array([1]), np.array([2])],
        groups=[Group((0,), False, False), Group((1,), False, False),
                Group((2, 3), True, dp_sync), Group((4,), False, False)],
    )
    g.order = [0, 1, 2, 3]
    return g


def test_comm_group_ends_at_latest_start_plus_own_transfer():
    g = tiny_graph(dp_sync=False)
    value = np.array([1.0, 3.0, 0.5, 0.25, 2.0])[:, None, None]
    sim = simulate(g, value, keep_times=True)
    assert sim.start[2, 0, 0] == 1.0 and sim.start[3, 0, 0] == 3.0
    assert sim.end[2, 0, 0] == pytest.approx(3.5)  # latest start 3.0 + own 0.5
    assert sim.end[3, 0, 0] == pytest.approx(3.25)
    assert sim.end[4, 0, 0] == pytest.approx(5.5)
    assert sim.step_time[0] == pytest.approx(5.5)


def test_launch_delay_shifts_starts():
    g = tiny_graph(dp_sync=False)
    value = np.array([1.0, 3.0, 0.5, 0.25, 2.0])[:, None, None]
    delay = np.zeros_like(value)
    delay[4] = 0.7
    assert simulate(g, value, delay).step_time[0] == pytest.approx(6.2)


def test_dp_sync_takes_latest_start_over_lanes():
    g = tiny_graph(dp_sync=True)
    value = np.ones((5, 1, 2))
    value[1, 0, 1] = 4.0  # lane 1's compute b is slow
    sim = simulate(g, value, keep_times=True)
    # both lanes' comm ops wait for lane 1's b
    assert sim.end[2, 0, 0] == pytest.approx(5.0)
    assert sim.end[2, 0, 1] == pytest.approx(5.0)
    g_nosync = tiny_graph(dp_sync=False)
    assert simulate(g_nosync, value, keep_times=True).end[2, 0, 0] == pytest.approx(2.0)


@pytest.fixture(scope="module")
def ar_job():
    df = pd.read_parquet(reference("trace-AR.parquet"))
    meta = JobMeta.load(reference("meta-AR.yaml"))
    graph = build_graph(df[(df.step == df.step.min()) & (df.dp_rank == 0)], meta, "AR")
    frame = build_frame(df, graph, meta, "AR")
    return graph, frame


def test_chunked_simulation_equals_whole(ar_job, monkeypatch):
    graph, frame = ar_job
    value = frame.sim_value(graph)
    whole = simulate(graph, value).step_time
    monkeypatch.setattr(simulate_mod, "CHUNK_ELEMENTS", graph.n_nodes * 4 * 3)  # 3 steps a chunk
    chunked = simulate(graph, value).step_time
    np.testing.assert_array_equal(whole, chunked)


def test_batched_dp_attribution_equals_one_simulation_per_rank(ar_job):
    graph, frame = ar_job
    value = frame.sim_value(graph)
    ideal = ideal_values(graph, frame, value)
    batched = _restore_each_dp_rank(graph, value, ideal)
    ideal_full = np.broadcast_to(ideal[:, None, None], value.shape)
    for d in range(value.shape[2]):
        mask = np.zeros(value.shape, dtype=bool)
        mask[:, :, d] = True
        brute = simulate(graph, np.where(mask, value, ideal_full)).step_time
        np.testing.assert_allclose(batched[d], brute, rtol=1e-12)


def test_simulation_with_launch_delays_replays_the_trace(ar_job):
    graph, frame = ar_job
    with_delay = simulate(graph, frame.sim_value(graph), frame.launch_delay).step_time
    base = frame.end.max(axis=(0, 2)) - frame.start.min(axis=(0, 2))
    np.testing.assert_allclose(with_delay, base, rtol=1e-5)


def test_dp_attribution_chunks_give_the_same_answer(ar_job, monkeypatch):
    import stragglerlab.analysis.replays as replays_mod

    graph, frame = ar_job
    value = frame.sim_value(graph)
    ideal = ideal_values(graph, frame, value)
    whole = _restore_each_dp_rank(graph, value, ideal)
    monkeypatch.setattr(replays_mod, "CHUNK_ELEMENTS", graph.n_nodes * value.shape[1] * 2)
    one_rank_a_chunk = _restore_each_dp_rank(graph, value, ideal)
    for d in whole:
        np.testing.assert_array_equal(whole[d], one_rank_a_chunk[d])


def test_a_send_completing_after_the_optimizer_does_not_lengthen_the_step(tiny_df, tiny_meta):
    """The artifact's rule (design.md §4.3): a simulated step ends at the latest optimizer end.

    tests/data/trailing_send_trace.csv is tiny_trace.csv with one forward-send
    (step 8, stage 0, DP rank 1, its last) completing 0.2 s later, after that
    step's optimizer: its receiver was held up (a GC pause, say) and nothing
    waits for the send. The traced step is longer; the simulated one is not.
    """
    from stragglerlab.analysis.whatif import analyze

    trailing = pd.read_csv(DATA / "trailing_send_trace.csv")
    plain = analyze(tiny_df, tiny_meta, where="tiny").step_time_nodelay.values
    late = analyze(trailing, tiny_meta, where="trailing").step_time_nodelay.values
    np.testing.assert_allclose(late, plain, rtol=0, atol=1e-12)
    ends = trailing.start_ts + trailing.duration
    step8 = trailing.step == 8
    assert ends[step8].max() > ends[step8 & (trailing.optype == "optimizer")].max() + 0.1
