"""One rank's GPU Kineto trace reduced to what the host-device model replays, with bounded
memory.

    trace = read_host_device(path)     # stragglerlab.trace.host_device_trace.HostDeviceTrace

Kept (numpy arrays; everything else is dropped as it streams past):

* `ProfilerStep#N` CPU ranges (`user_annotation`, older `User Annotations`): the steps
  and the thread that runs them;
* CUDA runtime / driver calls (`cuda_runtime`, `cuda_driver`, older `Runtime`): name (as
  a call kind), start, duration, thread, correlation;
* `cuda_sync` events (Kineto writes one per sync call since 2023, same correlation as the
  call): the stream a stream sync names, the waiting stream of a stream wait, and the
  stream and cudaEventRecord correlation (`wait_on_stream`,
  `wait_on_cuda_event_record_corr_id`) of the event a wait or event sync waits on;
* GPU ops (`kernel`, `gpu_memcpy`, `gpu_memset`): start, duration, stream, correlation,
  whether NCCL, a kernel's `blocks per SM`, whether a device-to-host copy into pageable
  host memory (its cudaMemcpyAsync call holds the host until the copy ends).
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np

from stragglerlab.importers.chrome import (
    EMPTY_PROFILE,
    MAX_TIME_US,
    add_step,
    check_entry,
    check_step_order,
    step_number,
)
from stragglerlab.importers.event_filter import EventSkip
from stragglerlab.importers.kineto_events import COMPUTE_CATS, LAUNCH_CATS, OLD_CATEGORIES
from stragglerlab.importers.stream_json import TraceReader
from stragglerlab.trace.host_device_trace import CALL_KINDS, NO_STREAM, OTHER, HostDeviceTrace
from stragglerlab.util.errors import InputError

SYNC_CAT = "cuda_sync"
"""Kineto's category of the device-side record of a sync call (args name streams, events)."""
SKIP = EventSkip(ph="X", cat="cpu_op", keep_names=("ProfilerStep#",), keep_exact=())
"""CPU ops are dropped before parsing (the model needs none but the step ranges)."""
NUMBER = (int, float)
"""Types a time may have (bool excluded: type() is exact)."""


def _int(v, default: int = NO_STREAM) -> int:
    return v if type(v) is int else default


def read_host_device(path: Path | str, max_bytes: int | None = None,
                     max_ratio: float | None = None) -> HostDeviceTrace:
    """Stream one rank's trace into a HostDeviceTrace (see the module doc); InputError when
    it is unusable or holds no GPU ops."""
    path = Path(path)
    where = str(path)
    check_entry(path)  # never open() a FIFO: it blocks
    kw = {k: v for k, v in (("max_bytes", max_bytes), ("max_ratio", max_ratio)) if v}
    reader = TraceReader(path=path, skip=SKIP, **kw)
    steps: dict[int, tuple[float, float]] = {}
    step_tids: set[int] = set()
    call_f, call_i = array("d"), array("q")    # (ts, dur), (tid, corr, kind)
    op_f, op_i = array("d"), array("q")  # (ts, dur, blocks/SM), (stream, corr, nccl, blocks)
    sync_i = array("q")                        # (corr, stream, event stream, record corr)
    bad, first_bad = 0, ""
    for batch in reader.batches():
        for e in batch:
            if type(e) is not dict or e.get("ph") != "X":
                continue
            cat, name = e.get("cat"), e.get("name")
            cat = OLD_CATEGORIES.get(cat, cat) if type(cat) is str else None
            if type(name) is not str or cat not in KEPT_CATS:
                continue
            if cat == "user_annotation" and not name.startswith("ProfilerStep#"):
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if type(ts) not in NUMBER or type(dur) not in NUMBER \
                    or not (-MAX_TIME_US < ts < MAX_TIME_US and 0 <= dur < MAX_TIME_US):
                bad += 1  # also NaN, which fails every comparison
                first_bad = first_bad or f"{name[:60]!r} (ts {str(ts)[:40]}, dur " \
                                         f"{str(dur)[:40]})"
                continue
            args = e.get("args")
            args = args if isinstance(args, dict) else {}
            if cat in LAUNCH_CATS:
                call_f.extend((float(ts), float(dur)))
                call_i.extend((_tid(e), _int(args.get("correlation")),
                               CALL_KINDS.get(name, OTHER)))
            elif cat in COMPUTE_CATS:
                stream = args.get("stream")
                low = name.lower()
                call_blocks = cat == "gpu_memcpy" and "dtoh" in low and "pageable" in low
                bps = args.get("blocks per SM")
                op_f.extend((float(ts), float(dur),
                             float(bps) if type(bps) in NUMBER else np.nan))
                op_i.extend((stream if type(stream) is int else _tid(e),
                             _int(args.get("correlation")),
                             int(cat == "kernel" and "nccl" in low), int(call_blocks)))
            elif cat == SYNC_CAT:
                sync_i.extend((_int(args.get("correlation")), _int(args.get("stream")),
                               _int(args.get("wait_on_stream")),
                               _int(args.get("wait_on_cuda_event_record_corr_id"))))
            else:  # a ProfilerStep CPU range
                add_step(steps, step_number(name, where), float(ts), float(ts + dur), where)
                step_tids.add(_tid(e))
    if bad:
        raise InputError(f"{bad:,} complete event(s) are malformed, e.g. {first_bad}: ts and "
                         "dur must be finite numbers of microseconds, dur >= 0; pass the "
                         "profiler's export unedited", where)
    if not reader.events:
        raise InputError(EMPTY_PROFILE, where)
    check_step_order(steps, where)
    cf = np.frombuffer(call_f, dtype=np.float64).reshape(-1, 2)
    ci = np.frombuffer(call_i, dtype=np.int64).reshape(-1, 3)
    of = np.frombuffer(op_f, dtype=np.float64).reshape(-1, 3)
    oi = np.frombuffer(op_i, dtype=np.int64).reshape(-1, 4)
    si = np.frombuffer(sync_i, dtype=np.int64).reshape(-1, 4)
    if not of.shape[0]:
        raise InputError("the trace holds no GPU kernels, copies or sets: not a GPU trace; "
                         "profile with ProfilerActivity.CUDA", where)
    if not cf.shape[0]:
        raise InputError("the trace holds no CUDA runtime calls, so no GPU op can be tied to "
                         "its launch; profile with ProfilerActivity.CPU and CUDA", where)
    corder = np.argsort(cf[:, 0], kind="stable")
    cf, ci = cf[corder], ci[corder]
    oorder = np.argsort(of[:, 0], kind="stable")
    of, oi = of[oorder], oi[oorder]
    links = _links(ci[:, 1], si)
    notes = []
    if len(step_tids) > 1:
        notes.append(f"ProfilerStep ranges on {len(step_tids)} threads; the steps are timed "
                     "on each range's own thread")
    table = np.array([(n, *steps[n]) for n in sorted(steps)], dtype=np.float64) \
        .reshape(-1, 3)
    return HostDeviceTrace(
        path=where, steps=table[np.argsort(table[:, 1], kind="stable")],
        step_tid=min(step_tids) if step_tids else 0,
        call_ts=cf[:, 0].copy(), call_dur=cf[:, 1].copy(), call_tid=ci[:, 0].copy(),
        call_corr=ci[:, 1].copy(), call_kind=ci[:, 2].astype(np.int8),
        call_stream=links[:, 0], call_event_stream=links[:, 1],
        call_record_corr=links[:, 2],
        op_ts=of[:, 0].copy(), op_dur=of[:, 1].copy(), op_stream=oi[:, 0].copy(),
        op_corr=oi[:, 1].copy(), op_nccl=oi[:, 2].astype(bool),
        op_blocks_per_sm=of[:, 2].copy(),
        op_blocking=oi[:, 3].astype(bool), notes=notes)


KEPT_CATS = frozenset(LAUNCH_CATS | COMPUTE_CATS | {SYNC_CAT, "user_annotation"})
"""Categories (after OLD_CATEGORIES) the reader looks at."""


def _links(call_corr: np.ndarray, sync: np.ndarray) -> np.ndarray:
    """(n_calls, 3) int64: stream, event stream, record correlation of each call from the
    `cuda_sync` event with its correlation id (NO_STREAM where there is none)."""
    out = np.full((call_corr.size, 3), NO_STREAM, dtype=np.int64)
    if not sync.shape[0]:
        return out
    sync = sync[sync[:, 0] >= 0]
    if not sync.shape[0]:
        return out
    order = np.argsort(sync[:, 0], kind="stable")
    keys, vals = sync[order, 0], sync[order, 1:]
    i = np.clip(np.searchsorted(keys, call_corr), 0, keys.size - 1)
    hit = (call_corr >= 0) & (keys[i] == call_corr)
    out[hit] = vals[i[hit]]
    return out


def _tid(e: dict) -> int:
    t = e.get("tid", 0)
    return t if isinstance(t, int) else hash(str(t)) & 0x7FFFFFFF
