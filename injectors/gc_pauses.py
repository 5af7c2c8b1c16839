"""GC pauses: real Python garbage-collector work on the victims, under automatic GC.

The victim keeps a pool of live container objects, sized at start-up so that
one full collection scanning it takes about `pause_ms` on this rank (measured
with the rank's own CPU share) and resized after every full collection it
sees (feedback: the running job's heap and CPU contention differ from
start-up), and churns part of the pool inside every compute op. New
survivors pile up in the oldest generation until CPython's
rule (pending > 25% of all long-lived objects, torch's included) fires a full
collection roughly every `every_steps` steps — at whatever allocation happens then, as in real
training. The engine's GC monitor (gc.callbacks) measures every pause and
writes it to run.json and the trace's `gc_pause_s` column. With planned GC
(run.planned_gc_every, the paper's mitigation) automatic GC is off and the
collections happen together in the `gc` op instead. No targets = every rank.

    - kind: gc-pauses
      params: {pause_ms: 100, every_steps: 3}
"""

from __future__ import annotations

import gc
import time

from stragglerlab.injectors.base import Injector, RankContext
from stragglerlab.scenarios.faults import FaultKind

CALIBRATION_OBJECTS = 100_000
MAX_POOL = 3_000_000
FULL_GC_MARGIN = 1.1  # allocations above the generation thresholds' product, so it is met


def _cyclic(i: int) -> list:
    """A tracked container that only the cycle collector can free once dropped."""
    obj = [i]
    obj.append(obj)
    return obj


def _full_collection_cost(size: int) -> float:
    """Seconds of a full collection over a pool of `size` with a quarter of it churned
    (the state in which CPython's rule fires a full collection)."""
    pool = [_cyclic(i) for i in range(size)]
    gc.collect()
    for i in range(size // 4):
        pool[i] = _cyclic(i)
    t0 = time.perf_counter()
    gc.collect()
    took = time.perf_counter() - t0
    del pool
    gc.collect()
    return took


class GcPauses(Injector):
    """Grow and churn a tracked-object pool so automatic full collections pause the rank."""

    kind = FaultKind.GC_PAUSES
    known_params = frozenset({"pause_ms", "every_steps"})
    needs_targets = False

    def check_params(self) -> None:
        self.pause_s = self.param("pause_ms", 100.0, lo=1.0, hi=5000.0) / 1000.0
        self.every_steps = self.param("every_steps", 3.0, lo=1.0, hi=1000.0)

    def on_setup(self, ctx: RankContext) -> None:
        ctx.state["gc_was"] = (gc.isenabled(), gc.get_threshold())
        size = CALIBRATION_OBJECTS
        for _ in range(3):  # closed loop: the cost per object grows with the heap
            took = _full_collection_cost(size)
            size = int(min(MAX_POOL, max(1000, size * self.pause_s / max(took, 1e-6))))
        ctx.state["pool"] = [_cyclic(i) for i in range(size)]
        gc.collect()  # the pool becomes long-lived: it is what each full collection scans
        # CPython counts every long-lived object (torch's too), not only the pool's.
        ctx.state["others"] = max(0, len(gc.get_objects(generation=2)) - size)
        self._set_churn(ctx, size)
        ctx.state["cursor"] = 0
        ctx.state["pool_objects"] = size
        ctx.state["callback"] = self._watch(ctx)
        gc.callbacks.append(ctx.state["callback"])

    def _set_churn(self, ctx: RankContext, pool_size: int) -> None:
        """Survivors per compute op so that a full collection is due every `every_steps`
        steps. CPython needs both: survivors above 25% of the long-lived objects, and
        threshold0 x threshold1 x threshold2 net allocations (70,000 by default) since the
        last full collection; the larger of the two sets the pace."""
        long_lived = pool_size + ctx.state.get("others", 0)
        t0, t1, t2 = gc.get_threshold()
        per_cycle = max(long_lived / 4, FULL_GC_MARGIN * t0 * max(t1, 1) * max(t2, 1))
        per_step = per_cycle / self.every_steps
        ctx.state["churn"] = max(1, int(per_step / max(1, ctx.compute_ops_per_step)))

    def on_step_start(self, ctx: RankContext, step: int) -> None:
        ctx.state["gc_active"] = self.active(step)
        self._steer(ctx)

    def _steer(self, ctx: RankContext) -> None:
        """Feedback: resize the pool after each observed full collection, because a pause
        in the running job (bigger heap, CPU contention) differs from the start-up one."""
        seen = ctx.state.get("seen_pauses", [])
        if not seen or "pool" not in ctx.state:
            return
        measured = seen[-1]
        seen.clear()
        pool = ctx.state["pool"]
        scale = self.pause_s / measured if measured > 0 else 1.0
        want = int(min(MAX_POOL, max(1000, len(pool) * min(max(scale, 0.5), 2.0))))
        if want < len(pool):
            del pool[want:]
        else:
            pool.extend(_cyclic(i) for i in range(len(pool), want))
        self._set_churn(ctx, want)
        ctx.state["cursor"] %= max(1, want)
        ctx.state["pool_objects"] = want

    def _watch(self, ctx: RankContext):
        """A gc.callbacks hook noting the length of every full collection."""
        t0 = [0.0]

        def callback(phase: str, info: dict) -> None:
            if info.get("generation") != 2:
                return
            if phase == "start":
                t0[0] = time.perf_counter()
            else:
                ctx.state.setdefault("seen_pauses", []).append(time.perf_counter() - t0[0])

        return callback

    def in_compute(self, ctx: RankContext, step: int) -> None:
        if not ctx.state.get("gc_active") or "pool" not in ctx.state:
            return
        pool, n = ctx.state["pool"], ctx.state["churn"]
        start = ctx.state["cursor"]
        for i in range(start, start + n):  # new survivors; the old ones die as cyclic garbage
            pool[i % len(pool)] = _cyclic(i)
        ctx.state["cursor"] = (start + n) % len(pool)

    def undo(self, ctx: RankContext) -> None:
        callback = ctx.state.pop("callback", None)
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
        ctx.state.pop("pool", None)
        was = ctx.state.pop("gc_was", None)
        if was is not None:
            enabled, threshold = was
            gc.set_threshold(*threshold)
            (gc.enable if enabled else gc.disable)()

    def measure(self, trace, run: dict) -> dict:
        pauses = [p for rank, ps in (run.get("gc") or {}).get("pauses", {}).items()
                  for p in ps if p["generation"] == 2 and self.applies_to(int(rank))
                  and self.active(p["step"])]
        if not pauses:
            return {"pause_ms": None, "pauses": 0}
        ms = sorted(1000 * p["duration_s"] for p in pauses)
        # Mean steps between full collections on a rank, over the window's traced steps.
        steps = sum(1 for s in (run.get("step_time_s") or {}) if self.active(int(s)))
        parallel = (run.get("scenario") or {}).get("parallel") or {}
        ranks = len(self.spec.targets) or int(parallel.get("dp", 0)) * int(parallel.get("pp", 0)) \
            or len((run.get("gc") or {}).get("pauses", {}))
        every = steps * ranks / len(ms) if steps else None
        return {"pause_ms": round(sum(ms) / len(ms), 3), "pause_ms_max": round(ms[-1], 3),
                "pauses": len(ms), "every_steps": None if every is None else round(every, 2)}
