"""Network throttling: the victim's link really gets slower (tc token bucket on its veth).

Real path (root + iproute2): the launcher gives every rank its own network
namespace joined by a bridge (injectors.netns), gloo runs over those veths,
and during the step window the victim's veth is rate-limited with `tc tbf`
in both directions. Named fallback where namespaces cannot be made: an
in-process pacing delay of bytes / rate before each of the victim's P2P sends.
Measured: the victim's P2P throughput in the window: message bytes over the
extra time its pairs take, i.e. the median pair latency of the victim minus
that of the other, unthrottled workers (which is the fixed per-message cost
of gloo and scheduling, paid by every pair alike).

    - kind: net-throttle
      targets: [{dp_rank: 0, stage: 1}]
      params: {rate_mbit: 50}
"""

from __future__ import annotations

import time

import numpy as np

from stragglerlab.injectors.base import Injector, RankContext
from stragglerlab.method.p2p_pairs import p2p_pair_latency, receiver_stage
from stragglerlab.scenarios.faults import FaultKind

BYTES_PER_FLOAT = 4


class NetThrottle(Injector):
    """tc tbf on the victim's veth during the window (in-process pacing as fallback)."""

    kind = FaultKind.NET_THROTTLE
    known_params = frozenset({"rate_mbit", "burst_kb"})
    needs_netns = True

    def check_params(self) -> None:
        self.rate_mbit = self.param("rate_mbit", lo=0.1, hi=100_000.0)
        # Small bucket: the first burst_kb of each message pass at full speed.
        self.burst_kb = int(self.param("burst_kb", 4.0, lo=2.0, hi=10_000.0))
        self.message_bytes = 0

    def shape_scenario(self, scenario):
        self.message_bytes = (scenario.data.tokens_per_microbatch * scenario.model.hidden
                              * BYTES_PER_FLOAT)
        return scenario

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        want = self.active(step)
        if want == ctx.state.get("throttled", False):
            return
        ctx.state["throttled"] = want
        topo = ctx.state.get("topology") or self._topology(ctx)
        if topo is None:
            return  # fallback: before_comm paces the sends
        if want:
            topo.throttle(ctx.rank, self.rate_mbit, burst_kb=self.burst_kb)
        else:
            topo.unthrottle(ctx.rank)

    def _topology(self, ctx: RankContext):
        if not ctx.net:
            return None
        from stragglerlab.host.netns import NetTopology

        ctx.state["topology"] = NetTopology(ctx.net["run_id"], ctx.net["world"])
        return ctx.state["topology"]

    def before_send(self, ctx: RankContext) -> None:
        """Fallback pacing of one activation/gradient message."""
        if not ctx.net and ctx.state.get("throttled") and self.message_bytes:
            time.sleep(self.message_bytes * 8 / (self.rate_mbit * 1e6))

    def undo(self, ctx: RankContext) -> None:
        topo = ctx.state.get("topology")
        if topo is not None and ctx.state.get("throttled"):
            try:
                topo.unthrottle(ctx.rank)
            except Exception:  # noqa: BLE001, S110 - the namespaces may be gone already
                pass
        ctx.state["throttled"] = False

    def measure(self, trace, run: dict) -> dict:
        mech = "tc-tbf" if (run.get("network") or {}).get("namespaces") else \
            "in-process pacing (no network namespaces)"
        pairs = p2p_pair_latency(trace)
        last = self.spec.last_step if self.spec.last_step is not None else pairs["step"].max()
        pairs = pairs[(pairs["step"] >= self.spec.first_step) & (pairs["step"] <= last)]
        mine = np.zeros(len(pairs), dtype=bool)
        for t in self.spec.targets:
            sent = (pairs["dp_rank"] == t.dp_rank) & (pairs["sender_stage"] == t.stage)
            received = (pairs["dp_rank"] == t.dp_rank) & (receiver_stage(pairs) == t.stage)
            mine |= (sent | received).to_numpy()
        victim = pairs.loc[mine, "latency_s"].to_numpy()
        others = pairs.loc[~mine, "latency_s"].to_numpy()
        if not len(victim) or not len(others) or not self.message_bytes:
            return {"rate_mbit": None, "mechanism": mech}
        extra = float(np.median(victim) - np.median(others))
        if extra <= 0:
            return {"rate_mbit": None, "mechanism": mech, "note": "no slower than the others"}
        rate = self.message_bytes * 8 / extra / 1e6
        return {"rate_mbit": round(rate, 3), "message_bytes": self.message_bytes,
                "victim_latency_ms": round(1000 * float(np.median(victim)), 3),
                "other_latency_ms": round(1000 * float(np.median(others)), 3),
                "mechanism": mech}
