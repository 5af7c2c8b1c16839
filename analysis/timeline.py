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
  an 'mc' column). Negative durations are drawn as 0.

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

max_events caps the number of op events by keeping whole steps in step order
(if the first step alone is larger, its earliest max_events ops); otherData
then says truncated=true and how many steps/events were kept.

    from stragglerlab.analysis.timeline import write_perfetto
    write_perfetto(frame, "out/timeline.json.gz", title="trace-ST")

    stragglerlab whatif --run results/x/0 --timelines   # timeline.json.gz + ideal-timeline.json.gz
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.atomic import atomic_write
from stragglerlab.errors import InputError

STREAMS: tuple[str, ...] = (
    "compute", "dp-comm", "fwd-send", "fwd-recv", "bwd-send", "bwd-recv", "step-tail", "other",
)
STREAM_OF_OPTYPE: dict[str, str] = {
    "forward-compute": "compute",
    "backward-compute": "compute",
    "params-all-gather": "dp-comm",
    "grads-reduce-scatter": "dp-comm",
    "separate-grads-all-reduce": "dp-comm",
    "forward-send": "fwd-send",
    "forward-recv": "fwd-recv",
    "backward-send": "bwd-send",
    "backward-recv": "bwd-recv",
    "gc": "step-tail",
    "layernorm-grads-all-reduce": "step-tail",
    "embedding-grads-all-reduce": "step-tail",
    "optimizer-clip-main-grad": "step-tail",
    "optimizer": "step-tail",
}
REQUIRED_COLUMNS = ("dp_rank", "stage", "step", "optype", "start_ts", "duration", "seq_id", "mb_id")
LAYOUTS = ("auto", "back-to-back", "as-is")
OVERLAP_TOLERANCE_S = 1e-6


def _check(frame: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"timeline: frame lacks column(s) {missing}; add them")
    if len(frame) == 0:
        raise InputError("timeline: the frame has no rows, nothing to draw")
    for col in ("start_ts", "duration"):
        bad = np.flatnonzero(~np.isfinite(frame[col].to_numpy(dtype=float)))
        if bad.size:
            raise InputError(
                f"timeline: column {col} is NaN/inf in rows {bad[:10].tolist()}"
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
    first = np.flatnonzero(step == steps[0])
    keep = np.zeros(n, dtype=bool)
    keep[first[np.argsort(ts[first], kind="stable")[:max_events]]] = True
    return keep, True


def build_events(
    frame: pd.DataFrame,
    title: str = "",
    max_events: int | None = None,
    layout: str = "auto",
    step_gap: float = 0.1,
    pp_size: int | None = None,
) -> dict:
    """The Chrome-trace JSON object (dict with traceEvents and otherData) for frame."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    _check(frame)
    dp = frame["dp_rank"].to_numpy(dtype=np.int64)
    stage = frame["stage"].to_numpy(dtype=np.int64)
    step = frame["step"].to_numpy(dtype=np.int64)
    start = frame["start_ts"].to_numpy(dtype=np.float64)
    dur = np.maximum(frame["duration"].to_numpy(dtype=np.float64), 0.0)
    cat = frame["optype"].astype("category").cat
    labels = [str(c) for c in cat.categories]
    codes = cat.codes.to_numpy()
    optype = np.array(labels, dtype=object)[codes]
    other_idx = STREAMS.index("other")
    stream_of_code = np.array(
        [STREAMS.index(STREAM_OF_OPTYPE[o]) if o in STREAM_OF_OPTYPE else other_idx
         for o in labels], dtype=np.int64)
    stream_idx = stream_of_code[codes]
    pp = int(stage.max()) + 1
    if pp_size is not None:
        if pp_size < pp:
            raise ValueError(f"pp_size={pp_size} but the frame has stage {pp - 1}")
        pp = int(pp_size)
    pid = dp * pp + stage
    tid = pid * len(STREAMS) + stream_idx

    shift, used_layout = _step_offsets(step, start, start + dur, layout, step_gap)
    ts_us = np.round((start + shift) * 1e6, 3)
    dur_us = np.round(dur * 1e6, 3)
    keep, truncated = _select(step, ts_us, max_events)
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((ts_us[rows], tid[rows], pid[rows]))]

    seq = frame["seq_id"].to_numpy(dtype=np.int64)[rows].tolist()
    mb = frame["mb_id"].to_numpy(dtype=np.int64)[rows].tolist()
    stp = step[rows].tolist()
    names = optype[rows].tolist()
    cols = [names, pid[rows].tolist(), tid[rows].tolist(), ts_us[rows].tolist(),
            dur_us[rows].tolist()]
    if "mc" in frame.columns:
        mc = frame["mc"].to_numpy(dtype=np.int64)[rows].tolist()
        args = [{"step": s, "seq_id": q, "mb_id": m, "model_chunk": c}
                for s, q, m, c in zip(stp, seq, mb, mc, strict=True)]
    else:
        args = [{"step": s, "seq_id": q, "mb_id": m} for s, q, m in zip(stp, seq, mb, strict=True)]
    events: list[dict] = []
    # Metadata: names and order of processes (workers) and threads (streams).
    for p in np.unique(pid[rows]).tolist():
        events.append(_meta("process_name", p, None, name=f"DP {p // pp} / PP {p % pp}"))
        events.append(_meta("process_sort_index", p, None, sort_index=p))
    for t in np.unique(tid[rows]).tolist():
        p = t // len(STREAMS)
        events.append(_meta("thread_name", p, t, name=STREAMS[t % len(STREAMS)]))
        events.append(_meta("thread_sort_index", p, t, sort_index=t))
    events.extend(
        {"name": n, "cat": n, "ph": "X", "pid": p, "tid": t, "ts": s, "dur": d, "args": a}
        for n, p, t, s, d, a in zip(*cols, args, strict=True)
    )
    all_steps = np.unique(step)
    kept_steps = np.unique(step[rows])
    other = {
        "title": title,
        "generator": "stragglerlab analysis.timeline",
        "time_unit": "us",
        "step_layout": used_layout,
        "step_gap": step_gap if used_layout == "back-to-back" else 0.0,
        "pp_size": pp,
        "events_total": int(step.size),
        "events_written": int(rows.size),
        "steps_total": int(all_steps.size),
        "steps_written": int(kept_steps.size),
        "truncated": truncated,
    }
    if truncated:
        other["note"] = (
            f"max_events={max_events}: kept the first {kept_steps.size} of {all_steps.size} steps "
            f"({rows.size} of {step.size} events)"
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
) -> dict:
    """Write frame as Chrome-trace JSON (gzip when path ends in .gz), atomically.

    Returns the file's otherData (layout used, events/steps written, truncation).
    """
    target = Path(path)
    trace = build_events(frame, title, max_events, layout, step_gap, pp_size)
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

