"""The trace-parts format: per-rank binary op records (`trace-parts/rank<r>.bin`).

One fixed-size record per op (step, optype code, seq_id, mb_id, mc, gmc, start,
end, seq_len_sq_sum), appended by the rank's tracer at every step end, so a
killed run leaves every finished step readable; a torn trailing record is
dropped on read. The tracer (workloads) writes it; the run-folder assembler and
the slow-worker feedback (injectors) read it through `read_records`.

    rec = read_records("results/x/0/trace-parts/rank3.bin")   # numpy structured array
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RECORD = np.dtype([
    ("step", "<i8"), ("optype", "<i2"), ("seq_id", "<i4"), ("mb_id", "<i4"),
    ("mc", "<i2"), ("gmc", "<i2"), ("start", "<f8"), ("end", "<f8"),
    ("seq_len_sq_sum", "<f8"),
])
"""One op record; optype is the index in schema.OPTYPE_VALUES, times in seconds."""


def read_records(path: str | Path) -> np.ndarray:
    """All whole records of a rank file (a torn trailing record is dropped)."""
    raw = Path(path).read_bytes()
    usable = len(raw) - len(raw) % RECORD.itemsize
    return np.frombuffer(raw[:usable], dtype=RECORD)
