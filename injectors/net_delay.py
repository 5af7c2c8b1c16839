"""Network delay: added latency on the victim's P2P and collectives.

`netem` would add it in the kernel, but these machines' kernel has no netem,
so this is the named in-process fallback: the victim waits `delay_ms` before
posting each P2P send, and inside each traced collective before calling it, so
data it sends arrives `delay_ms` later and its peers' transfer time grows by
that much (as under netem; a wait before the traced op would instead look like
untraced launch delay, which the what-if model sets to zero).
Measured: the median latency of P2P pairs the victim sends (recv end minus
the later of the pair's two starts) minus that of the same stage's other DP
ranks, inside the window, over pairs whose receiver was already waiting (for
the others the receiver's own lateness hides part of the delay).

    - kind: net-delay
      targets: [{dp_rank: 0, stage: 0}]
      params: {delay_ms: 5}
"""

from __future__ import annotations

import time

import pandas as pd

from stragglerlab.faults import FaultKind
from stragglerlab.injectors.base import Injector, RankContext
from stragglerlab.p2p_pairs import p2p_pair_latency

MECHANISM = "in-process delay (this kernel has no netem)"


class NetDelay(Injector):
    """Sleep delay_ms before each of the victim's P2P posts and collectives."""

    kind = FaultKind.NET_DELAY

    def check_params(self) -> None:
        self.delay_s = self.param("delay_ms", lo=0.0, hi=10_000.0) / 1000.0

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        ctx.state["delay_active"] = self.active(step)

    def before_comm(self, ctx: RankContext, step: int) -> None:
        if ctx.state.get("delay_active"):
            time.sleep(self.delay_s)

    def measure(self, trace, run: dict) -> dict:
        pairs = p2p_pair_latency(trace)
        pairs = pairs[(pairs["step"] >= self.spec.first_step) & (
            pairs["step"] <= (self.spec.last_step if self.spec.last_step is not None
                              else pairs["step"].max()))]
        # Only pairs whose receiver already waited show the whole added latency.
        pairs = pairs[pairs["receiver_waiting"]]
        victim = pd.Series(False, index=pairs.index)
        same_stage = pd.Series(False, index=pairs.index)
        for t in self.spec.targets:
            victim |= (pairs["dp_rank"] == t.dp_rank) & (pairs["sender_stage"] == t.stage)
            same_stage |= pairs["sender_stage"] == t.stage
        if not victim.any() or not (same_stage & ~victim).any():
            return {"delay_ms": None, "mechanism": MECHANISM}
        added = pairs.loc[victim, "latency_s"].median() - \
            pairs.loc[same_stage & ~victim, "latency_s"].median()
        return {"delay_ms": round(1000 * float(added), 3), "mechanism": MECHANISM}
