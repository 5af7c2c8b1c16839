"""Per-op tracer of one rank: fixed-size binary records, flushed every step.

Each op is one record (step, optype code, seq_id, mb_id, mc, gmc, start, end,
seq_len_sq_sum) on one job-wide clock: `time.monotonic()` is CLOCK_MONOTONIC,
shared by every process of the host, so ranks need no clock sync (all ranks
of a run live on one host: rendezvous is on loopback). On CUDA the caller
synchronizes before taking times. Records are buffered in memory and appended
to `rank<r>.bin` at each step end, so a killed run leaves every finished step
readable; a torn last record is dropped on read.

    tracer = Tracer(path, enabled=True)
    tracer.begin_step(3)
    with tracer.op(OpType.FORWARD_COMPUTE, mb_id=0, mc=0, gmc=1):
        ...
    tracer.end_step()

With `ranges=True` (scenario `run: {profiler: kineto}`) every op is also a
`torch.profiler.record_function(<optype>)` range, so a Kineto trace of the same
run names the same ops: `op()` wraps its body; an async op recorded with an
unknown end (pipeline P2P, traced from post to completion) opens its range at
`record()` on the posting thread and closes it in `set_end()` on the watcher
thread that saw it complete. Closing on another thread needs the profiler's
`profile_all_threads` (see workloads/profiling.py). The range then spans from
just after the post time stamped in our record to just after the completion
stamp: the same span up to the few microseconds between the two clock reads.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import numpy as np

from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_parts import RECORD

_CODE = {t: i for i, t in enumerate(OPTYPE_VALUES)}

now = time.monotonic


def _record_function(name: str):
    from torch.profiler import record_function

    return record_function(name)


class Tracer:
    """Records ops of one rank; seq_id is assigned per optype within each step."""

    def __init__(self, path: str | Path, enabled: bool = True, ranges: bool = False) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.ranges = ranges
        self._open: dict[int, object] = {}  # row -> open record_function of an async op
        self._rows: list[tuple] = []
        self._seq: dict[OpType, int] = {}
        self.step = -1
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")

    def begin_step(self, step: int) -> None:
        """Start a step: seq_ids restart from 0."""
        self.step = step
        self._seq.clear()

    def record(self, optype: OpType, start: float, end: float, mb_id: int = -1, mc: int = -1,
               gmc: int = -1, seq_len_sq_sum: float = float("nan")) -> int:
        """Record one op measured by the caller; returns its row index within the step."""
        if not self.enabled:
            return -1
        seq_id = self._seq.get(optype, 0)
        self._seq[optype] = seq_id + 1
        self._rows.append([self.step, _CODE[optype.value], seq_id, mb_id, mc, gmc, start, end,
                           seq_len_sq_sum])
        row = len(self._rows) - 1
        if self.ranges and math.isnan(end):  # async: the range closes in set_end
            rf = _record_function(optype.value)
            rf.__enter__()
            self._open[row] = rf
        return row

    def set_end(self, row: int, end: float) -> None:
        """Complete a row recorded with an unknown end (an async op finishing later).

        Called from a watcher thread: assigning one list item is atomic under the GIL.
        """
        if row >= 0:
            self._rows[row][7] = end
            rf = self._open.pop(row, None)
            if rf is not None:
                rf.__exit__(None, None, None)

    @contextlib.contextmanager
    def op(self, optype: OpType, mb_id: int = -1, mc: int = -1, gmc: int = -1,
           seq_len_sq_sum: float = float("nan")):
        """Time the body as one op."""
        if self.ranges:
            rf = _record_function(optype.value)  # allocated first: less between the clocks
            start = now()
            with rf:
                yield
        else:
            start = now()
            yield
        self.record(optype, start, now(), mb_id, mc, gmc, seq_len_sq_sum)

    def end_step(self) -> None:
        """Append the step's records to the file (durable against a later kill).

        An async op whose end never came (the run failed before its peer answered: `close`
        after a lost node) has no end to record and is left out: a record's end must be a
        clock reading, and every reader of the parts refuses one that is not (the monitor,
        the node streams). The step stays incomplete: its status never says it finished."""
        if not self.enabled or not self._rows:
            return
        rows = [tuple(r) for r in self._rows if not math.isnan(r[7])]
        self._file.write(np.array(rows, dtype=RECORD).tobytes())
        self._file.flush()
        self._rows.clear()

    def close(self) -> None:
        """Flush and close."""
        if self.enabled and not self._file.closed:
            self.end_step()
            self._file.close()

