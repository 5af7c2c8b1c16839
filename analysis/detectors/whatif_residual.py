"""The residual pass of the `whatif` detector: remove what was found, simulate, look again.

A fault beside a larger one hides behind it: the larger one carries the job's S, the
per-step worker scores and its stage's medians, and the first match of the rules names
it alone (the lesser of two faults is the miss this pass exists for). The method's own
answer is the what-if: simulate the job with the stragglers removed (design.md §4).
Here only the faults already found are removed; every other op keeps its traced
duration, transfer and launch delay, and the simulated job, the *residual*, is
diagnosed by the same rules under the same thresholds. What it names that was not named
is a fault of its own. Rounds repeat while one names a new removable fault (at most
`MAX_ROUNDS`).

Removal of a finding, on its ranks and in its steps (`ResidualJob.without`):

* `slow-worker`: the cell's forward and backward compute is divided by its median ratio
  to a reference: the same op on the stage's DP ranks no slow-worker finding names, in
  the same step, or where there are none (pure PP, a whole stage named) the cell's own
  median over the steps outside its slow windows. A ratio under 1 removes nothing. The
  launch delays of its DP rank in those steps are cut to the other DP ranks' median (its
  own outside the window without DP peers): the late posts a slow stage leaves its
  pipeline neighbours go with it.
* `gc-pauses`: the measured pauses (`gc_pause_s`) come out of the ops they fell in, and
  out of every member of a comm group one fell in (a blocking send waits for its paused
  receiver). A pause between two ops is in none: it is the next op's launch delay (the
  rank arrives late at its collective), so each op's launch delay on a paused cell in
  the window is cut to its median over the lane's steps (pauses fall on few steps).
* `net-throttle` / `net-delay`: every comm op of a group on the rank's stage, on its
  DP lane (every lane for a DP-synchronized group), keeps at most that op's median
  transfer and launch delay over the steps outside the finding (over the other lanes in
  them where the finding spans every step).
* `stage-imbalance`, `seq-imbalance`: the job's own shape, not removed (a heavy
  partition is heavy in every what-if); `hang`, `crash`: nothing to simulate.

A residual finding is new (the arbitration decides it, `whatif_arbitration.residual_part`)
where it names a cell (dp_rank, stage) that no removed *estimate* covers and that no
finding names with its cause; it keeps only those cells (a stage-imbalance finding is
kept whole). A slow-worker or link removal is an estimate,
so what it leaves over is its leftovers, not a fault: on a slow worker's own cell, and on
a link's ends, the named rank and every rank it talks to (its DP ring and pipeline
neighbours: a throttle over the whole run has no clean steps to take its DP collective's
transfers from, and stays in the residual's ring); a GC removal takes
out the pauses as measured, so a slow worker beside job-wide GC is named in the residual.
A finding with no ranks (sequence imbalance) is new where no finding has its cause. A
stage or sequence imbalance is read off the balance of stages and microbatches, which an
estimated removal moves (a pure-PP stage scaled back to its own early steps leaves the
other stage heavier by as much as those steps' noise), so the residual names one only
where every removal before it was exact (GC). On a
clean run the first pass names nothing and the residual pass never runs: it cannot raise
the false-finding rate of clean runs.

    extra = residual_findings(run, found, diagnose)   # diagnose: Run -> list[Finding]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglerlab.analysis.detectors.base import Run, named_cells
from stragglerlab.analysis.detectors.whatif_arbitration import residual_part
from stragglerlab.analysis.detectors.whatif_rules import ESTIMATED, LINK_CAUSES
from stragglerlab.analysis.frame import OpFrame, build_frame, comm_mask, row_slots
from stragglerlab.analysis.graph import DepGraph, build_graph
from stragglerlab.analysis.simulate import first_start, simulate
from stragglerlab.run.findings import Finding, RootCause
from stragglerlab.trace.schema import COMPUTE_VALUES
from stragglerlab.trace.trace_table import TraceTable
from stragglerlab.util.errors import InputError

RESIDUAL = " (residual)"
"""Suffix of a residual job's path: its messages and analyses say it is no traced run."""
MAX_ROUNDS = 3
"""Residual rounds at most: each needs a new removable finding from the one before."""

REMOVED = ESTIMATED | {RootCause.GC_PAUSES}
"""Causes the residual job has removed."""


def _cells(f: Finding) -> set[tuple[int, int]]:
    return named_cells([f])


@dataclass(kw_only=True)
class ResidualJob:
    """A run's trace as the simulator's arrays, from which fault-free variants are drawn."""

    run: Run
    """The run analysed."""
    graph: DepGraph
    """Its dependency graph."""
    frame: OpFrame
    """Its trace as [node, step, dp] arrays."""
    slots: np.ndarray
    """Each trace row's flat index into those arrays."""
    gc: np.ndarray
    """[node, step, dp], s: measured GC pauses inside each op."""

    @classmethod
    def of(cls, run: Run) -> ResidualJob:
        """The run's arrays (its graph from the first step of DP rank 0, as the what-if's)."""
        df, meta = run.trace, run.meta
        table = TraceTable.of(df)  # the arrays the graph, the frame and the slots read
        template = table.rows((table["step"] == table["step"].min()) & (table["dp_rank"] == 0))
        graph = build_graph(template, meta, run.path)
        frame = build_frame(table, graph, meta, run.path)
        _, slots = row_slots(table, graph, meta, run.path)
        gc = np.zeros(frame.duration.shape)
        if "gc_pause_s" in df:
            gc.flat[slots] = np.nan_to_num(df["gc_pause_s"].to_numpy(np.float64))
        return cls(run=run, graph=graph, frame=frame, slots=slots, gc=gc)

    def window(self, f: Finding) -> np.ndarray:
        """[steps] bool: the finding's steps."""
        return (self.frame.steps >= f.first_step) & (self.frame.steps <= f.last_step)

    def without(self, findings: list[Finding]) -> pd.DataFrame:
        """The trace of the job simulated with the removable `findings` taken out."""
        value = self.frame.sim_value(self.graph).copy()
        delay = self.frame.launch_delay.copy()
        gc = self.gc.copy()
        for f in findings:
            if f.root_cause is RootCause.GC_PAUSES:
                self._remove_gc(f, value, gc, delay)
        slow = [f for f in findings if f.root_cause is RootCause.SLOW_WORKER]
        for f in slow:
            for d, s in _cells(f):
                self._remove_slow(d, s, self.window(f), slow, value)
                self._cap_launch(d, self.window(f), delay)
        for f in findings:
            if f.root_cause in LINK_CAUSES:
                for d, s in _cells(f):
                    self._remove_link(d, s, self.window(f), value, delay)
        sim = simulate(self.graph, value, delay, keep_times=True)
        n_steps = len(self.frame.steps)
        step_of_row = (self.slots // self.run.meta.dp_size) % n_steps
        offset = first_start(self.frame.start)  # each step's traced start
        out = self.run.trace.copy()
        out["start_ts"] = sim.start.flat[self.slots] + offset[step_of_row]
        out["duration"] = (sim.end - sim.start).flat[self.slots]
        if "gc_pause_s" in out:
            out["gc_pause_s"] = gc.flat[self.slots]
        return out

    def _remove_gc(self, f: Finding, value: np.ndarray, gc: np.ndarray,
                   delay: np.ndarray) -> None:
        w = self.window(f)
        cells = _cells(f) or {(d, s) for d in range(self.run.meta.dp_size)
                              for s in range(self.run.meta.pp_size)}
        pause = np.zeros_like(gc)
        for d, s in cells:
            nodes = np.flatnonzero(self.graph.stage == s)
            pause[np.ix_(nodes, w, [d])] = gc[np.ix_(nodes, w, [d])]
            typical = np.median(delay[nodes, :, d], axis=1)  # [nodes]
            delay[np.ix_(nodes, w, [d])] = np.minimum(delay[np.ix_(nodes, w, [d])],
                                                      typical[:, None, None])
        gc -= pause
        compute = ~comm_mask(self.graph)
        value[compute] = np.maximum(value[compute] - pause[compute], 0.0)
        # A pause inside a comm op holds the whole group: a blocking send waits for its
        # receiver, a collective for its slowest member. So every member of the group
        # gives back the group's longest pause (over the DP ranks too where they sync).
        for g in self.graph.groups:
            if not g.is_comm:
                continue
            members = list(g.members)
            held = pause[members].max(axis=0)  # [steps, dp]
            if g.dp_sync:
                held = held.max(axis=-1, keepdims=True)
            value[members] = np.maximum(value[members] - held, 0.0)

    def _remove_slow(self, d: int, s: int, w: np.ndarray, slow: list[Finding],
                     value: np.ndarray) -> None:
        nodes = np.flatnonzero((self.graph.stage == s) & np.isin(self.graph.optype, COMPUTE_VALUES))
        if not len(nodes) or not w.any():
            return
        named = {c for f in slow for c in _cells(f)}
        peers = [p for p in range(self.run.meta.dp_size) if (p, s) not in named]
        own = value[np.ix_(nodes, w, [d])][..., 0]  # [nodes, window steps]
        if peers:
            ref = np.median(value[np.ix_(nodes, w, peers)], axis=-1)
        else:
            slow_steps = np.zeros_like(w)
            for f in slow:
                if (d, s) in _cells(f):
                    slow_steps |= self.window(f)
            if slow_steps.all():
                return
            ref = np.median(value[np.ix_(nodes, ~slow_steps, [d])][..., 0], axis=1)[:, None]
        ok = ref > 0
        if not ok.any():
            return
        ratio = float(np.median((own / np.where(ok, ref, 1.0))[np.broadcast_to(ok, own.shape)]))
        if ratio > 1.0:
            value[np.ix_(nodes, w, [d])] = own[..., None] / ratio

    def _cap_launch(self, d: int, w: np.ndarray, delay: np.ndarray) -> None:
        """Launch delays on DP lane `d` in the window cut to the other lanes' median: what
        a slow device's pipeline left untraced (its neighbours' late posts) goes with it."""
        others = [p for p in range(self.run.meta.dp_size) if p != d]
        if others:
            ref = np.median(delay[:, w][..., others], axis=-1)
        elif (~w).any():
            ref = np.median(delay[:, ~w, d], axis=1)[:, None]
        else:
            return
        delay[:, w, d] = np.minimum(delay[:, w, d], ref)

    def _remove_link(self, d: int, s: int, w: np.ndarray, value: np.ndarray,
                     delay: np.ndarray) -> None:
        dp = self.run.meta.dp_size
        others = [p for p in range(dp) if p != d]
        for g in self.graph.groups:
            members = list(g.members)
            if not g.is_comm or not (self.graph.stage[members] == s).any():
                continue
            lanes = list(range(dp)) if g.dp_sync else [d]
            for arr in (value, delay):
                if (~w).any():
                    ref = np.median(arr[:, ~w, :][members], axis=(1, 2))
                elif others and not g.dp_sync:
                    ref = np.median(arr[np.ix_(members, w, others)], axis=(1, 2))
                else:
                    continue
                cut = arr[np.ix_(members, w, lanes)]
                arr[np.ix_(members, w, lanes)] = np.minimum(cut, ref[:, None, None])


def residual_findings(run: Run, found: list[Finding],
                      diagnose: Callable[[Run], list[Finding]]) -> list[Finding]:
    """Findings of the residual job (module docstring) that `found` does not hold, each
    with `detail["residual_of"]`: the findings removed before it was seen."""
    removed = [f for f in found if f.root_cause in REMOVED]
    if not removed or run.trace.empty:
        return []
    try:
        job = ResidualJob.of(run)
    except InputError:  # a trace the simulator cannot replay had no first pass either
        return []
    board, extra = list(found), []
    for _ in range(MAX_ROUNDS):
        residual = Run(job.without(removed), run.meta, run.path + RESIDUAL,
                       testbed=run.testbed)
        try:
            candidates = diagnose(residual)
        except InputError:
            break
        new = []
        for f in candidates:
            part = residual_part(f, board + new, removed, run.meta.dp_size)
            if part is not None:
                part.detail = {**part.detail, "residual_of": [
                    {"root_cause": r.root_cause.value,
                     "ranks": [x.rank for x in r.ranks]} for r in removed]}
                new.append(part)
        extra += new
        board += new
        more = [f for f in new if f.root_cause in REMOVED]
        if not more:
            break
        removed += more
    return extra
