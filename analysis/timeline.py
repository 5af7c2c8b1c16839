"""Write a trace (or a simulated frame) as a Chrome-trace / Perfetto timeline JSON.

Open the output in https://ui.perfetto.dev or chrome://tracing. Layout (close to
the OSDI'25 artifact's timelines, but one process per worker):

* one process per worker (dp_rank, stage), pid = dp_rank * pp_size + stage,
  named 'DP d / PP p' (so the pids of a job are the same in the original and
  the simulated-ideal timeline, and one DP replica's stages sit together);
* one thread per stream, named: 'compute' (forward/backward compute),
  'dp-comm' (params-all-gather, grads-reduce-scatter, separate-grads-all-reduce),
  'fwd-send', 'fwd-recv', 'bwd-send', 'bwd-recv', 'step-tail' (gc,
  layernorm/embedding grads all-reduce, optimizer-clip-main-grad, optimizer),
  and 'other' for any optype outside that vocabulary. tids are unique over
  the whole file (pid * 8 + stream index), as in the artifact;
* one complete event (ph='X') per op: name and cat = optype, ts and dur in
  microseconds, args = {step, seq_id, mb_id} (+ model_chunk when the frame has
  an 'mc' column). Negative durations are drawn as 0;
* one flow arrow (cat 'p2p', name 'forward p2p' / 'backward p2p', ph='s' on
  the send where the transfer can start, ph='f' with bp='e' near the end of its
  receive, each inside its slice so it binds to it) from every P2P send to the
  receive it pairs with (`stragglerlab.method.p2p_pairs.p2p_pair_rows`), when both
  are written.

With `ideal=` (the simulated ideal step, `analysis.whatif.ideal_timeline`) the
file holds the ideal job beside the traced one: the traced workers keep pids
0..W-1 and are named 'traced DP d / PP p', the ideal workers get pids
W..2W-1 (W = dp_size * pp_size), named 'ideal DP d / PP p', with one copy of
the ideal step starting where each written traced step starts (args.step =
that traced step), so each step's gap to its ideal shows on one time axis.
With `step_slowdown=` ({step: S}) a counter track 'step slowdown' (ph='C',
arg 'S') in its own process (pid 2W with an ideal, else W, sorted first)
holds each traced step's S from that step's start.

Steps on the time axis. Traces from the artifact store start_ts relative to
each step (every step starts near 0), so drawn as-is all steps would pile up.
With layout='auto' (default) steps whose time ranges overlap are laid out back
to back in step order: step k is shifted so that its earliest op starts at
offset_k = sum over earlier steps of span_j * (1 + step_gap), span_j = latest
end - earliest start of step j (step_gap=0.1 leaves a 10% gap between steps, as
the artifact's timelines do). Traces on one job-wide clock (steps do not
overlap) keep their real spacing, shifted so the first op starts at 0.
layout='back-to-back' or 'as-is' forces either behaviour. The choice is
recorded in the file's "otherData".

max_events caps the number of op events (traced plus ideal copies) by keeping
whole steps in step order, each with its ideal copy (if the first step alone is
larger, its earliest ops and the earliest ops of one ideal copy); otherData then
says truncated=true and how many steps/events were kept. Flow and counter
events come on top: at most one per P2P op written, and one per step plus one.

    from stragglerlab.analysis.timeline import write_perfetto
    write_perfetto(frame, "out/timeline.json.gz", title="trace-ST")
    write_perfetto(frame, "out/timeline.json.gz", ideal=ideal_timeline(run),
                   step_slowdown=run.result.step_slowdown())      # traced + ideal, one file

    stragglerlab whatif --run results/x/0 --timelines   # timeline.json.gz (traced + ideal)
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.analysis.timeline_slices import (  # noqa: F401 (STREAMS: re-exported)
    STREAMS,
    OpArrays,
    flow_events,
    op_slices,
    p2p_pairs_of,
)
from stragglerlab.util.atomic import atomic_write
from stragglerlab.util.errors import InputError

REQUIRED_COLUMNS = ("dp_rank", "stage", "step", "optype", "start_ts", "duration", "seq_id", "mb_id")
LAYOUTS = ("auto", "back-to-back", "as-is")
OVERLAP_TOLERANCE_S = 1e-6
COUNTER_NAME = "step slowdown"
"""Name of the per-step slowdown counter events (their one arg is 'S')."""


def _check(frame: pd.DataFrame, what: str = "the frame") -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"timeline: {what} lacks column(s) {missing}; add them")
    if len(frame) == 0:
        raise InputError(f"timeline: {what} has no rows, nothing to draw")
    for col in ("start_ts", "duration"):
        bad = np.flatnonzero(~np.isfinite(frame[col].to_numpy(dtype=float)))
        if bad.size:
            raise InputError(
                f"timeline: column {col} of {what} is NaN/inf in rows {bad[:10].tolist()}"
                f"{' ...' if bad.size > 10 else ''}; fix or drop them")


def _meta(kind: str, pid: int, tid: int | None, **args: object) -> dict:
    event: dict = {"name": kind, "ph": "M", "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return event


def _step_offsets(
    step: np.ndarray, start: np.ndarray, end: np.ndarray, layout: str, step_gap: float
) -> tuple[np.ndarray, str]:
    """Seconds to add to each row, and the layout actually used."""
    steps, inv = np.unique(step, return_inverse=True)
    lo = np.full(steps.size, np.inf)
    hi = np.full(steps.size, -np.inf)
    np.minimum.at(lo, inv, start)
    np.maximum.at(hi, inv, end)
    if layout == "auto":
        overlap = steps.size > 1 and bool(np.any(lo[1:] < hi[:-1] - OVERLAP_TOLERANCE_S))
        layout = "back-to-back" if overlap else "as-is"
    if layout == "as-is":
        return np.full(step.size, -lo.min()), layout
    span = hi - lo
    origin = np.concatenate(([0.0], np.cumsum(span * (1.0 + step_gap))[:-1]))
    return (origin - lo)[inv], layout


def _earliest(rows: np.ndarray, ts: np.ndarray, n: int) -> np.ndarray:
    """The n rows (of `rows`) that start first."""
    return rows[np.argsort(ts[rows], kind="stable")[:n]]


def _select(step: np.ndarray, ts: np.ndarray, max_events: int | None) -> tuple[np.ndarray, bool]:
    """Row mask keeping whole steps (in step order) up to max_events rows."""
    n = step.size
    if max_events is None or n <= max_events:
        return np.ones(n, dtype=bool), False
    if max_events < 1:
        raise ValueError(f"max_events must be >= 1, got {max_events}")
    steps, counts = np.unique(step, return_counts=True)
    kept = int(np.searchsorted(np.cumsum(counts), max_events, side="right"))
    if kept > 0:
        return np.isin(step, steps[:kept]), True
    keep = np.zeros(n, dtype=bool)
    keep[_earliest(np.flatnonzero(step == steps[0]), ts, max_events)] = True
    return keep, True


def _select_with_ideal(
    step: np.ndarray, ts: np.ndarray, max_events: int | None, n_ideal: int
) -> tuple[np.ndarray, bool, np.ndarray, int]:
    """(traced row mask, truncated, the steps that get an ideal copy, ideal rows per copy):
    whole steps, each with its copy of the n_ideal-row ideal step, up to max_events rows."""
    steps, counts = np.unique(step, return_counts=True)
    per_step = counts + n_ideal
    if max_events is None or per_step.sum() <= max_events:
        return np.ones(step.size, dtype=bool), False, steps, n_ideal
    if max_events < 1:
        raise ValueError(f"max_events must be >= 1, got {max_events}")
    kept = int(np.searchsorted(np.cumsum(per_step), max_events, side="right"))
    if kept > 0:
        return np.isin(step, steps[:kept]), True, steps[:kept], n_ideal
    # The first step and its ideal copy alone exceed max_events: the first step whole when
    # it takes at most half, else half each (earliest ops first).
    n_first = int(counts[0])
    ideal_kept = min(n_ideal, max(max_events - n_first, max_events // 2))
    keep = np.zeros(step.size, dtype=bool)
    keep[_earliest(np.flatnonzero(step == steps[0]), ts, max_events - ideal_kept)] = True
    return keep, True, steps[:1] if ideal_kept else steps[:0], ideal_kept


def build_events(
    frame: pd.DataFrame,
    title: str = "",
    max_events: int | None = None,
    layout: str = "auto",
    step_gap: float = 0.1,
    pp_size: int | None = None,
    ideal: pd.DataFrame | None = None,
    step_slowdown: Mapping[int | str, float] | None = None,
    flows: bool = True,
) -> dict:
    """The Chrome-trace JSON object (dict with traceEvents and otherData) for frame.

    ideal: the simulated ideal step (one step, same columns), drawn beside the traced
    job; step_slowdown: {step: S} for the counter track; flows: P2P send -> recv arrows.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    _check(frame)
    ops = OpArrays.of(frame)
    iops = None
    if ideal is not None:
        _check(ideal, "the ideal frame")
        iops = OpArrays.of(ideal)
        if np.unique(iops.step).size != 1:
            raise ValueError("ideal must hold one simulated step (analysis.whatif."
                             f"ideal_timeline), got steps {np.unique(iops.step)[:5].tolist()}")
    pp = int(max(ops.stage.max(), -1 if iops is None else iops.stage.max())) + 1
    if pp_size is not None:
        if pp_size < pp:
            raise ValueError(f"pp_size={pp_size} but the frame has stage {pp - 1}")
        pp = int(pp_size)
    world = (int(max(ops.dp.max(), -1 if iops is None else iops.dp.max())) + 1) * pp

    shift, used_layout = _step_offsets(ops.step, ops.start, ops.start + ops.dur, layout,
                                       step_gap)
    ts_us = np.round((ops.start + shift) * 1e6, 3)
    if iops is None:
        keep, truncated = _select(ops.step, ts_us, max_events)
        tiles, n_ideal = ops.step[:0], 0
    else:
        keep, truncated, tiles, n_ideal = _select_with_ideal(ops.step, ts_us, max_events,
                                                             len(iops.step))
    rows = np.flatnonzero(keep)
    traced = op_slices(ops.take(rows), pp, 0, ts_us[rows], ops.step[rows])
    # Where each step begins and ends on the file's time axis (all its ops, kept or not).
    steps, inv = np.unique(ops.step, return_inverse=True)
    begin = np.full(steps.size, np.inf)
    finish = np.full(steps.size, -np.inf)
    np.minimum.at(begin, inv, ts_us)
    np.maximum.at(finish, inv, ts_us + np.round(ops.dur * 1e6, 3))
    kept_steps = np.unique(traced.step)

    sets = [("traced", traced)]
    if iops is not None and tiles.size:
        template = iops.take(_earliest(np.arange(len(iops.step)), iops.start, n_ideal))
        rel = np.round((template.start - template.start.min()) * 1e6, 3)
        at = np.searchsorted(steps, tiles)
        idx = np.tile(np.arange(len(rel)), tiles.size)
        copies = template.take(idx)
        sets.append(("ideal", op_slices(copies, pp, world,
                                      np.round(np.repeat(begin[at], len(rel)) + rel[idx], 3),
                                      np.repeat(tiles, len(rel)))))

    events: list[dict] = []
    cpid = None
    if step_slowdown is not None:
        values = {int(k): float(v) for k, v in step_slowdown.items()}
        samples = [(float(begin[np.searchsorted(steps, u)]), values[u])
                   for u in kept_steps.tolist() if u in values]
        if samples:
            cpid = 2 * world if iops is not None else world
            last = int(kept_steps[-1])  # the last value holds to the end of the last step
            samples.append((float(finish[np.searchsorted(steps, last)]), samples[-1][1]))
            events.append(_meta("process_name", cpid, None, name="per-step slowdown S"))
            events.append(_meta("process_sort_index", cpid, None, sort_index=-1))
            events.extend({"name": COUNTER_NAME, "ph": "C", "pid": cpid, "ts": t,
                           "args": {"S": round(v, 6)}} for t, v in samples)
    # Metadata: names and order of processes (workers) and threads (streams).
    for label, sl in sets:
        prefix = f"{label} " if iops is not None else ""
        for p in np.unique(sl.pid).tolist():
            w = p % world
            events.append(_meta("process_name", p, None,
                                name=f"{prefix}DP {w // pp} / PP {w % pp}"))
            events.append(_meta("process_sort_index", p, None, sort_index=p))
        for t in np.unique(sl.tid).tolist():
            p = t // len(STREAMS)
            events.append(_meta("thread_name", p, t, name=STREAMS[t % len(STREAMS)]))
            events.append(_meta("thread_sort_index", p, t, sort_index=t))
    n_flows = 0
    for _label, sl in sets:
        events.extend(sl.events())
    if flows:
        pairs = p2p_pairs_of(traced.ops)
        events.extend(flow_events(traced, pairs["send_row"].to_numpy(),
                             pairs["recv_row"].to_numpy(), pairs["direction"].to_numpy(), 0))
        n_flows = len(pairs)
        if len(sets) > 1:
            pairs = p2p_pairs_of(template)
            n = len(template.step)
            shift_rows = np.repeat(np.arange(tiles.size) * n, len(pairs))
            send = np.tile(pairs["send_row"].to_numpy(), tiles.size) + shift_rows
            recv = np.tile(pairs["recv_row"].to_numpy(), tiles.size) + shift_rows
            events.extend(flow_events(sets[1][1], send, recv,
                                 np.tile(pairs["direction"].to_numpy(), tiles.size), n_flows))
            n_flows += len(send)
    all_steps = steps
    other = {
        "title": title,
        "generator": "stragglerlab analysis.timeline",
        "time_unit": "us",
        "step_layout": used_layout,
        "step_gap": step_gap if used_layout == "back-to-back" else 0.0,
        "pp_size": pp,
        "events_total": int(ops.step.size),
        "events_written": int(rows.size),
        "steps_total": int(all_steps.size),
        "steps_written": int(kept_steps.size),
        "truncated": truncated,
        "flows": n_flows,
    }
    if iops is not None:
        other["ideal"] = {
            "pids": [world, 2 * world - 1], "ops_per_step": int(iops.step.size),
            "copies": int(tiles.size),
            "events_written": int(len(sets[1][1].pid)) if len(sets) > 1 else 0}
        other["traced_pids"] = [0, world - 1]
    if cpid is not None:
        other["counter"] = {"pid": cpid, "name": COUNTER_NAME, "arg": "S",
                            "samples": len(samples)}
    if truncated:
        other["note"] = (
            f"max_events={max_events}: kept the first {kept_steps.size} of {all_steps.size} steps "
            f"({rows.size} of {ops.step.size} events"
            + (f", plus {other['ideal']['events_written']} of the ideal copies" if iops is not None
               else "") + ")"
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_perfetto(
    frame: pd.DataFrame,
    path: str | Path,
    title: str = "",
    max_events: int | None = None,
    layout: str = "auto",
    step_gap: float = 0.1,
    pp_size: int | None = None,
    ideal: pd.DataFrame | None = None,
    step_slowdown: Mapping[int | str, float] | None = None,
    flows: bool = True,
) -> dict:
    """Write frame as Chrome-trace JSON (gzip when path ends in .gz), atomically.

    ideal, step_slowdown, flows: as `build_events` (the ideal job beside the traced one,
    the per-step slowdown counter, P2P flow arrows). Returns the file's otherData
    (layout used, events/steps written, truncation, flows, ideal copies, counter).
    """
    target = Path(path)
    trace = build_events(frame, title, max_events, layout, step_gap, pp_size, ideal,
                         step_slowdown, flows)
    data = json.dumps(trace, separators=(",", ":")).encode()

    def _write(tmp: str) -> None:
        if target.suffix == ".gz":
            with open(tmp, "wb") as raw, gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0
            ) as gz:
                gz.write(data)
        else:
            with open(tmp, "wb") as f:
                f.write(data)

    atomic_write(target, _write)
    return trace["otherData"]

