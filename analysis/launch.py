"""Launch-delay attribution: the launch-delay counterpart of the blocking decomposition.

The paper's T replays the trace with every launch delay (the untraced CPU
work between an op's dependencies and its start) set to 0; the actual step
time keeps them all. Their ratio is the launch slowdown (simulation
discrepancy). When it is at least 1.03, as for the blocking decomposition,
the artifact attributes it to op types, stages and DP ranks: the no-delay
frame with one group's launch delays put back, simulated, over T:

    launch_by_X[g] = mean T(no-delay + delays of g) / mean T      (per step: the same per step)

    times = launch_decomposition(graph, frame, value, pp_size)   # None below 1.03
    times.by_stage[1] / t_nodelay                                 # per-step ratios

Per-DP-rank attribution needs every DP lane per variant (the no-delay values
differ between ranks, so the two-lane trick of the blocking decomposition
does not apply): dp variants x dp lanes, batched within a memory bound.

By op type, the delay before each stage's pipeline starts (its first forward
compute on the first stage, its first forward recv elsewhere) goes to the
artifact's `first-op` bucket instead of that op's own type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stragglerlab.analysis.frame import OpFrame
from stragglerlab.analysis.graph import DepGraph
from stragglerlab.analysis.simulate import CHUNK_ELEMENTS, simulate
from stragglerlab.trace.schema import OpType

LAUNCH_ATTRIBUTION_MIN = 1.03
"""Launch slowdown from which the decomposition is computed (the artifact's threshold)."""
FIRST_OP = OpType.FIRST_OP.value
"""Bucket of the delays before each stage's pipeline starts (see `first_ops`)."""


@dataclass(kw_only=True)
class LaunchTimes:
    """Simulated step times [n_steps] of the no-delay frame with one group's delays restored."""

    by_optype: dict[str, np.ndarray]
    """Attribution bucket (P2P grouped per direction) -> step times, s."""
    by_stage: dict[int, np.ndarray]
    """Stage -> step times, s."""
    by_dp_rank: dict[int, np.ndarray]
    """DP rank -> step times, s."""


def first_ops(graph: DepGraph) -> np.ndarray:
    """Per stage, the op that starts its pipeline: forward-compute 0 on the first stage,
    forward-recv 0 on the others (indices; a stage without either has none)."""
    out = []
    for p in np.unique(graph.stage):
        kind = OpType.FORWARD_COMPUTE.value if p == 0 else OpType.FORWARD_RECV.value
        hit = np.flatnonzero((graph.stage == p) & (graph.optype == kind) & (graph.seq_id == 0))
        out.extend(hit[:1].tolist())
    return np.array(out, dtype=np.int64)


def launch_decomposition(
    graph: DepGraph, frame: OpFrame, value: np.ndarray, pp_size: int,
    bucket_of: Callable[[str], str], launch_slowdown: float, replayed=None,
) -> LaunchTimes | None:
    """Step times with one group's launch delays restored, or None below the threshold.
    `replayed` (analysis.replays.StepReplays of the same value) runs the replays, e.g.
    split by steps over Ray workers; by default they run here."""
    if not launch_slowdown >= LAUNCH_ATTRIBUTION_MIN:
        return None
    delay = frame.launch_delay
    if replayed is not None:
        replayed.set_delays(delay)  # each part keeps its steps' delays

    def restore(mask: np.ndarray) -> np.ndarray:
        if replayed is not None:
            return replayed.delays_restored(mask)
        return simulate(graph, value, np.where(mask, delay, 0.0)).step_time

    buckets = np.array([bucket_of(t) for t in graph.optype], dtype=object)
    buckets[first_ops(graph)] = FIRST_OP
    by_optype = {b: restore((buckets == b)[:, None, None]) for b in dict.fromkeys(buckets)}
    by_stage = {p: restore((graph.stage == p)[:, None, None]) for p in range(pp_size)}
    by_dp_rank = (restore_each_dp_rank_delays(graph, value, delay) if replayed is None
                  else replayed.each_dp_rank_delays())
    return LaunchTimes(by_optype=by_optype, by_stage=by_stage, by_dp_rank=by_dp_rank)


def restore_each_dp_rank_delays(graph: DepGraph, value: np.ndarray, delay: np.ndarray) -> dict:
    """Step times with DP rank d's delays restored, for every d, as batched simulations."""
    n_nodes, n_steps, dp = value.shape
    chunk = max(1, CHUNK_ELEMENTS // (n_nodes * n_steps * dp))
    times = {}
    for lo in range(0, dp, chunk):
        ranks = np.arange(lo, min(dp, lo + chunk))
        # [node, variant, step, lane]: variant i keeps only lane ranks[i]'s delays.
        keep = np.arange(dp)[None, :] == ranks[:, None]  # [variant, lane]
        d = np.where(keep[None, :, None, :], delay[:, None, :, :], 0.0)
        v = np.broadcast_to(value[:, None], d.shape)
        flat = (n_nodes, len(ranks) * n_steps, dp)
        step = simulate(graph, np.ascontiguousarray(v).reshape(flat), d.reshape(flat)).step_time
        times.update({int(r): step.reshape(len(ranks), n_steps)[i] for i, r in enumerate(ranks)})
    return times
