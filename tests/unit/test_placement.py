"""The pure decisions of a cluster run (workloads/placement.py): no Ray, milliseconds.

    .venv/bin/python -m pytest tests/unit/test_placement.py
"""

from __future__ import annotations

import numpy as np
import pytest

from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.scenarios.scenario_vocab import Backend, Placement
from stragglerlab.workloads import placement as pl

ROUTE_REMOTE = "10.0.0.7 via 10.0.0.1 dev ens5 src 10.0.0.9 uid 0 \\    cache "
ROUTE_SUBNET = "10.0.0.7 dev ens5 src 10.0.0.9 uid 0 \\    cache "
ROUTE_LOCAL = "local 10.0.0.9 dev lo table local src 10.0.0.9 uid 0 \\    cache <local> "
ADDRS = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
         "2: ens5    inet 10.0.0.9/24 brd 10.0.0.255 scope global ens5\\       valid_lft forever\n")


def test_megatron_rank_order_is_dp_inside_pp():
    assert [pl.megatron_rank(d, s, dp=2) for s in range(2) for d in range(2)] == [0, 1, 2, 3]
    assert pl.megatron_rank(dp_rank=1, stage=3, dp=4) == 13


def test_pipelines_stay_on_one_node_where_they_fit():
    # spread over 2 nodes, bundles alternate: each pipeline (ranks d, d+dp) on one node
    by_rank = pl.assign_ranks(["a", "b", "a", "b"], dp=2, pp=2)
    nodes = ["a", "b", "a", "b"]
    on = [nodes[b] for b in by_rank]
    assert on[0] == on[2] and on[1] == on[3] and on[0] != on[1]
    assert sorted(by_rank) == [0, 1, 2, 3]  # every bundle used once


def test_packed_bundles_keep_their_order():
    assert pl.assign_ranks(["a"] * 4, dp=2, pp=2) == [0, 2, 1, 3]
    assert pl.assign_ranks(["a"] * 4, dp=4, pp=1) == [0, 1, 2, 3]


def test_uneven_nodes_split_only_the_pipeline_that_does_not_fit():
    nodes = ["a", "b", "c", "a"]  # SPREAD of 4 bundles over 3 nodes
    by_rank = pl.assign_ranks(nodes, dp=2, pp=2)
    on = [nodes[b] for b in by_rank]
    assert on[0] == on[2] == "a" and {on[1], on[3]} == {"b", "c"}


def test_assign_ranks_needs_one_bundle_per_rank():
    with pytest.raises(ValueError, match="3 bundles for 4 ranks"):
        pl.assign_ranks(["a", "b", "c"], dp=2, pp=2)


def test_bundles_and_strategy():
    assert pl.bundles(2, 1, gpu=False) == [{"CPU": 1}, {"CPU": 1}]
    assert pl.bundles(1, 1, gpu=True) == [{"CPU": 1, "GPU": 1}]
    assert pl.ray_strategy(Placement.SPREAD, private=True) == "STRICT_PACK"
    assert pl.ray_strategy(Placement.PACK, private=False) == "PACK"
    assert pl.ray_strategy(Placement.SPREAD, private=False) == "SPREAD"


def test_placement_map_and_lost_ranks():
    m = pl.placement_map([0, 1, 2, 3], ["a", "b", "a", "b"], {"a": "10.0.0.1", "b": "10.0.0.2"},
                         ["cpu"] * 4)
    assert m[1] == {"rank": 1, "node_id": "b", "node_ip": "10.0.0.2", "device": "cpu"}
    assert pl.ranks_on(m, {"b"}) == [1, 3] and pl.ranks_on(m, set()) == []


@pytest.mark.parametrize("gpu_ids,visible,device", [
    ([], None, "cpu"), ([5], "5", "cuda:0"), ([5], "3,5", "cuda:1"), (["2"], None, "cuda:0")])
def test_rank_device_is_the_gpu_ray_assigned(gpu_ids, visible, device):
    assert pl.rank_device(gpu_ids, visible) == device


def test_interface_from_the_route():
    assert pl.gloo_ifname("10.0.0.7", ROUTE_REMOTE, ADDRS) == "ens5"
    assert pl.gloo_ifname("10.0.0.7", ROUTE_SUBNET, ADDRS) == "ens5"
    # rank 0's own address routes via lo: the interface holding it, never loopback
    assert pl.gloo_ifname("10.0.0.9", ROUTE_LOCAL, ADDRS) == "ens5"
    assert pl.gloo_ifname("127.0.0.1", "local 127.0.0.1 dev lo table local", ADDRS) == "lo"
    assert pl.gloo_ifname("10.0.0.7", "", "") is None


def test_clock_offset_takes_the_tightest_round_trip():
    # remote clock 100 s ahead; the 2 ms round trip bounds it best
    samples = [(0.0, 100.010, 0.030), (1.0, 101.001, 1.002), (2.0, 102.02, 2.05)]
    est = pl.estimate_offset(samples)
    assert est.offset_s == pytest.approx(100.0) and est.uncertainty_s == pytest.approx(0.001)
    assert est.samples == 3
    ref = pl.ClockOffset(offset_s=40.0, uncertainty_s=0.0005, samples=3)
    off, unc = pl.relative_offset(est, ref)
    assert off == pytest.approx(60.0) and unc == pytest.approx(0.0015)
    with pytest.raises(ValueError):
        pl.estimate_offset([])


def test_correction_only_when_it_tells_from_noise():
    assert pl.applied_correction(0.5, 0.001, same_clock=False) == 0.5
    assert pl.applied_correction(0.5, 0.001, same_clock=True) == 0.0  # one kernel clock
    assert pl.applied_correction(0.0004, 0.001, same_clock=False) == 0.0  # within noise


def test_wants_gpu_and_placement_config():
    from stragglerlab.workloads.placement import wants_gpu

    assert wants_gpu(Backend.NCCL, 0, 4) and wants_gpu(Backend.AUTO, 8, 4)
    assert not wants_gpu(Backend.AUTO, 2, 4) and not wants_gpu(Backend.GLOO, 8, 4)
    sc = load_scenario("clean-dp2-pp2", None, {"run": {"placement": "spread"}})
    assert sc.run.placement is Placement.SPREAD
    assert load_scenario("clean-dp2-pp2").run.placement is Placement.PACK


def test_bad_placement_is_one_input_error():
    from stragglerlab.util.errors import InputError

    with pytest.raises(InputError, match="run.placement: 'diagonal' is not one of pack, spread"):
        load_scenario("clean-dp2-pp2", None, {"run": {"placement": "diagonal"}})


def test_clock_record_corrects_only_other_kernels():
    from stragglerlab.workloads.cluster import _clock_record

    def off(s: float, u: float = 0.0005) -> pl.ClockOffset:
        return pl.ClockOffset(offset_s=s, uncertainty_s=u, samples=7)

    start = {"a": off(10.0), "b": off(10.0002), "c": off(-5.0)}  # b: same host as a
    end = {"a": off(10.0), "b": off(10.0002), "c": off(-5.002)}
    rec = _clock_record(start, end, "a", {"a": True, "b": True, "c": False},
                        ["a", "b", "c", "c"])
    assert rec["reference_node"] == "a" and rec["nodes"]["a"]["applied_s"] == 0.0
    assert rec["nodes"]["b"]["applied_s"] == 0.0  # one kernel: nothing to correct
    assert rec["nodes"]["c"]["applied_s"] == pytest.approx(-15.001)  # mean of start and end
    assert rec["nodes"]["c"]["uncertainty_s_end"] == pytest.approx(0.001)
    assert rec["rank_correction_s"] == {"0": 0.0, "1": 0.0, "2": rec["nodes"]["c"]["applied_s"],
                                        "3": rec["nodes"]["c"]["applied_s"]}
    # a lost node has no end measurement: its start offset is used
    rec = _clock_record(start, {"a": off(10.0)}, "a", {"a": True, "b": True, "c": False},
                        ["a", "c"])
    assert rec["nodes"]["c"]["applied_s"] == pytest.approx(-15.0)
    assert "offset_s_end" not in rec["nodes"]["c"]


def test_workflow_config_passes_a_ray_address():
    from stragglerlab.util.errors import InputError
    from stragglerlab.workflow.config import load_workflow_config

    raw = {"fixed": [{"scenario": "clean-dp2-pp2", "seeds": [0]}], "population": None}
    assert load_workflow_config(raw, ["whatif"]).ray_address is None
    cfg = load_workflow_config(dict(raw, ray_address="10.0.0.1:6379"), ["whatif"])
    assert cfg.ray_address == "10.0.0.1:6379"
    with pytest.raises(InputError, match="ray_address must be a Ray address"):
        load_workflow_config(dict(raw, ray_address=5), ["whatif"])


def test_ray_address_is_host_port_or_auto():
    from stragglerlab.util.errors import InputError

    assert pl.check_ray_address(" 10.0.0.1:6379 ") == "10.0.0.1:6379"
    assert pl.check_ray_address("auto") == "auto"
    for bad in ("10.0.0.1", "head:port", "ray://head:10001", ":6379", "h:70000"):
        with pytest.raises(InputError, match="give HOST:PORT"):
            pl.check_ray_address(bad)


def test_train_with_a_bad_ray_address_is_one_input_error(tmp_path, capsys):
    from stragglerlab.cli import main

    assert main(["train", "--scenario", "clean-dp2-pp2", "--ray-address", "nohost",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--ray-address" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_an_unreachable_ray_head_is_one_input_error_at_once(tmp_path, capsys):
    # Ray itself retries an unreachable head for minutes (seen: > 200 s); the probe asks
    # the port once, after every config check, before Ray or the run folder.
    import socket

    from stragglerlab.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    assert main(["train", "--scenario", "clean-dp2-pp2", "--ray-address", closed,
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Ray cluster at {closed}" in err and len(err.splitlines()) == 1
    assert "ray start --head" in err and not (tmp_path / "x").exists()
    with socket.socket() as head:  # a head that answers passes
        head.bind(("127.0.0.1", 0))
        head.listen()
        pl.check_ray_reachable(f"127.0.0.1:{head.getsockname()[1]}")
    pl.check_ray_reachable("auto")  # Ray's to find


def test_assemble_trace_puts_every_node_on_rank_0s_clock(tmp_path):
    """A rank on a node whose clock runs 100 s ahead lands where it ran once corrected."""
    from stragglerlab.trace.schema import OpType
    from stragglerlab.workloads.run_folder import assemble_trace
    from stragglerlab.workloads.tracer import Tracer

    sc = load_scenario("clean-dp2-pp2", overrides={"run": {"steps": 2, "warmup_steps": 0}})
    ahead = {2: 100.0, 3: 100.0}  # ranks 2, 3 on the other node
    for rank in range(4):
        tr = Tracer(tmp_path / "trace-parts" / f"rank{rank}.bin")
        for step in range(2):
            tr.begin_step(step)
            t = 50.0 + step + 0.01 * rank + ahead.get(rank, 0.0)
            tr.record(OpType.OPTIMIZER, t, t + 0.5)
            tr.end_step()
        tr.close()
    raw, _ = assemble_trace(tmp_path, sc)
    assert raw["start_ts"].max() > 100
    df, info = assemble_trace(tmp_path, sc, shift=ahead)
    assert info["clock_origin_monotonic_s"] == pytest.approx(50.0)
    got = df[df["step"] == 1].set_index("rank")["start_ts"]
    assert list(got.round(6)) == [1.0, 1.01, 1.02, 1.03]
    assert np.allclose(df["duration"], 0.5)
