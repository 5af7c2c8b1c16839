"""Network delay: added latency on the victim's P2P and collectives.

`netem` would add it in the kernel, but these machines' kernel has no netem,
so this is the named in-process fallback, placed where a real delay shows:

* P2P: the victim waits `delay_ms` on its poster thread before each send, inside
  the traced send, so the data arrives `delay_ms` later and the pair's transfer
  time grows by that much, as under netem;
* collectives: the victim waits before each traced collective, outside it, so it
  arrives late and its peers wait for it inside theirs (the last arrival is the
  victim, as when its data comes in late). Not inside the traced collective: a
  wait there lengthens every rank's collective alike, and in pure DP no trace can
  place it (records of that mechanism read as unobservable,
  analysis/fault_observability.py).

What each layout reveals: with PP, the victim's slow P2P pairs (the `whatif`
link rules); in pure DP, only its late arrival at every collective (last-arrival
style signals; the what-if takes the wait as untraced launch delay).
Measured: with PP, the median latency of P2P pairs the victim sends (recv end
minus the later of the pair's two starts) minus that of the same stage's other
DP ranks, inside the window, over pairs whose receiver was already waiting (for
the others the receiver's own lateness hides part of the delay); without, the
median lateness of the victim's collective starts behind the median rank's.

    - kind: net-delay
      targets: [{dp_rank: 0, stage: 0}]
      params: {delay_ms: 5}
"""

from __future__ import annotations

import time

import pandas as pd

from stragglerlab.injectors.base import Injector, RankContext, window
from stragglerlab.method.p2p_pairs import p2p_pair_latency
from stragglerlab.scenarios.faults import FaultKind

MECHANISM = ("in-process delay: inside P2P sends, before collectives "
             "(this kernel has no netem)")


class NetDelay(Injector):
    """Sleep delay_ms before each of the victim's P2P sends and collectives."""

    kind = FaultKind.NET_DELAY
    known_params = frozenset({"delay_ms"})

    def check_params(self) -> None:
        self.delay_s = self.param("delay_ms", lo=0.0, hi=10_000.0) / 1000.0

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        ctx.state["delay_active"] = self.active(step)

    def before_comm(self, ctx: RankContext, step: int) -> None:
        if ctx.state.get("delay_active"):
            time.sleep(self.delay_s)

    def measure(self, trace, run: dict) -> dict:
        if "stage" in trace and trace["stage"].nunique() < 2:
            return {"arrival_ms": self._arrival_ms(trace), "mechanism": MECHANISM}
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

    def _arrival_ms(self, trace: pd.DataFrame) -> float | None:
        """Median lateness of the victims' collective starts behind the median rank's, ms."""
        coll = trace[trace["optype"].astype(str).isin(_COLLECTIVES) & window(trace, self.spec)]
        if coll.empty:
            return None
        keys = ["step", "optype", "seq_id"]
        median = coll.groupby(keys, observed=True)["start_ts"].transform("median")
        victim = coll["rank"].isin([t.rank for t in self.spec.targets])
        late = (coll["start_ts"] - median)[victim]
        return None if late.empty else round(1000 * float(late.median()), 3)


_COLLECTIVES = ("params-all-gather", "grads-reduce-scatter", "optimizer-clip-main-grad")
