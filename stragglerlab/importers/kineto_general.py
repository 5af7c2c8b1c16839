"""The general op model from unannotated per-rank Kineto traces (no record_function names).

    events = load_ranks(paths, progress=print)        # parallel, bounded memory
    res = build_general(events, layout=None)          # GeneralImport: .ops, .report

What it infers (stragglerlab.trace.op_model describes the table):

* steps from `ProfilerStep#N`: the steps every rank has (a note names any
  left out; no common step at all is an error);
* communication ops per rank, labelled as stragglerlab.importers.
  general_comm says: NCCL kernels on GPU traces (timing gpu), or
  `record_param_comms` with a collective name on CPU traces (gloo);
* groups across ranks: a collective by (process group, `Seq`) where torch
  writes both; else by its order within its process group in the step; else
  (no process group in the trace) by its order among the same kind in the
  step (gloo CPU traces name no group: stragglerlab.importers.
  collective_groups finds it in pg_config from the members' overlap in
  time). A send and a recv pair by (src, dst, order in the step); where the
  trace names a peer only by its rank in a process group (gloo CPU traces
  profiled with record_shapes=True), stragglerlab.importers.p2p_peers
  resolves it through pg_config. A group
  with one traced member (its peers were not traced), and a send/recv with
  no known peer, is a local op;
* compute segments: the signed span between consecutive ops of a rank's
  chain, from the previous op's end, or from its start where that op is async
  (the rank computed on while it ran), to the op's start, or to when its
  inputs were ready where it queued on a GPU (general_async decides both; the
  step end waits for every async op, and a P2P op a helper thread posted
  ahead is waited for by the first op after its end: `wait_k`); GPU kernel
  busy time inside it is kept as busy_s;
* roles ("the same work"): the pipeline stage where a layout is known
  (--layout, or Megatron-named process groups in distributedInfo.pg_config),
  else ranks whose steps mostly have the same multiset of communication kinds
  (P2P split by peer direction; general_ranks.rank_roles);
* clocks: `none` trusts them (one host), `collective` shifts each rank by
  the median difference of the ends of the groups it shares with the lowest
  rank (members of a collective leave it together), `step` aligns the first
  common ProfilerStep; `auto` = none when every trace names the same host,
  collective when they name different hosts, and where a trace names none
  (torch 2.11's CPU traces): whichever of the two leaves fewer matched groups
  implausible (members of a group are inside it together), none on a tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.importers.general_async import (
    busy_union,
    decide_async,
    gpu_evidence,
    posted_ahead,
)
from stragglerlab.importers.general_comm import NO_STEP, comm_frame
from stragglerlab.importers.general_groups import match_groups
from stragglerlab.importers.general_host import gpu_ops, host_columns
from stragglerlab.importers.general_ranks import rank_roles
from stragglerlab.importers.kineto_events import (  # noqa: F401 (load_ranks: re-export)
    AT_LAUNCH_TOL_US,
    RankEvents,
    load_ranks,
)
from stragglerlab.importers.layout import Layout, from_pg_config
from stragglerlab.importers.p2p_peers import resolve_group_peers
from stragglerlab.importers.rank_checks import (
    check_layout_world,
    check_ranks,
    common_steps,
    match_tolerance_us,
    number_unranked,
)
from stragglerlab.trace.op_model import HOST_COLUMNS, P2P_KINDS, STEP_END, gap_ends, previous_points
from stragglerlab.util.errors import InputError


@dataclass(kw_only=True)
class GeneralImport:
    """The general op model of one job and what the import did."""

    ops: pd.DataFrame
    """The op table (stragglerlab.trace.op_model.OP_COLUMNS)."""
    report: dict = field(default_factory=dict)
    """files, ranks, steps, timing, clocks, groups, label sources, notes."""
    notes: list[str] = field(default_factory=list)
    """Things a reader should know (partial job, unmatched ops, inferred ranks)."""


def _layout(events: list[RankEvents], layout: Layout | None, world: int,
            notes: list[str]) -> Layout | None:
    if layout is not None:
        check_layout_world(layout, world)
        return layout
    if not any(e.pg_config for e in events):
        return None
    try:
        return from_pg_config({e.rank: e.pg_config for e in events}, world, "")
    except InputError:
        notes.append("process groups are not Megatron-named (DATA_PARALLEL_GROUP, ...): DP "
                     "rank and stage unknown (pass --layout dp=N,pp=M to set them); roles "
                     "from each rank's communication pattern")
        return None


def _duplicates(events: list[RankEvents], notes: list[str]) -> dict[str, int]:
    """rank -> exact duplicate events read_rank dropped (a note names them)."""
    copies = {str(e.rank): e.duplicates for e in events if e.duplicates}
    if copies:
        notes.append("dropped exact duplicate events (same ph, cat, name, pid, tid, ts and "
                     "dur; a trace concatenated with itself, or merged twice): "
                     + ", ".join(f"{n:,} on rank {r}" for r, n in copies.items())
                     + "; each op is counted once")
    return copies


def _note_longer_than_step(c: pd.DataFrame, events: list, steps: list[int],
                           notes: list[str]) -> None:
    """A note for communication ops that last longer than their whole step (µs, each rank's
    own clock): the what-if takes them as traced, and one such op moves S by itself."""
    length = pd.DataFrame([(e.rank, k, e.steps[k][1] - e.steps[k][0]) for e in events
                           for k in steps], columns=["rank", "step", "length"])
    step_len = c[["rank", "step"]].merge(length, on=["rank", "step"], how="left")[
        "length"].to_numpy(float)  # one row per op, in c's order (a left merge keeps it)
    over = np.flatnonzero((c["end"] - c["start"]).to_numpy(float) > step_len)
    if over.size:
        i = over[0]
        row = c.iloc[i]
        notes.append(f"{over.size} communication op(s) last longer than their whole step "
                     f"(rank {int(row['rank'])}, step {int(row['step'])}: {row['kind']} "
                     f"{(row['end'] - row['start']) / 1e6:.3f} s in a {step_len[i] / 1e6:.3f} "
                     "s step); the what-if takes them as traced: check the trace (an edited "
                     "duration, or a GPU far behind its CPU)")


def _host_of(e: RankEvents, rows: pd.DataFrame, p0: np.ndarray, ready: np.ndarray,
             shift: float, base_us: float) -> dict[str, np.ndarray]:
    """The host columns (stragglerlab.importers.general_host) of one rank's rows (chain
    order), µs on the rank's own clock (`shift`: what the aligned times add to it; launch
    times were shifted by its base alone); all NaN where a communication op's launch call
    is not in the trace."""
    is_end = (rows["kind"] == STEP_END).to_numpy()
    cpu = rows["cpu_ts"].to_numpy(float) - base_us
    launches = e.launches[np.argsort(e.launches[:, 1], kind="stable")] if len(e.launches) \
        else np.zeros((0, 4))
    i = np.clip(np.searchsorted(launches[:, 1], cpu - 0.01), 0, max(len(launches) - 1, 0))
    found = len(launches) > 0 and bool((np.abs(launches[i, 1] - cpu) <= 0.01)[~is_end].all())
    if not found:
        return {c: np.full(len(rows), np.nan) for c in HOST_COLUMNS}
    step_start = rows["step_start"].to_numpy(float) - shift
    hp = np.where(is_end, rows["start"].to_numpy(float) - shift, cpu)
    first = (rows["k"] == 0).to_numpy()
    hp0 = np.where(first, step_start, np.r_[np.nan, hp[:-1]])
    nccl = np.array([(r.start, r.end) for r in e.nccl], dtype=float).reshape(-1, 2)
    nccl_launch = _nccl_launches(e)
    ops = gpu_ops(e.kernels, np.c_[nccl, nccl_launch] if len(nccl) else np.zeros((0, 4)))
    return host_columns(p0, ready, hp0, hp, is_end, ops, e.syncs)


def _nccl_launches(e: RankEvents) -> np.ndarray:
    """(n, 2) launch call start and end of each NCCL kernel of e.nccl (NaN: not traced)."""
    out = np.full((len(e.nccl), 2), np.nan)
    if not len(e.launches):
        return out
    by = {int(c): (s, t) for c, s, _tid, t in e.launches}
    for i, r in enumerate(e.nccl):
        if r.corr in by:
            out[i] = by[r.corr]
    return out


def build_general(events: list[RankEvents], layout: Layout | None = None,
                  timing: str = "auto", align: str = "auto",
                  allow_partial: bool = False) -> GeneralImport:
    """The op table of a job from its ranks' events (see the module doc). allow_partial
    is accepted for the CLI's sake: the general model always keeps the common steps."""
    notes: list[str] = []
    number_unranked(events, notes)
    events = sorted(events, key=lambda e: e.rank)
    world = check_ranks(events, notes)
    copies = _duplicates(events, notes)
    steps = common_steps(events, notes)
    lay = _layout(events, layout, world, notes)
    has_gpu = any(len(e.nccl) for e in events)
    if timing == "gpu" and not has_gpu:
        raise InputError("--timing gpu, but no rank's trace holds NCCL kernels; use "
                         "--timing cpu (or auto)", events[0].path)
    use_gpu = has_gpu and timing != "cpu"
    base = {e.rank: e.base_us for e in events}
    frames, dropped = [], 0
    for e in events:
        f = comm_frame(e, use_gpu)
        if use_gpu:
            f["lead"], f["beside"], f["resumed"] = gpu_evidence(f, e.kernels)
        dropped += int((f["step"] == NO_STEP).sum())
        f = f[f["step"].isin(steps)].copy()
        f["rank"] = e.rank
        frames.append(f)
    c = pd.concat(frames, ignore_index=True)
    what = "NCCL kernels" if use_gpu else "record_param_comms ops with a Collective name"
    if c.empty:
        raise InputError(f"no collective or P2P communication in the kept steps {steps[:8]} of "
                         f"any rank (looked for {what}): the what-if synchronizes ranks at "
                         "their collectives, so a trace without any cannot be analysed; "
                         "profile the steps that communicate (with record_shapes=True for "
                         "gloo/CPU jobs)", str(Path(events[0].path).parent))
    silent = [e for e, f in zip(events, frames, strict=True) if f.empty]
    if silent:  # it would sit outside every collective, its time compared with nothing
        raise InputError(f"{len(silent)} of {len(events)} ranks hold no collective or P2P "
                         f"communication in the kept steps {steps[:8]} (rank "
                         f"{silent[0].rank} first; looked for {what}), while the others do: "
                         "pass each rank's unedited trace of the same steps",
                         silent[0].path)
    _note_longer_than_step(c, events, steps, notes)
    for col in ("start", "end", "cpu_ts"):
        c[col] = c[col] + c["rank"].map(base)
    pg_configs = {e.rank: e.pg_config for e in events}
    c["peer"] = resolve_group_peers(c, pg_configs, notes)
    durations = [e.steps[k][1] - e.steps[k][0] for e in events for k in steps]
    tol = match_tolerance_us(durations)
    m = match_groups(c, events, steps, align, base, pg_configs, tol, notes, eager=not use_gpu)
    c, align, off, bad_groups = m.c, m.align, m.offsets, m.implausible
    c["eager"] = m.eager
    latest = c.groupby("group")["start"].transform("max")
    if bad_groups.size:
        notes.append(f"{bad_groups.size} matched group(s) were implausible (a member ended "
                     "before another started, beyond the clock tolerance "
                     f"{tol / 1e3:.3f} ms): their ops are treated as local (events missing "
                     "from a sampled trace, or an issue order that differs across ranks)")
    c["transfer"] = np.where(c["group"] >= 0, (c["end"] - latest).clip(lower=0.0),
                             c["end"] - c["start"])
    ends = pd.DataFrame([(e.rank, k, e.steps[k][0] + base[e.rank] + off[e.rank],
                          e.steps[k][1] + base[e.rank] + off[e.rank])
                         for e in events for k in steps],
                        columns=["rank", "step", "step_start", "start"])
    ends["end"], ends["kind"], ends["group"], ends["transfer"] = ends["start"], STEP_END, -1, 0.0
    ends["eager"] = False
    ops = pd.concat([c, ends.drop(columns="step_start")], ignore_index=True)
    ops = ops.merge(ends[["rank", "step", "step_start"]], on=["rank", "step"])
    ops["is_end"] = ops["kind"] == STEP_END
    ops = ops.sort_values(["rank", "step", "is_end", "start", "end"], kind="stable",
                          ignore_index=True)
    chain = ops.groupby(["rank", "step"], sort=False)
    ops["k"] = chain.cumcount()
    ops["dp_rank"], ops["stage"] = -1, -1
    if lay is not None:
        coords = {e.rank: lay.coords(e.rank) for e in events}
        ops["dp_rank"] = ops["rank"].map({r: c[0] for r, c in coords.items()})
        ops["stage"] = ops["rank"].map({r: c[1] for r, c in coords.items()})
        ops["role"] = ops["stage"]
    else:
        ops["role"] = rank_roles(ops)
    ops["async"], ops["serial"], ops["ready"] = decide_async(ops, use_gpu)
    shift = {e.rank: base[e.rank] + off[e.rank] for e in events}  # own clock -> the table's
    ops["wait_k"] = -1
    if not use_gpu:  # a helper thread's P2P posted ahead (GPU: NCCL streams say it)
        activity = {e.rank: e.activity[:, :2] + shift[e.rank] for e in events}
        posted, ops["wait_k"] = posted_ahead(ops, ops["async"].to_numpy(bool), activity)
        # a send that did not wait for its receive: the rank went on, only the step end
        # waits for it (general_groups.eager_sends)
        ops["async"] |= posted | ops["eager"].to_numpy(bool)
    timed = ops.rename(columns={"start": "start_s", "end": "end_s", "ready": "ready_s"})
    prev_end = pd.Series(previous_points(timed), index=ops.index)
    gap_end = gap_ends(timed)  # the op model's rule, as ops_table checks it
    ops["gap"] = gap_end - prev_end.fillna(ops["step_start"])
    ops["busy_s"] = np.nan
    host = {c: np.full(len(ops), np.nan) for c in HOST_COLUMNS} if use_gpu else None
    for e in events:
        m = (ops["rank"] == e.rank).to_numpy()
        # float: a rank with no communication op leaves the concatenated columns object
        a = prev_end.fillna(ops["step_start"]).to_numpy(float)[m] - shift[e.rank]
        b = gap_end.astype(float)[m] - shift[e.rank]
        ops.loc[m, "busy_s"] = busy_union(e.kernels, a, b) / 1e6
        if host is not None:
            for col, v in _host_of(e, ops[m], a, b, shift[e.rank], base[e.rank]).items():
                host[col][m] = v / 1e6
    t0 = ops["start"].min()
    out = pd.DataFrame({
        "rank": ops["rank"].astype(np.int64), "step": ops["step"].astype(np.int64),
        "k": ops["k"].astype(np.int64), "kind": ops["kind"].astype(str),
        "pg": ops["pg"].fillna("").astype(str), "group": ops["group"].astype(np.int64),
        "start_s": (ops["start"] - t0) / 1e6, "end_s": (ops["end"] - t0) / 1e6,
        "gap_s": ops["gap"] / 1e6, "transfer_s": ops["transfer"] / 1e6,
        "busy_s": ops["busy_s"].astype(float),
        "in_nelems": ops["in_nelems"].fillna(-1).astype(np.int64),
        "out_nelems": ops["out_nelems"].fillna(-1).astype(np.int64),
        "peer": ops["peer"].fillna(-1).astype(np.int64), "role": ops["role"].astype(np.int64),
        "dp_rank": ops["dp_rank"].astype(np.int64), "stage": ops["stage"].astype(np.int64),
        "async": ops["async"].to_numpy(bool), "ready_s": (ops["ready"] - t0) / 1e6,
        "serial": ops["serial"].to_numpy(bool),
        "wait_k": ops["wait_k"].to_numpy(np.int64),
    })
    if host is not None and np.isfinite(host["host_s"]).any():
        for col, v in host.items():
            out[col] = v
    comm = out[out["kind"] != STEP_END]
    if lay is not None and lay.pp > 1 and not comm["kind"].isin(P2P_KINDS).any():
        # Stages pass activations point to point; without P2P each "stage" is idealized
        # apart, so a straggler among ranks that did the same work may vanish. A note,
        # not an error: a P2P kernel this importer does not name would look the same.
        said = "--layout" if layout is not None else f"the layout ({lay.source})"
        notes.append(f"{said} says pp={lay.pp}, but no P2P send/recv was found between "
                     "stages: ranks are idealized only against their own stage; if the job "
                     "has no pipeline, drop --layout or give pp=1")
    matched = int(comm["group"].ge(0).sum())
    if matched == 0:
        notes.append("no communication op matched across the traced ranks: each rank is "
                     "simulated on its own (no waiting at collectives)")
    report = {
        "model": "general", "files": {str(e.rank): e.path for e in events},
        "world_size": world, "ranks": [e.rank for e in events], "steps": steps,
        "timing": "gpu" if use_gpu else "cpu", "align": align,
        "clock_offsets_s": {str(r): v / 1e6 for r, v in off.items()},
        "layout": None if lay is None else {"dp": lay.dp, "pp": lay.pp, "tp": lay.tp,
                                            "source": lay.source},
        "ops": int(len(comm)), "async_ops": int(comm["async"].sum()),
        "posted_ops": int((comm["wait_k"] >= 0).sum()),
        "groups": int(comm.loc[comm["group"] >= 0, "group"].nunique()),
        "matched_ops": matched, "local_ops": int(len(comm) - matched),
        "implausible_groups_unmatched": int(bad_groups.size),
        "kinds": {str(k): int(v) for k, v in comm["kind"].value_counts().items()},
        "label_sources": {str(k): int(v) for k, v in
                          c["source"].value_counts().items()},
        "outside_steps_dropped": dropped, "duplicate_events_dropped": copies,
        "events": int(sum(e.events for e in events)),
        "json_bytes": int(sum(e.bytes_read for e in events)),
        "reader_peak_rss_mb": float(max(e.peak_rss_mb for e in events)),
    }
    launched = sum(e.gpu_launched for e in events)
    if use_gpu and launched:
        report["gpu_ops_launched"] = int(launched)
        report["kernels_at_launch_share"] = sum(e.gpu_at_launch for e in events) / launched
        report["at_launch_tol_us"] = AT_LAUNCH_TOL_US
    return GeneralImport(ops=out, report=report, notes=notes)
