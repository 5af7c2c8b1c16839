"""The what-if analysis: simulate the job with stragglers removed and compare (design.md §4.3-4.5).

    result = analyze(df, meta, where="trace.parquet")   # -> stragglerlab.run.results.WhatIfResult

Frames simulated (all with launch delays set to 0 unless said otherwise):

* base      the trace itself (step time straight from the trace);
* no-delay  T: the trace replayed without launch delays;
* ideal     T_ideal: every op replaced by its optype's mean (compute-like) or
            median transfer (communication);
* variants  the ideal with one group's original values put back (per optype,
            DP rank, stage, worker set) and the no-delay frame with one group
            idealized (M_W, M_S "rem").

Per-DP-rank attribution simulates two lanes per variant (the restored rank and
one representative of the identical idealized others), so its cost grows
linearly with dp rather than quadratically.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from stragglerlab.analysis.frame import OpFrame, build_frame, comm_mask
from stragglerlab.analysis.graph import DepGraph, build_graph
from stragglerlab.analysis.launch import launch_decomposition
from stragglerlab.analysis.regime import low_step_note, regime_change
from stragglerlab.analysis.replays import Replays, ReplaysFactory, StepReplays
from stragglerlab.analysis.settling import settling_note
from stragglerlab.analysis.simulate import simulate
from stragglerlab.run.results import LAUNCH_TABLES, FixMetric, StepSeries, WhatIfResult
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import COMMUNICATION_OPS, OpType
from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

TOP_WORKER_PERCENT = 3
"""M_W fixes the top ceil(3% of workers) by worker score."""

_COMM_TYPES = {t.value for t in COMMUNICATION_OPS}
_P2P_GROUP = {
    OpType.FORWARD_SEND.value: "forward-pp-comm",
    OpType.FORWARD_RECV.value: "forward-pp-comm",
    OpType.BACKWARD_SEND.value: "backward-pp-comm",
    OpType.BACKWARD_RECV.value: "backward-pp-comm",
}

Progress = Callable[[str], None]


def attribution_type(optype: str) -> str:
    """Attribution bucket of an optype: P2P grouped per direction, others as is."""
    return _P2P_GROUP.get(optype, optype)


class ComputeIdeal(str, enum.Enum):
    """Statistic that idealizes compute-like ops."""

    MEAN = "mean"  # the paper's and artifact's choice (the default)
    MEDIAN = "median"  # robust when few workers: one straggler among 4 moves the mean a lot


def ideal_values(graph: DepGraph, frame: OpFrame, value: np.ndarray,
                 compute_ideal: ComputeIdeal = ComputeIdeal.MEAN) -> np.ndarray:
    """Per node: mean (or median) duration of its optype (compute-like) or median transfer
    (communication)."""
    return _ideal_of(graph, frame.duration, value, compute_ideal)


def _ideal_of(graph: DepGraph, duration: np.ndarray, value: np.ndarray,
              compute_ideal: ComputeIdeal) -> np.ndarray:
    """ideal_values over the steps `duration` and `value` ([node, step, dp]) hold."""
    ideal = np.empty(graph.n_nodes)
    for t in np.unique(graph.optype):
        nodes = graph.optype == t
        if t in _COMM_TYPES:
            ideal[nodes] = np.median(value[nodes])
        elif compute_ideal is ComputeIdeal.MEDIAN:
            ideal[nodes] = np.median(duration[nodes])
        else:
            ideal[nodes] = duration[nodes].mean()
    return ideal


def windowed_ideal(graph: DepGraph, frame: OpFrame, value: np.ndarray,
                   t_nodelay: np.ndarray, window: int,
                   compute_ideal: ComputeIdeal = ComputeIdeal.MEAN) -> list[dict]:
    """The ideal within windows of `window` consecutive steps (`whatif --ideal-window`):
    each window's ops idealized over that window's steps only, so a job that changes
    regime within its trace is held against an ideal of its own regime. Per window: its
    steps, S (mean simulated step over its ideal step), the ideal step in s and per-step S.
    The paper's cross-step ideal stays the result; this is beside it."""
    steps = [int(s) for s in frame.steps]
    out = []
    for a in range(0, len(steps), window):
        sel = slice(a, min(a + window, len(steps)))
        ideal = _ideal_of(graph, frame.duration[:, sel, :], value[:, sel, :], compute_ideal)
        t_ideal = float(simulate(graph, ideal[:, None, None]).step_time[0])
        t = t_nodelay[sel]
        out.append({"first_step": steps[sel][0], "last_step": steps[sel][-1],
                    "slowdown": float(t.mean() / t_ideal), "step_time_ideal_s": t_ideal,
                    "step_slowdown": {str(s): float(v / t_ideal)
                                      for s, v in zip(steps[sel], t)}})
    return out


def windows_note(windows: list[dict], window: int) -> str:
    """One line of the notes for `windowed_ideal`'s windows."""
    parts = [f"steps {w['first_step']}-{w['last_step']} S {w['slowdown']:.3f}"
             for w in windows]
    return (f"ideal within windows of {window} steps (--ideal-window; the cross-step ideal "
            "stays the result): " + ", ".join(parts))


@dataclass
class WhatIfRun:
    """A finished analysis with the intermediate state other outputs need."""

    graph: DepGraph
    """The dependency graph."""
    frame: OpFrame
    """The trace as arrays."""
    ideal: np.ndarray
    """Per node: its ideal duration / transfer duration, s."""
    result: WhatIfResult
    """The metrics."""


def analyze(
    df: pd.DataFrame, meta: JobMeta, where: str, progress: Progress | None = None,
    compute_ideal: ComputeIdeal = ComputeIdeal.MEAN,
) -> WhatIfResult:
    """Run the full what-if analysis of one trace and return its metrics."""
    return run_whatif(df, meta, where, progress, compute_ideal).result


MAX_DISCREPANCY = 2.0
"""Traced over simulated step time (or its inverse) past which the trace is refused: the
simulation replays the trace's own durations on its dependencies, so a factor of 2 is
no noise (the artifact's samples, the differential traces and testbed runs: <= 1.06)."""


def _one_run(discrepancy: float, where: str) -> None:
    """InputError when the traced step time is MAX_DISCREPANCY x off the simulated one."""
    if not 1 / MAX_DISCREPANCY <= discrepancy <= MAX_DISCREPANCY:
        raise InputError(
            f"the traced step time is {discrepancy:.3g}x the one simulated from the same "
            "trace's durations and dependencies (sim. discrepancy "
            f"{100 * (discrepancy - 1):+.0f}%; real traces stay within a few percent, the "
            "paper drops jobs above 5%): the trace's times do not describe one run (a "
            "rank's clock offset, corrupted start_ts or durations); fix the trace", where)


def _graph_and_frame(df: pd.DataFrame | TraceTable, meta: JobMeta, where: str,
                     say: Progress) -> tuple[DepGraph, OpFrame]:
    df = TraceTable.of(df)
    template = df.rows((df["step"] == df["step"].min()) & (df["dp_rank"] == 0))
    graph = build_graph(template, meta, where)
    say(f"graph: {graph.n_nodes} ops per worker-step, {len(graph.groups)} groups")
    frame = build_frame(df, graph, meta, where)
    say(f"frame: {len(frame.steps)} steps x {meta.dp_size} DP ranks x {meta.pp_size} stages")
    return graph, frame


def simulation_discrepancy(df: pd.DataFrame | TraceTable, meta: JobMeta, where: str) -> float:
    """Traced over simulated step time, minus 1, with the trace's own durations: the
    number the reproduction gate reads (run_whatif's `simulation_discrepancy` - 1),
    without the ideal's replays."""
    graph, frame = _graph_and_frame(df, meta, where, lambda _msg: None)
    t_nodelay = Replays(graph, frame.sim_value(graph)).nodelay()
    return float(frame.step_span().mean() / t_nodelay.mean()) - 1.0


def run_whatif(
    df: pd.DataFrame | TraceTable, meta: JobMeta, where: str, progress: Progress | None = None,
    compute_ideal: ComputeIdeal = ComputeIdeal.MEAN,
    other_ideals: Iterable[ComputeIdeal] = (),
    replays: ReplaysFactory = Replays,
    ideal_window: int | None = None,
) -> WhatIfRun:
    """Run the full what-if analysis of one trace (compute_ideal: see ComputeIdeal).

    The graph and frame are built once; each of `other_ideals` is evaluated on
    them too and lands in `result.variants` (what `stragglerlab whatif` writes
    into whatif.json, so nothing downstream re-analyses the trace). `replays`
    runs the replays (analysis.replays: in this process, or split by steps over
    Ray workers by stragglerlab.whatif_ray, bit for bit the same). `ideal_window`: also
    idealize within windows of that many steps (`windowed_ideal`, result.ideal_windows).
    """
    say = progress or (lambda _msg: None)
    graph, frame = _graph_and_frame(df, meta, where, say)
    value = frame.sim_value(graph)
    t_base = frame.step_span()
    replayed = replays(graph, value)
    t_nodelay = replayed.nodelay()
    say("simulated base and no-delay frames")
    correlation = _fwd_bwd_correlation(graph, frame)
    excess = comm_excess_by_worker(graph, frame, slice(None))
    ideal, result = _evaluate(graph, frame, meta, value, t_base, t_nodelay, compute_ideal, say,
                              replayed)
    # After _evaluate: its no-measurable-step error is clearer, and t_nodelay is > 0.
    _one_run(result.simulation_discrepancy, where)
    for other in dict.fromkeys(ComputeIdeal(o) for o in other_ideals):
        if other is not compute_ideal:
            result.variants[other.value] = _evaluate(graph, frame, meta, value, t_base,
                                                     t_nodelay, other, say, replayed)[1]
    launch = launch_decomposition(graph, frame, value, meta.pp_size, attribution_type,
                                  result.simulation_discrepancy, replayed)
    if launch is not None:
        say("attributed launch delays")
    steps = [int(s) for s in frame.steps]
    launch_by = None if launch is None else {
        name: {k: StepSeries(steps, v) for k, v in getattr(launch, f"by_{name}").items()}
        for name in LAUNCH_TABLES}
    settling = settling_note(steps, t_base)
    regime = _regime(df, steps, t_base, settling)
    for r in (result, *result.variants.values()):
        r.notes += [settling] if settling else []
        r.regime_change = None if regime is None else regime.to_dict()
        slow = list(r.step_slowdown().values())
        r.notes += [n for n in (regime.note(steps, slow) if regime else None,
                                low_step_note(steps, slow, regime)) if n]
        r.launch_by = launch_by
        r.fwd_bwd_correlation = correlation
        r.comm_excess_by_worker = excess
        r.n_ops = len(df)
    if ideal_window is not None:
        result.ideal_windows = windowed_ideal(graph, frame, value, t_nodelay, ideal_window,
                                              compute_ideal)
        result.notes.append(windows_note(result.ideal_windows, ideal_window))
        say(f"idealized within windows of {ideal_window} steps")
    return WhatIfRun(graph, frame, ideal, result)


def _regime(df: pd.DataFrame | TraceTable, steps: list[int], t_base: np.ndarray,
            settling: str | None):
    """The trace's regime change (analysis.regime), None when none; leading steps that are
    settling are that, not a regime. Per-kind times are summed only when there is one
    (with pandas: a table is read_trace's frame again)."""
    rc = regime_change(steps, t_base)
    if rc is None or (settling and rc.ratio < 1):
        return None
    if isinstance(df, TraceTable):
        df = df.to_frame()
    kt = df.groupby(["step", "rank", "optype"], observed=True)["duration"].sum()
    return regime_change(steps, t_base, kt.rename("time_s").reset_index().rename(
        columns={"optype": "kind"}))


def _evaluate(graph: DepGraph, frame: OpFrame, meta: JobMeta, value: np.ndarray,
              t_base: np.ndarray, t_nodelay: np.ndarray, compute_ideal: ComputeIdeal,
              say: Progress, replayed: StepReplays) -> tuple[np.ndarray, WhatIfResult]:
    """Ideal, attributions, worker scores, M_W and M_S of one compute ideal."""
    n_steps, dp = len(frame.steps), meta.dp_size
    ideal = ideal_values(graph, frame, value, compute_ideal)
    t_ideal_scalar = float(simulate(graph, ideal[:, None, None]).step_time[0])
    if not (math.isfinite(t_ideal_scalar) and t_ideal_scalar > 0) or not (
            t_nodelay > 0).all():
        # Durations too small to move the clock (denormals, ns on a clock counted in days).
        raise InputError(
            f"the simulated step takes {t_ideal_scalar:.3g} s ideal and "
            f"{float(t_nodelay.min()):.3g} s at its shortest: the op durations do not add up "
            "to a measurable step, so no slowdown can be formed; durations are seconds "
            "(a trace in µs or ns must be converted)")
    t_ideal = np.full(n_steps, t_ideal_scalar)
    say(f"simulated the ideal ({compute_ideal.value} compute)")

    slowdown = t_nodelay.mean() / t_ideal_scalar

    def restore(mask: np.ndarray) -> np.ndarray:
        """Ideal with the masked ops' original values, step times [n_steps]."""
        return replayed.mixed(ideal, mask, keep_original=True)

    by_optype: dict[str, np.ndarray] = {}
    # Each node's bucket, as the bucket's index in order of first appearance (the order
    # the attributions are listed in): one look-up per distinct optype, not per node.
    types, first, type_of = np.unique(graph.optype.astype(str), return_index=True,
                                      return_inverse=True)
    buckets = list(dict.fromkeys(attribution_type(str(types[i])) for i in np.argsort(first)))
    bucket_of = np.array([buckets.index(attribution_type(str(t))) for t in types],
                         dtype=np.int64)[type_of.ravel()]
    for i, bucket in enumerate(buckets):
        by_optype[bucket] = restore((bucket_of == i)[:, None, None])
    say(f"attributed to {len(by_optype)} op types")
    by_stage = {p: restore((graph.stage == p)[:, None, None]) for p in range(meta.pp_size)}
    say(f"attributed to {meta.pp_size} stages")
    by_dp = replayed.each_dp_rank(ideal)
    say(f"attributed to {dp} DP ranks")

    s_dp = np.array([by_dp[d].mean() for d in range(dp)]) / t_ideal_scalar
    s_stage = np.array([by_stage[p].mean() for p in range(meta.pp_size)]) / t_ideal_scalar
    worker_score = np.minimum(s_stage[:, None], s_dp[None, :])  # [pp, dp]

    t_ori = float(t_nodelay.mean())
    n_top = math.ceil(TOP_WORKER_PERCENT * meta.pp_size * dp / 100)
    order = np.lexsort((frame.worker_rank.ravel(), -worker_score.ravel()))[:n_top]
    top_workers = [(int(i % dp), int(i // dp)) for i in order]  # (dp_rank, stage)
    worker_mask = np.zeros((graph.n_nodes, 1, dp), dtype=bool)
    for d, p in top_workers:
        worker_mask[graph.stage == p, 0, d] = True
    m_w = _fix_metric(replayed, ideal, worker_mask, t_ori, t_ideal_scalar)
    if meta.pp_size > 1:
        stage_mask = (graph.stage == meta.pp_size - 1)[:, None, None]
        m_s = _fix_metric(replayed, ideal, stage_mask, t_ori, t_ideal_scalar)
    else:
        m_s = FixMetric(t_ori, t_ideal_scalar, t_ori, t_ideal_scalar, 0.0, 0.0)
    say("computed M_W and M_S")

    steps = [int(s) for s in frame.steps]
    result = WhatIfResult(
        job_meta=meta,
        steps=steps,
        step_time_base=StepSeries(steps, t_base),
        step_time_nodelay=StepSeries(steps, t_nodelay),
        step_time_ideal=StepSeries(steps, t_ideal),
        slowdown=float(slowdown),
        simulation_discrepancy=float(t_base.mean() / t_nodelay.mean()),
        by_optype={k: StepSeries(steps, v) for k, v in by_optype.items()},
        by_dp_rank={d: StepSeries(steps, v) for d, v in by_dp.items()},
        by_stage={p: StepSeries(steps, v) for p, v in by_stage.items()},
        worker_score=worker_score,
        top_workers=top_workers,
        m_w=m_w,
        m_s=m_s,
        fwd_bwd_correlation=None,
        n_ops=0,
        compute_ideal=compute_ideal.value,
    )
    return ideal, result


def comm_excess_by_worker(graph: DepGraph, frame: OpFrame, window: slice) -> np.ndarray:
    """Per worker, summed transfer time over its op type's median, in its comm ops, [pp, dp], s.

    A slow link slows every group its rank is in (its P2P pairs, its stage's DP
    collectives, the embedding and clip all-reduces), so its rank collects the
    most excess; a peer shares only some of those groups. Written to
    whatif.json (`comm_excess_by_worker_s`) for the `whatif` detector.
    """
    comm = comm_mask(graph) & ~(graph.noop if graph.noop is not None else False)
    transfer = frame.transfer[:, window, :]
    excess = np.zeros((int(graph.stage.max()) + 1, transfer.shape[2]))
    for optype in np.unique(graph.optype[comm]):
        nodes = np.flatnonzero(comm & (graph.optype == optype))
        values = transfer[nodes]  # [nodes, steps, dp]
        over = np.clip(values - np.median(values), 0.0, None).sum(axis=1)  # [nodes, dp]
        np.add.at(excess, graph.stage[nodes], over)
    return excess


def ideal_timeline(run: WhatIfRun) -> pd.DataFrame:
    """Simulated op times of the ideal step on every worker (same for every step)."""
    import pandas as pd  # a timeline's frame: only when one is asked for

    graph, dp = run.graph, run.frame.start.shape[2]
    value = np.broadcast_to(run.ideal[:, None, None], (graph.n_nodes, 1, dp))
    sim = simulate(graph, np.ascontiguousarray(value), keep_times=True)
    start, end = sim.start[:, 0, :], sim.end[:, 0, :]  # [node, dp]
    n = graph.n_nodes
    return pd.DataFrame({
        "dp_rank": np.tile(np.arange(dp), n),
        "stage": np.repeat(graph.stage, dp),
        "step": int(run.frame.steps[0]),
        "optype": np.repeat(graph.optype, dp),
        "start_ts": start.ravel(),
        "duration": (end - start).ravel(),
        "seq_id": np.repeat(graph.seq_id, dp),
        "mb_id": np.repeat(graph.mb_id, dp),
    })


def _fix_metric(replayed: StepReplays, ideal: np.ndarray, mask: np.ndarray, t_ori: float,
                t_ideal: float) -> FixMetric:
    """M = (T - T_rem)/(T - T_ideal) with its 'add' counterpart, for the masked ops."""
    t_rem = float(replayed.mixed(ideal, mask, keep_original=False).mean())
    t_add = float(replayed.mixed(ideal, mask, keep_original=True).mean())
    gap = t_ori - t_ideal
    rem = (t_ori - t_rem) / gap if gap != 0 else 0.0
    add = (t_add - t_ideal) / gap if gap != 0 else 0.0
    return FixMetric(t_ori, t_ideal, t_rem, t_add, rem, add)


def _fwd_bwd_correlation(graph: DepGraph, frame: OpFrame) -> float | None:
    """Pearson correlation of forward vs backward compute durations of the same microbatch.

    Taken on residuals within each worker-step (each duration minus the mean
    of the worker's ops of that kind in that step): a slow stage, a slow worker
    or a slow step, even a worker slow only from some step on, makes all its
    microbatches slow alike, so only the sequence-length signature (individual
    microbatches slow in both passes) remains.
    """
    fwd = np.flatnonzero(graph.optype == OpType.FORWARD_COMPUTE.value)
    bwd = np.flatnonzero(graph.optype == OpType.BACKWARD_COMPUTE.value)
    if len(fwd) == 0 or len(fwd) != len(bwd):
        return None
    # Same (stage, seq_id) order on both sides pairs each microbatch's fwd with its bwd.
    fwd = fwd[np.lexsort((graph.seq_id[fwd], graph.stage[fwd]))]
    bwd = bwd[np.lexsort((graph.seq_id[bwd], graph.stage[bwd]))]
    x, y = frame.duration[fwd], frame.duration[bwd]  # [op, step, dp]
    stage = graph.stage[fwd]
    x, y = _worker_step_residual(x, stage).ravel(), _worker_step_residual(y, stage).ravel()
    if x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _worker_step_residual(values: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """values [op, step, dp] minus the mean of the same stage's ops in that (step, dp)."""
    out = np.empty_like(values)
    for p in np.unique(stage):
        sub = values[stage == p]
        out[stage == p] = sub - sub.mean(axis=0, keepdims=True)
    return out
