"""Injectors: registry and parameter checks, the base helpers, and the rank-side hooks and
measurements of slow worker, hang and crash (network faults: test_injectors_network.py).

No torch, no Ray: every hook is called directly with a RankContext.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglerlab.host.cgroups import MIN_QUOTA_US, quota_for
from stragglerlab.injectors import crash as crash_mod
from stragglerlab.injectors import hang as hang_mod
from stragglerlab.injectors.base import RankContext, compute_ratio
from stragglerlab.injectors.crash import Crash
from stragglerlab.injectors.gc_pauses import GcPauses
from stragglerlab.injectors.hang import Hang
from stragglerlab.injectors.net_delay import NetDelay
from stragglerlab.injectors.net_throttle import NetThrottle
from stragglerlab.injectors.registry import build_injectors, injector_classes
from stragglerlab.injectors.seq_imbalance import SeqImbalance
from stragglerlab.injectors.slow_worker import SlowWorker
from stragglerlab.injectors.stage_imbalance import StageImbalance
from stragglerlab.method.p2p_pairs import p2p_pair_latency
from stragglerlab.scenarios.faults import FaultKind
from stragglerlab.util.errors import InputError
from tests.unit.injector_helpers import (
    SLEEP_SLACK_S,
    build,
    compute_trace,
    ctx_for,
    p2p_pair,
    p2p_trace,
    spec,
    target,
    timed,
    trace_of,
)

# --- registry and parameter checks -----------------------------------------------------

VALID = {
    FaultKind.SLOW_WORKER: ({"factor": 2.0}, SlowWorker),
    FaultKind.NET_THROTTLE: ({"rate_mbit": 50}, NetThrottle),
    FaultKind.NET_DELAY: ({"delay_ms": 5}, NetDelay),
    FaultKind.GC_PAUSES: ({"pause_ms": 100, "every_steps": 3}, GcPauses),
    FaultKind.STAGE_IMBALANCE: ({"vocab": 4096}, StageImbalance),
    FaultKind.SEQ_IMBALANCE: ({"mean_seq_len": 48, "longtail_sigma": 1.2}, SeqImbalance),
    FaultKind.HANG: ({}, Hang),
    FaultKind.CRASH: ({}, Crash),
}
NEEDS_TARGETS = {FaultKind.SLOW_WORKER, FaultKind.NET_THROTTLE, FaultKind.NET_DELAY,
                 FaultKind.HANG, FaultKind.CRASH}


def test_registry_has_the_right_class_for_every_kind():
    specs = [spec(kind, [target(0, 1)], **params) for kind, (params, _cls) in VALID.items()]
    injectors = build_injectors(specs, where="test.yaml")
    registry = injector_classes()
    assert set(VALID) == set(FaultKind) == set(registry)
    for inj, s in zip(injectors, specs):
        assert type(inj) is VALID[s.kind][1] and registry[s.kind] is VALID[s.kind][1]
        assert inj.kind is s.kind and inj.spec is s and inj.where == "test.yaml"
    assert build_injectors([]) == []


@pytest.mark.parametrize("kind", sorted(NEEDS_TARGETS, key=lambda k: k.value))
def test_kinds_with_victims_need_targets(kind):
    params, cls = VALID[kind]
    assert cls.needs_targets
    with pytest.raises(InputError, match=f"a {kind.value} fault needs targets") as info:
        build(spec(kind, **params))
    assert info.value.path == "test.yaml"


@pytest.mark.parametrize("kind", sorted(set(FaultKind) - NEEDS_TARGETS, key=lambda k: k.value))
def test_job_wide_kinds_need_no_targets(kind):
    params, cls = VALID[kind]
    inj = build(spec(kind, **params))
    assert type(inj) is cls and not cls.needs_targets
    assert all(inj.applies_to(r) for r in range(8))  # no targets: every rank


def test_applies_to_only_the_victims():
    inj = build(spec(FaultKind.NET_DELAY, [target(1, 0), target(0, 1)], delay_ms=1))
    assert [r for r in range(4) if inj.applies_to(r)] == [1, 2]
    assert NetThrottle.needs_netns and not NetDelay.needs_netns


@pytest.mark.parametrize("kind, params, problem", [
    (FaultKind.SLOW_WORKER, {"factor": 0.5}, "params.factor=0.5 outside"),
    (FaultKind.SLOW_WORKER, {}, "params.factor is required"),
    (FaultKind.SLOW_WORKER, {"factor": 21}, "params.factor=21 outside"),
    (FaultKind.SLOW_WORKER, {"factor": "2"}, "params.factor must be a number"),
    (FaultKind.SLOW_WORKER, {"factor": True}, "params.factor must be a number"),
    (FaultKind.NET_DELAY, {"delay_ms": -1}, "params.delay_ms=-1 outside"),
    (FaultKind.NET_DELAY, {}, "params.delay_ms is required"),
    (FaultKind.NET_THROTTLE, {"rate_mbit": 0}, "params.rate_mbit=0 outside"),
    (FaultKind.NET_THROTTLE, {"rate_mbit": 10, "burst_kb": 1}, "params.burst_kb=1 outside"),
    (FaultKind.GC_PAUSES, {"pause_ms": 0}, "params.pause_ms=0 outside"),
    (FaultKind.GC_PAUSES, {"every_steps": 0}, "params.every_steps=0 outside"),
    (FaultKind.STAGE_IMBALANCE, {"vocab": 4096, "heavy": 1},
     "unknown key(s) in params: heavy; known: implied_by, layers_per_stage, rebalance, vocab"),
    (FaultKind.STAGE_IMBALANCE, {"vocab": 1}, "params.vocab=1 outside"),
    (FaultKind.STAGE_IMBALANCE, {"layers_per_stage": 4}, "params.layers_per_stage must be"),
    (FaultKind.STAGE_IMBALANCE, {"layers_per_stage": ["2", "2"]},
     "params.layers_per_stage must be"),
    (FaultKind.STAGE_IMBALANCE, {"rebalance": "no"}, "params.rebalance must be true or false"),
    (FaultKind.SEQ_IMBALANCE, {"longtail_sigma": 9}, "params.longtail_sigma=9 outside"),
    (FaultKind.SEQ_IMBALANCE, {"mean_seq_len": 0}, "params.mean_seq_len=0 outside"),
    (FaultKind.SEQ_IMBALANCE, {"sigma": 1.0}, "unknown key(s) in params: sigma"),
    (FaultKind.SEQ_IMBALANCE, {"rebalance": 1}, "params.rebalance must be true or false"),
])
def test_bad_params_are_input_errors(kind, params, problem):
    with pytest.raises(InputError) as info:
        build(spec(kind, [target(0, 0)], **params))
    assert problem in str(info.value) and kind.value in str(info.value)
    assert info.value.path == "test.yaml"


def test_requested_is_the_params():
    inj = build(spec(FaultKind.NET_DELAY, [target(0, 0)], delay_ms=5))
    assert inj.requested() == {"delay_ms": 5}
    inj.requested()["delay_ms"] = 9  # a copy
    assert inj.spec.params == {"delay_ms": 5}


# --- base: p2p pairs and compute ratios ------------------------------------------------


def test_p2p_pair_latency_pairs_kth_send_with_kth_peer_recv():
    rows = []
    rows += p2p_pair(3, 0, 0, "forward", 0, 10.0, 9.9, 0.002)    # recv posted first
    rows += p2p_pair(3, 0, 0, "forward", 1, 11.0, 11.5, 0.004)   # send posted first
    rows += p2p_pair(3, 1, 0, "forward", 0, 10.0, 10.0, 0.030)   # other DP rank
    rows += p2p_pair(4, 0, 0, "forward", 0, 20.0, 20.0, 0.050)   # other step
    rows += p2p_pair(3, 0, 1, "backward", 0, 12.0, 12.01, 0.006)
    # Pipeline ends: a send/recv without a peer stage is not a pair.
    rows.append(dict(step=3, dp_rank=0, stage=1, optype="forward-send", start_ts=13.0,
                     duration=0.1, seq_id=0))
    rows.append(dict(step=3, dp_rank=0, stage=0, optype="backward-send", start_ts=13.0,
                     duration=0.1, seq_id=0))
    rows.append(dict(step=3, dp_rank=0, stage=0, optype="forward-compute", start_ts=9.0,
                     duration=0.5, seq_id=0))
    pairs = p2p_pair_latency(trace_of(rows))
    assert list(pairs.columns) == ["step", "dp_rank", "sender_stage", "direction", "seq_id",
                                   "latency_s", "receiver_waiting"]
    got = {(r.step, r.dp_rank, r.sender_stage, r.direction, r.seq_id): r.latency_s
           for r in pairs.itertuples()}
    assert got == pytest.approx({(3, 0, 0, "forward", 0): 0.002, (3, 0, 0, "forward", 1): 0.004,
                                 (3, 1, 0, "forward", 0): 0.030, (4, 0, 0, "forward", 0): 0.050,
                                 (3, 0, 1, "backward", 0): 0.006})


def test_p2p_pair_latency_is_recv_end_minus_latest_start():
    rows = [dict(step=0, dp_rank=0, stage=0, optype="forward-send", start_ts=1.0,
                 duration=0.5, seq_id=0),
            dict(step=0, dp_rank=0, stage=1, optype="forward-recv", start_ts=0.2,
                 duration=1.0, seq_id=0)]  # recv ends at 1.2; the later start is the send's
    pairs = p2p_pair_latency(trace_of(rows))
    assert pairs["latency_s"].tolist() == pytest.approx([0.2])
    assert p2p_pair_latency(trace_of([rows[0]])).empty


def test_compute_ratio_victims_over_same_stage_others_in_window():
    victim = target(1, 0)
    s = spec(FaultKind.SLOW_WORKER, [victim], first=2, last=3, factor=2.0)

    def duration(step, d, stage, kind):
        base = 0.01 if kind == "forward" else 0.02
        if stage == 1:
            return 9 * base  # other stages never count
        slow = (d, stage) == (1, 0) and 2 <= step <= 3
        return base * (2.0 if slow else 1.0) * (1.5 if step == 0 and (d, stage) == (1, 0) else 1)

    trace = compute_trace(duration, steps=range(5))
    assert compute_ratio(trace, s) == pytest.approx(2.0)
    # An earlier window (steps 0-1): the victim is 1.5x slower in step 0 only.
    early = spec(FaultKind.SLOW_WORKER, [victim], first=0, last=1, factor=2.0)
    assert compute_ratio(trace, early) == pytest.approx((1.5 * 0.03 + 0.03) / 0.06)
    nobody_else = trace[~((trace["stage"] == 0) & (trace["dp_rank"] == 0))]
    assert compute_ratio(nobody_else, s) is None
    assert compute_ratio(trace, spec(FaultKind.SLOW_WORKER, [victim], first=7)) is None


# --- slow worker -----------------------------------------------------------------------


def test_quota_for_keeps_the_base_period_when_the_quota_fits():
    assert quota_for(0.5, 4000) == (4000, 2000)
    assert quota_for(1.0, 10_000) == (10_000, 10_000)
    assert quota_for(0.25, 4000) == (4000, 1000)  # exactly the floor
    assert quota_for(2.0, 4000) == (4000, 8000)


def test_quota_for_grows_the_period_below_the_floor():
    period, quota = quota_for(0.1, 4000)
    assert period > 4000 and quota >= MIN_QUOTA_US
    assert quota / period == pytest.approx(0.1, rel=1e-3)
    assert quota_for(0.125, 4000) == (8000, 1000)


@pytest.mark.parametrize("base", [1000, 4000, 10_000, 100_000])
def test_quota_for_always_gives_the_cores(base):
    for cores in np.geomspace(0.01, 8.0, 60):
        period, quota = quota_for(float(cores), base)
        assert isinstance(period, int) and isinstance(quota, int)
        assert period >= base and quota >= MIN_QUOTA_US
        assert quota / period == pytest.approx(cores, rel=2e-3)
        if cores * base >= MIN_QUOTA_US:
            assert period == base


@pytest.fixture
def cgroup(tmp_path: Path) -> dict:
    """A fake cgroup v1 cpu dir holding a rank's 0.5-core share at a 4 ms period."""
    (tmp_path / "cpu.cfs_period_us").write_text("4000")
    (tmp_path / "cpu.cfs_quota_us").write_text("2000")
    return {"cpu_dir": str(tmp_path), "period_us": 4000, "cores": 0.5}


def share(cg: dict) -> tuple[int, int]:
    d = Path(cg["cpu_dir"])
    return int((d / "cpu.cfs_period_us").read_text()), int((d / "cpu.cfs_quota_us").read_text())


@pytest.fixture
def quiet_threads(monkeypatch):
    """The test process's other threads use no CPU (else the overhead term is noise)."""
    monkeypatch.setattr("stragglerlab.injectors.slow_worker._other_threads_cpu_s", lambda tid: 0.0)


@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_slow_worker_divides_the_cgroup_share_in_the_window(cgroup, factor, quiet_threads):
    victim = target(1, 0)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=2, last=3, factor=factor))
    ctx = ctx_for(victim, cgroup=cgroup)
    assert inj.mechanism(ctx) == "cpu-quota"
    inj.on_step_start(ctx, 1)
    assert share(cgroup) == (4000, 2000)
    for step in (2, 3):
        inj.on_step_start(ctx, step)
        period, quota = share(cgroup)
        assert quota / period == pytest.approx(0.5 / factor, rel=1e-3)
        assert quota >= MIN_QUOTA_US and period >= 4000
        assert timed(inj.after_compute, ctx, step, 0.05) < 0.02  # no stretch when isolated
    inj.on_step_start(ctx, 4)  # leaving the window restores the base share
    assert share(cgroup) == (4000, 2000)
    assert not ctx.state["slowed"]


def test_slow_worker_undo_restores_the_share(cgroup, quiet_threads):
    victim = target(0, 1)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=0, factor=4.0))
    ctx = ctx_for(victim, cgroup=cgroup)
    inj.on_step_start(ctx, 0)
    assert share(cgroup) == quota_for(0.125, 4000)
    inj.undo(ctx)
    assert share(cgroup) == (4000, 2000)
    (Path(cgroup["cpu_dir"]) / "cpu.cfs_quota_us").write_text("1234")
    inj.undo(ctx)  # idempotent: nothing slowed, nothing written
    assert share(cgroup) == (4000, 1234)


def test_slow_worker_undo_never_raises_when_the_cgroup_is_gone(cgroup, tmp_path: Path):
    victim = target(0, 0)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], factor=2.0))
    ctx = ctx_for(victim, cgroup=dict(cgroup, cpu_dir=str(tmp_path / "gone")))
    ctx.state["slowed"] = True
    inj.undo(ctx)
    assert not ctx.state["slowed"]


def test_slow_worker_stretch_fallback_without_cgroup():
    victim = target(1, 1)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=1, last=1, factor=3.0))
    ctx = ctx_for(victim)  # ctx.cgroup None: no CPU isolation
    assert inj.mechanism(ctx) == "stretch"
    inj.on_step_start(ctx, 0)
    assert timed(inj.after_compute, ctx, 0, 0.02) < 0.01
    inj.on_step_start(ctx, 1)
    elapsed = timed(inj.after_compute, ctx, 1, 0.02)
    assert 0.04 - 1e-3 <= elapsed < 0.04 + SLEEP_SLACK_S  # (factor - 1) x the compute time
    inj.on_step_start(ctx, 2)
    assert timed(inj.after_compute, ctx, 2, 0.02) < 0.01
    inj.undo(ctx)  # nothing to restore


def test_slow_worker_measure():
    victim = target(0, 1)
    inj = build(spec(FaultKind.SLOW_WORKER, [victim], first=1, factor=2.0))
    trace = compute_trace(lambda step, d, s, kind: 0.02 if (d, s) == (0, 1) and step else 0.01)
    assert inj.measure(trace, {"isolation": {"enabled": True}}) == {"factor": 2.0,
                                                                    "mechanism": "cpu-quota"}
    assert inj.measure(trace, {"isolation": None})["mechanism"] == "stretch"
    rec = inj.record(trace, {}).to_dict()
    assert rec["targets"] == [{"rank": 2, "dp_rank": 0, "stage": 1}]
    assert rec["measured"] == {"factor": 2.0, "mechanism": "stretch"}
    assert rec["requested"] == {"factor": 2.0}


# --- hang, crash, and failed measurements ----------------------------------------------

FAILED_RUN = {"outcome": "failed",
              "error": {"rank": 2, "kind": "timeout", "detected_after_s": 20.5},
              "trace": {"complete_steps": [1, 2, 3, 4]}}


@pytest.mark.parametrize("cls", [Hang, Crash])
def test_failure_faults_report_the_failed_rank(cls):
    inj = build(spec(cls.kind, [target(0, 1)], first=5))
    got = inj.measure(pd.DataFrame(), FAILED_RUN)
    assert got["failed_rank"] == 2 and got["failure_kind"] == "timeout"
    assert got["steps_completed"] == 4
    if cls is Hang:
        assert got["detected_after_s"] == 20.5
    assert inj.measure(pd.DataFrame(), {"outcome": "ok", "error": None}) == dict(
        {"failed_rank": None, "failure_kind": None, "steps_completed": 0},
        **({"detected_after_s": None} if cls is Hang else {}))
    rec = inj.record(compute_trace(lambda *a: 0.01), FAILED_RUN).to_dict()
    assert rec["kind"] == cls.kind.value and rec["first_step"] == 5
    assert rec["targets"] == [{"rank": 2, "dp_rank": 0, "stage": 1}]
    assert rec["measured"]["failed_rank"] == 2
    # failures are measured from run.json, so even a run that traced nothing keeps them
    assert inj.record(pd.DataFrame(), FAILED_RUN).measured == got


def test_hang_and_crash_act_only_at_first_step(monkeypatch):
    calls = []
    monkeypatch.setattr(hang_mod.time, "sleep", lambda s: calls.append(("sleep", s)))
    monkeypatch.setattr(crash_mod.os, "_exit", lambda code: calls.append(("exit", code)))
    victim = target(1, 1)
    hang, crash = (build(spec(k, [victim], first=3)) for k in (FaultKind.HANG, FaultKind.CRASH))
    ctx = ctx_for(victim)
    for step in (1, 2, 4):
        hang.on_step_start(ctx, step)
        crash.on_step_start(ctx, step)
    assert calls == []
    hang.on_step_start(ctx, 3)
    crash.on_step_start(ctx, 3)
    assert calls == [("sleep", hang_mod.HANG_S), ("exit", 17)]
    assert hang_mod.HANG_S >= 3600


def test_record_turns_a_failed_measurement_into_an_error(monkeypatch):
    inj = build(spec(FaultKind.NET_DELAY, [target(0, 0)], first=1, last=4, delay_ms=5))
    rec = inj.record(pd.DataFrame({"step": [1]}), {})  # no optype column
    assert rec.measured == {"error": "KeyError: 'optype'"}
    assert rec.to_dict()["requested"] == {"delay_ms": 5} and rec.last_step == 4

    def boom(trace, run):
        raise RuntimeError("boom")

    monkeypatch.setattr(inj, "measure", boom)
    assert inj.record(p2p_trace(lambda *a: 0.001), {}).measured == {"error": "RuntimeError: boom"}


def _write_parts(run_dir: Path, per_rank_ms: dict[int, float], steps=range(3)) -> None:
    """trace-parts/rank<r>.bin with one forward and one backward of the given duration."""
    from stragglerlab.trace.schema import OpType
    from stragglerlab.workloads.tracer import Tracer

    for rank, ms in per_rank_ms.items():
        tracer = Tracer(run_dir / "trace-parts" / f"rank{rank}.bin")
        for step in steps:
            tracer.begin_step(step)
            for op in (OpType.FORWARD_COMPUTE, OpType.BACKWARD_COMPUTE):
                tracer.record(op, 10.0 * step, 10.0 * step + ms / 1000)
            tracer.end_step()
        tracer.close()


def test_peer_compute_ratio_reads_the_victims_and_peers_flushed_steps(tmp_path: Path):
    from stragglerlab.injectors.slow_worker import _peer_compute_ratio

    _write_parts(tmp_path, {0: 10.0, 1: 25.0})  # stage 0, dp 2: rank 1 is 2.5x slower
    ctx = RankContext(1, 1, 0, run_dir=str(tmp_path), dp_size=2)
    assert _peer_compute_ratio(ctx, before_step=3) == pytest.approx(2.5)
    assert _peer_compute_ratio(ctx, before_step=0) is None  # nothing flushed before step 0
    assert _peer_compute_ratio(RankContext(1, 1, 0, run_dir=str(tmp_path)), 3) is None  # dp 1


def test_slow_worker_steers_its_share_on_the_measured_factor(tmp_path: Path):
    cg_dir = tmp_path / "cg"
    cg_dir.mkdir()
    (cg_dir / "cpu.cfs_period_us").write_text("4000")
    (cg_dir / "cpu.cfs_quota_us").write_text("2000")
    _write_parts(tmp_path, {0: 10.0, 1: 30.0})  # measured 3.0 while 2.0 is asked
    inj = build(spec(FaultKind.SLOW_WORKER, [target(1, 0)], factor=2.0))
    ctx = RankContext(1, 1, 0, cgroup={"cpu_dir": str(cg_dir), "period_us": 4000,
                                       "cores": 0.5}, run_dir=str(tmp_path), dp_size=2)
    inj.on_setup(ctx)
    inj.on_step_start(ctx, 3)
    assert ctx.state["trim"] > 1.0  # too slow: the share grows
    period = int((cg_dir / "cpu.cfs_period_us").read_text())
    quota = int((cg_dir / "cpu.cfs_quota_us").read_text())
    assert 0.25 < quota / period <= 0.5
