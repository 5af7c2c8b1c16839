"""Network injectors: net-delay (in-process delay) and net-throttle (measurement from P2P
pair latencies, and the in-process pacing fallback).

No torch, no Ray, no namespaces: hooks are called directly with a RankContext.
"""

from __future__ import annotations

import pytest

from injectors.crash import Crash
from injectors.gc_pauses import GcPauses
from injectors.hang import Hang
from injectors.net_delay import NetDelay
from injectors.net_throttle import BYTES_PER_FLOAT, NetThrottle
from injectors.registry import REGISTRY, build_injectors
from injectors.seq_imbalance import SeqImbalance
from injectors.slow_worker import SlowWorker
from injectors.stage_imbalance import StageImbalance
from stragglerlab.errors import InputError
from stragglerlab.faults import FaultKind, FaultSpec, Target, parse_faults
from stragglerlab.scenario import load_scenario
from tests.unit.injector_helpers import (
    SLEEP_SLACK_S,
    build,
    ctx_for,
    p2p_trace,
    spec,
    target,
    timed,
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
    assert set(VALID) == set(FaultKind) == set(REGISTRY)
    for inj, s in zip(injectors, specs):
        assert type(inj) is VALID[s.kind][1] and REGISTRY[s.kind] is VALID[s.kind][1]
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
    (FaultKind.STAGE_IMBALANCE, {"vocab": 4096, "heavy": 1}, "unknown params ['heavy']"),
    (FaultKind.STAGE_IMBALANCE, {"vocab": 1}, "params.vocab=1 outside"),
    (FaultKind.STAGE_IMBALANCE, {"layers_per_stage": 4}, "params.layers_per_stage must be"),
    (FaultKind.STAGE_IMBALANCE, {"layers_per_stage": ["2", "2"]},
     "params.layers_per_stage must be"),
    (FaultKind.STAGE_IMBALANCE, {"rebalance": "no"}, "params.rebalance must be true or false"),
    (FaultKind.SEQ_IMBALANCE, {"longtail_sigma": 9}, "params.longtail_sigma=9 outside"),
    (FaultKind.SEQ_IMBALANCE, {"mean_seq_len": 0}, "params.mean_seq_len=0 outside"),
    (FaultKind.SEQ_IMBALANCE, {"sigma": 1.0}, "unknown params ['sigma']"),
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


# --- net delay -------------------------------------------------------------------------


def test_net_delay_sleeps_before_comm_only_in_the_window():
    victim = target(0, 0)
    inj = build(spec(FaultKind.NET_DELAY, [victim], first=2, last=2, delay_ms=30))
    ctx = ctx_for(victim)
    assert timed(inj.before_comm, ctx, 0) < 0.01  # before any step
    inj.on_step_start(ctx, 1)
    assert timed(inj.before_comm, ctx, 1) < 0.01
    inj.on_step_start(ctx, 2)
    elapsed = timed(inj.before_comm, ctx, 2)
    assert 0.03 - 1e-3 <= elapsed < 0.03 + SLEEP_SLACK_S
    inj.on_step_start(ctx, 3)
    assert timed(inj.before_comm, ctx, 3) < 0.01


def test_net_delay_measures_the_victims_added_send_latency():
    victim = target(0, 0)
    inj = build(spec(FaultKind.NET_DELAY, [victim], first=2, delay_ms=5))

    def latency(step, d, sender, direction, k):
        if (d, sender) == (0, 0) and step >= 2:
            return 0.001 + 0.005 + 0.0002 * k  # the victim's sends, in the window
        if (d, sender) == (0, 1):
            return 0.050  # sends *to* the victim: not what net-delay measures
        return 0.001 + 0.0002 * k

    got = inj.measure(p2p_trace(latency), {})
    assert got["delay_ms"] == pytest.approx(5.0, abs=1e-6)
    assert "netem" in got["mechanism"]
    # A window bounded on both sides (steps 0-1, before the delay): nothing added.
    bounded = build(spec(FaultKind.NET_DELAY, [victim], first=0, last=1, delay_ms=5))
    assert bounded.measure(p2p_trace(latency), {})["delay_ms"] == pytest.approx(0.0, abs=1e-6)


def test_net_delay_measure_without_peers_is_none():
    victim = target(0, 0)
    inj = build(spec(FaultKind.NET_DELAY, [victim], delay_ms=5))
    only_victim = p2p_trace(lambda *a: 0.001, dp=1)
    assert inj.measure(only_victim, {})["delay_ms"] is None


# --- net throttle ----------------------------------------------------------------------


def throttle_injector(first=0, last=None, rate=50.0) -> tuple[NetThrottle, Target]:
    sc = load_scenario("net-throttle")
    (s,) = parse_faults(sc.faults, sc.parallel.dp, sc.parallel.pp, sc.run.steps, "t")
    s = FaultSpec(s.kind, s.targets, first, last, dict(s.params, rate_mbit=rate))
    inj = build(s)
    assert inj.shape_scenario(sc) is sc  # not reshaped, only sized
    assert inj.message_bytes == (sc.data.tokens_per_microbatch * sc.model.hidden
                                 * BYTES_PER_FLOAT)
    return inj, s.targets[0]


def test_net_throttle_measures_the_rate_from_pair_latencies():
    inj, victim = throttle_injector(first=1, rate=50.0)
    assert (victim.dp_rank, victim.stage) == (0, 1)
    extra = inj.message_bytes * 8 / 50e6

    def latency(step, d, sender, direction, k):
        base = 0.002 + 0.0001 * k
        # The victim (DP 0, stage 1) sends backward and receives forward: both are throttled.
        return base + extra if d == 0 and step >= 1 else base

    got = inj.measure(p2p_trace(latency), {"network": {"namespaces": True}})
    assert got["rate_mbit"] == pytest.approx(50.0, rel=1e-3)
    assert got["message_bytes"] == inj.message_bytes
    assert got["mechanism"] == "tc-tbf"
    assert got["other_latency_ms"] == pytest.approx(2.05, abs=0.06)
    assert got["victim_latency_ms"] - got["other_latency_ms"] == pytest.approx(1000 * extra,
                                                                               abs=1e-3)
    assert "pacing" in inj.measure(p2p_trace(latency), {})["mechanism"]


def test_net_throttle_measure_when_not_slower_or_unsized():
    inj, _victim = throttle_injector()
    got = inj.measure(p2p_trace(lambda *a: 0.002), {})
    assert got["rate_mbit"] is None and "no slower" in got["note"]
    unsized = build(inj.spec)  # shape_scenario never ran: no message size to divide
    assert unsized.measure(p2p_trace(lambda step, d, *a: 0.01 if d == 0 else 0.002),
                           {})["rate_mbit"] is None


def test_net_throttle_fallback_paces_sends_only_when_throttled_without_netns():
    inj, victim = throttle_injector(first=2, last=2, rate=100.0)
    pace = inj.message_bytes * 8 / 100e6  # ~10.5 ms per message
    ctx = ctx_for(victim)  # ctx.net None: no namespaces, so no tc
    assert timed(inj.before_send, ctx) < 0.005
    inj.on_step_start(ctx, 1)
    assert timed(inj.before_send, ctx) < 0.005
    inj.on_step_start(ctx, 2)
    assert ctx.state["throttled"] and "topology" not in ctx.state
    elapsed = timed(inj.before_send, ctx)
    assert pace - 1e-3 <= elapsed < pace + SLEEP_SLACK_S
    inj.on_step_start(ctx, 3)
    assert not ctx.state["throttled"]
    assert timed(inj.before_send, ctx) < 0.005
    # With namespaces the kernel shapes the traffic: no in-process pacing.
    netns_ctx = ctx_for(victim, net={"run_id": "x", "world": 4})
    netns_ctx.state["throttled"] = True
    assert timed(inj.before_send, netns_ctx) < 0.005
    inj.undo(ctx)
    assert not ctx.state["throttled"]


