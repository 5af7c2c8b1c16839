"""The torch-wrapper workloads' pure logic: scenario checks, stage split, compute log,
the slow worker's steering and measurement on it (no Ray, no process group)."""

from __future__ import annotations

import json

import pytest

from stragglerlab.injectors.base import RankContext
from stragglerlab.injectors.slow_worker import SlowWorker, _peer_compute_ratio
from stragglerlab.run.compute_log import ComputeLog, measure_frame, peer_ratio, read_log
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.scenarios.scenario_vocab import TORCH_WORKLOADS, Workload
from stragglerlab.util.errors import InputError


def _user(tmp_path, **scenarios) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"scenarios": scenarios}))
    return str(path)


TORCH = {"workload": "ddp", "parallel": {"dp": 2, "pp": 1}, "run": {"profiler": "kineto"}}


def test_builtin_torch_scenarios_name_their_workload():
    for w in TORCH_WORKLOADS:
        clean, slow = load_scenario(f"torch-{w.value}"), load_scenario(f"torch-{w.value}-slow")
        assert clean.workload is slow.workload is w and not clean.faults
        assert [f["kind"] for f in slow.faults] == ["slow-worker"]
        assert slow.faults[0]["first_step"] > slow.run.warmup_steps  # an in-run control
    assert load_scenario("clean-dp2-pp2").workload is Workload.MEGATRON


@pytest.mark.parametrize(("over", "message"), [
    ({"run": {"profiler": "off"}}, "set run.profiler: kineto"),
    ({"parallel": {"dp": 2, "pp": 2}}, "data-parallel only: set parallel.pp: 1"),
    ({"faults": [{"kind": "net-delay", "targets": [{"dp_rank": 0, "stage": 0}],
                  "params": {"delay_ms": 5}}]}, "supports the faults slow-worker, not net-delay"),
])
def test_a_torch_workload_it_cannot_run_is_one_clear_error(tmp_path, over, message):
    entry = {**TORCH, **over, "parallel": {**TORCH["parallel"], **over.get("parallel", {})},
             "run": {**TORCH["run"], **over.get("run", {})}}
    with pytest.raises(InputError, match=message):
        load_scenario("t", _user(tmp_path, t=entry))


def test_pipelining_needs_two_stages_and_a_block_each(tmp_path):
    bad = {**TORCH, "workload": "pipelining", "parallel": {"dp": 2, "pp": 1}}
    with pytest.raises(InputError, match="pipelining needs parallel.pp >= 2"):
        load_scenario("p", _user(tmp_path, p=bad))
    few = {**bad, "parallel": {"dp": 1, "pp": 4}, "model": {"n_layers": 2}}
    with pytest.raises(InputError, match="one block or more per stage"):
        load_scenario("p", _user(tmp_path, p=few))


def test_an_unknown_workload_names_the_known_ones(tmp_path):
    with pytest.raises(InputError, match="megatron, ddp, fsdp, pipelining"):
        load_scenario("t", _user(tmp_path, t={**TORCH, "workload": "deepspeed"}))


def test_stage_blocks_are_consecutive_and_even():
    torch_model = pytest.importorskip("stragglerlab.workloads.torch_model")
    assert torch_model.stage_blocks(4, 2) == [(0, 2), (2, 2)]
    assert torch_model.stage_blocks(5, 3) == [(0, 2), (2, 2), (4, 1)]
    with pytest.raises(ValueError, match="cannot split 2 blocks over 3 stages"):
        torch_model.stage_blocks(2, 3)


def test_compute_clock_times_linear_forwards_only():
    torch_model = pytest.importorskip("stragglerlab.workloads.torch_model")
    import torch

    model = torch_model.MlpStack(hidden=8, blocks=2, seed=0)
    clock = torch_model.ComputeClock(model)
    assert clock.take() == 0.0
    model(torch.randn(4, 8)).sum().backward()
    first = clock.take()
    assert first > 0 and clock.take() == 0.0  # take() resets


def _write_logs(run_dir, per_rank: dict[int, list[float]], torn: bool = False) -> None:
    for rank, times in per_rank.items():
        log = ComputeLog.for_rank(run_dir, rank)
        for step, t in enumerate(times):
            log.append(step, t, 2 * t)
        log.close()
    if torn:
        with (run_dir / "compute" / "rank0.jsonl").open("a") as f:
            f.write('{"step": 9, "comp')


def test_measure_frame_keeps_common_steps_after_warmup(tmp_path):
    _write_logs(tmp_path, {0: [1.0, 1.0, 1.0, 1.0], 1: [1.0, 1.0, 2.0]}, torn=True)
    assert len(read_log(tmp_path / "compute" / "rank0.jsonl")) == 4  # the torn line skipped
    frame = measure_frame(tmp_path, world=2, dp=2, warmup_steps=1)
    assert sorted(set(frame["step"])) == [1, 2]  # step 3: rank 1 never finished it
    assert set(frame["optype"]) == {"forward-compute"}
    assert frame.loc[(frame["rank"] == 1) & (frame["step"] == 2), "duration"].item() == 2.0
    assert measure_frame(tmp_path, world=3, dp=3, warmup_steps=0).empty  # rank 2 logged none


def test_slow_worker_measures_its_factor_on_the_compute_log(tmp_path):
    _write_logs(tmp_path, {0: [1.0, 1.0, 1.0, 1.0], 1: [1.0, 1.0, 1.9, 2.1]})
    spec = parse_faults([{"kind": "slow-worker", "targets": [{"dp_rank": 1, "stage": 0}],
                          "params": {"factor": 2.0}, "first_step": 2}], 2, 1, 4, "t")[0]
    record = SlowWorker(spec).record(measure_frame(tmp_path, 2, 2, 1), {"backend": "gloo"})
    assert record.measured["factor"] == pytest.approx(2.0)
    assert record.requested == {"factor": 2.0}


def test_peer_ratio_window_and_since(tmp_path):
    _write_logs(tmp_path, {0: [1.0, 1.0, 1.0, 1.0], 1: [1.0, 3.0, 2.0, 2.0]})
    assert peer_ratio(tmp_path, 1, [0, 1], before_step=4) == pytest.approx(2.0)
    assert peer_ratio(tmp_path, 1, [0, 1], before_step=4, window=3) == pytest.approx(7 / 3)
    assert peer_ratio(tmp_path, 1, [0, 1], before_step=4, window=9, since=2) == \
        pytest.approx(2.0)
    assert peer_ratio(tmp_path, 1, [0, 1], before_step=2, since=2) is None  # none in window
    assert peer_ratio(tmp_path, 1, [1], before_step=4) is None  # no peer


def test_slow_worker_steers_on_the_compute_log_without_an_op_trace(tmp_path):
    _write_logs(tmp_path, {0: [1.0, 1.0, 1.0], 1: [1.0, 1.5, 1.5]})
    ctx = RankContext(1, 1, 0, run_dir=str(tmp_path), dp_size=2)
    assert _peer_compute_ratio(ctx, before_step=3, since=1) == pytest.approx(1.5)
    assert _peer_compute_ratio(ctx, before_step=3, since=3) is None


def test_linear_pacer_paces_each_linear_to_its_flops_at_the_warmup_rate():
    torch_pacing = pytest.importorskip("stragglerlab.workloads.torch_pacing")
    torch_model = pytest.importorskip("stragglerlab.workloads.torch_model")
    import time

    import torch

    torch.set_num_threads(1)
    model = torch_model.MlpStack(hidden=64, blocks=2, seed=0)
    x = torch.randn(256, 64)
    share_now: list[float | None] = [None]
    pacer = torch_pacing.LinearPacer(model, share=0.5, margin=1.5,
                                     cores_now=lambda: share_now[0])
    model(x).sum().backward()  # warm-up: measured, not paced
    assert pacer.ops == 0 and pacer.summary()["warmup_ops"] == 8
    pacer.settle()  # no process group: this rank's own medians
    fwd, bwd = pacer.rate["forward"], pacer.rate["backward"]
    assert 0 < fwd < 1e-6 and 0 < bwd < 1e-6
    share_now[0] = 0.05  # the slow-worker injector's lower share
    t0 = time.perf_counter()
    model(x).sum().backward()
    elapsed = time.perf_counter() - t0
    assert pacer.ops == 8  # 2 blocks x 2 Linears, forward and backward
    # Forward 2 x 256 x 64 x 256 FLOPs per Linear, backward twice that, at 0.05 cores
    # with margin 1.5: each op lasted at least its target.
    flops = 2.0 * 256 * 64 * 256
    floor = 1.5 * (4 * flops * fwd + 4 * 2 * flops * bwd) / 0.05
    assert elapsed >= 0.98 * floor
    assert pacer.slept_s > 0 and pacer.summary()["ops"] == 8


def test_without_isolation_the_linear_pacer_is_the_slow_device():
    """No quota to cut (local launcher, no root): the slow worker's factor goes through
    the pacer, so the Linears that faults.json measures take `factor` times their target
    (a stretch at the step's end is invisible there: it measures 1.00 for a 2x victim on a
    GPU machine)."""
    torch_pacing = pytest.importorskip("stragglerlab.workloads.torch_pacing")
    torch_model = pytest.importorskip("stragglerlab.workloads.torch_model")
    import time

    import torch

    torch.set_num_threads(1)
    model = torch_model.MlpStack(hidden=64, blocks=2, seed=0)
    x = torch.randn(256, 64)
    factor = [1.0]
    pacer = torch_pacing.LinearPacer(model, share=0.5, margin=1.5, cores_now=lambda: None,
                                     factor_now=lambda: factor[0])
    model(x).sum().backward()
    pacer.settle()
    flops = 2.0 * 256 * 64 * 256
    target = 1.5 * (4 * flops * pacer.rate["forward"]
                    + 4 * 2 * flops * pacer.rate["backward"]) / 0.5
    factor[0] = 40.0  # large enough that pacing, not the matmuls, sets the time
    t0 = time.perf_counter()
    model(x).sum().backward()
    assert time.perf_counter() - t0 >= 0.98 * 40.0 * target


@pytest.mark.parametrize("isolation,mechanism", [(False, "paced-rate"), (True, "cpu-quota")])
def test_a_torch_workload_records_what_slowed_its_victim(tmp_path, isolation, mechanism):
    from stragglerlab.scenarios.scenario import scenario_to_dict

    sc = load_scenario("torch-ddp-slow")
    run = {"backend": "gloo", "scenario": scenario_to_dict(sc),
           "isolation": {"enabled": isolation}}
    spec = parse_faults(sc.faults, 2, 1, sc.run.steps, "t")[0]
    _write_logs(tmp_path, {0: [1.0] * 8, 1: [1.0] * 6 + [2.0] * 2})
    measured = SlowWorker(spec).measure(measure_frame(tmp_path, 2, 2, 1), run)
    assert measured == {"factor": pytest.approx(2.0), "mechanism": mechanism}
