"""Network injectors: net-delay (in-process delay) and net-throttle (measurement from P2P
pair latencies, and the in-process pacing fallback).

No torch, no Ray, no namespaces: hooks are called directly with a RankContext.
"""

from __future__ import annotations

import pytest

from stragglerlab.injectors.net_throttle import BYTES_PER_FLOAT, NetThrottle
from stragglerlab.scenarios.faults import FaultKind, FaultSpec, Target, parse_faults
from stragglerlab.scenarios.scenario import load_scenario
from tests.unit.injector_helpers import (
    SLEEP_SLACK_S,
    build,
    ctx_for,
    p2p_trace,
    spec,
    target,
    timed,
)

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


def test_net_delay_in_pure_dp_is_measured_as_the_victims_late_arrival():
    """Without PP the victim's wait before each collective shows as late starts."""
    from stragglerlab.workloads.synthetic import SyntheticConfig, synthesize_trace

    df, _ = synthesize_trace(SyntheticConfig(dp_size=4, pp_size=1, n_steps=6))
    victim = target(2, 0)
    late = (df["rank"] == victim.rank) & df["optype"].astype(str).isin(
        ["params-all-gather", "grads-reduce-scatter", "optimizer-clip-main-grad"])
    df.loc[late & (df["step"] >= 3), "start_ts"] += 0.020
    inj = build(spec(FaultKind.NET_DELAY, [victim], first=3, delay_ms=20))
    got = inj.measure(df, {})
    assert got["arrival_ms"] == pytest.approx(20.0, abs=1.0)
    assert "before collectives" in got["mechanism"]


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


