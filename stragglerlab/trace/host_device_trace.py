"""One rank's GPU trace as the host-device model reads it: host threads' CUDA runtime calls,
the GPU ops they launched, the links between event records, waits and syncs, and the
profiler's steps. Plain numpy arrays, microseconds on the trace's own clock.

    trace = HostDeviceTrace(...)           # written by importers.host_device_events
    simulate_steps(trace)                  # analysis.host_device: replays each step

It sits below both the importer that fills it and the analysis that replays it, which
must not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OTHER = 0
"""Call kind: host work the device never holds (launches, allocations, queries)."""
STREAM_SYNC = 1
"""Call kind: cudaStreamSynchronize: returns when its stream's work launched before it ends."""
DEVICE_SYNC = 2
"""Call kind: cudaDeviceSynchronize: returns when every stream's work launched before it ends."""
EVENT_SYNC = 3
"""Call kind: cudaEventSynchronize: returns when the recorded event completes."""
STREAM_WAIT = 4
"""Call kind: cudaStreamWaitEvent: the waiting stream's later work starts after the event."""
EVENT_RECORD = 5
"""Call kind: cudaEventRecord: the event completes when its stream's work launched before it
ends."""
MEMCPY_SYNC = 6
"""Call kind: a synchronous copy (cudaMemcpy, cuMemcpy*): returns when its copy ends."""

CALL_KINDS = {
    "cudaStreamSynchronize": STREAM_SYNC, "cuStreamSynchronize": STREAM_SYNC,
    "cudaDeviceSynchronize": DEVICE_SYNC, "cuCtxSynchronize": DEVICE_SYNC,
    "cudaEventSynchronize": EVENT_SYNC, "cuEventSynchronize": EVENT_SYNC,
    "cudaStreamWaitEvent": STREAM_WAIT, "cuStreamWaitEvent": STREAM_WAIT,
    "cudaEventRecord": EVENT_RECORD, "cudaEventRecordWithFlags": EVENT_RECORD,
    "cuEventRecord": EVENT_RECORD, "cuEventRecordWithFlags": EVENT_RECORD,
    "cudaMemcpy": MEMCPY_SYNC, "cudaMemcpy2D": MEMCPY_SYNC, "cudaMemcpyToSymbol": MEMCPY_SYNC,
    "cudaMemcpyFromSymbol": MEMCPY_SYNC, "cuMemcpyDtoH_v2": MEMCPY_SYNC,
    "cuMemcpyHtoD_v2": MEMCPY_SYNC, "cuMemcpy": MEMCPY_SYNC,
}
"""CUDA runtime/driver call name -> call kind (names not here are OTHER)."""
NO_STREAM = -1
"""A stream or correlation the trace does not name."""


def _empty(dtype) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


@dataclass(kw_only=True)
class HostDeviceTrace:
    """One rank's host-device record (see the module doc); times in microseconds."""

    path: str
    """The file it was read from."""
    steps: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    """(n, 3) float64: ProfilerStep number, start, end of each step's CPU range, by start."""
    step_tid: int = 0
    """The thread whose ProfilerStep ranges these are (the one that runs the training loop)."""
    call_ts: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    """Runtime call start, us."""
    call_dur: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    """Runtime call duration, us."""
    call_tid: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """Host thread of each call."""
    call_corr: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """Correlation id of each call (the GPU ops it launched carry the same), NO_STREAM if none."""
    call_kind: np.ndarray = field(default_factory=lambda: _empty(np.int8))
    """Call kind (OTHER, STREAM_SYNC, ... above)."""
    call_stream: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """The stream a sync names (stream sync) or that waits (stream wait), NO_STREAM where the
    trace does not say (Kineto before its `cuda_sync` events)."""
    call_event_stream: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """The stream a waited-on event was recorded on (event sync, stream wait), NO_STREAM where
    the trace does not say."""
    call_record_corr: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """Correlation id of the cudaEventRecord a wait or event sync waits on, NO_STREAM where the
    trace does not say."""
    op_ts: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    """GPU op (kernel, memcpy, memset) start, us."""
    op_dur: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    """GPU op duration, us."""
    op_stream: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """GPU op's stream."""
    op_corr: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    """GPU op's correlation id (its launch call's), NO_STREAM if none."""
    op_nccl: np.ndarray = field(default_factory=lambda: _empty(bool))
    """Whether the op is an NCCL kernel (its duration includes waiting for peers)."""
    op_blocks_per_sm: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    """A kernel's thread blocks per streaming multiprocessor (Kineto's `blocks per SM`: its
    grid over the GPU's SMs), NaN where the trace does not say (copies, sets)."""
    op_blocking: np.ndarray = field(default_factory=lambda: _empty(bool))
    """Whether the op's launch call holds the host until the op ends: a device-to-host copy
    into pageable host memory (cudaMemcpyAsync is synchronous then: the real traces show the
    copy starting inside the call, behind its stream's work, and the call returning
    3-25 us after it ends)."""
    notes: list[str] = field(default_factory=list)
    """What the reader inferred or dropped."""
