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

from stragglerlab.trace.schema import OPTYPE_VALUES

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


MAX_STEP = 10**9
"""Largest step number a record may carry."""
MAX_ABS_TIME_S = 1e10
"""Largest |timestamp| (s) a record may carry (the tracer's clock is CLOCK_MONOTONIC)."""
MAX_READ_BYTES = 256 * 1024 * 1024
"""Most bytes read from one rank file per look (the rest waits for the next)."""


def check_records(rec: np.ndarray, last_step: int) -> str | None:
    """What is wrong with freshly read records (None: they look like a tracer's)."""
    if not len(rec):
        return None
    bad = (rec["optype"] < 0) | (rec["optype"] >= len(OPTYPE_VALUES))
    if bad.any():
        return (f"op type code {int(rec['optype'][bad][0])} is not one of the schema's "
                f"0..{len(OPTYPE_VALUES) - 1}")
    steps = rec["step"]
    if (steps < 0).any() or (steps > MAX_STEP).any():
        return f"step {int(steps[(steps < 0) | (steps > MAX_STEP)][0])} is out of range"
    if steps[0] < last_step or (np.diff(steps) < 0).any():
        return "steps go backwards (a rank appends its steps in order)"
    for name in ("start", "end"):
        t = rec[name]
        if not np.isfinite(t).all() or (np.abs(t) > MAX_ABS_TIME_S).any():
            return f"a record's {name} time is not a finite clock reading"
    back = rec["end"] < rec["start"]
    if back.any():
        i = int(np.flatnonzero(back)[0])
        return (f"an op of step {int(rec['step'][i])} ends before it starts "
                f"({float(rec['end'][i]):.6f} < {float(rec['start'][i]):.6f} s)")
    return None


def all_fine(chunks: list[np.ndarray], last_steps: list[int]) -> bool:
    """Whether `check_records(chunks[i], last_steps[i])` finds nothing wrong for every i:
    its tests on all the chunks at once (the monitor's look at 1,024 ranks' new records);
    False says only that some chunk must be checked alone."""
    if not chunks:
        return True
    rec = np.frombuffer(b"".join(c.tobytes() for c in chunks), dtype=RECORD)
    sizes = np.array([len(c) for c in chunks])
    first = np.cumsum(sizes) - sizes
    if (sizes == 0).any():
        return False
    opt, steps = rec["optype"], rec["step"]
    if ((opt < 0) | (opt >= len(OPTYPE_VALUES))).any() or (steps < 0).any() \
            or (steps > MAX_STEP).any():
        return False
    back = np.diff(steps) < 0
    back[first[1:] - 1] = False  # a chunk's first record follows another chunk's last
    if back.any() or (steps[first] < np.asarray(last_steps)).any():
        return False
    for name in ("start", "end"):
        t = rec[name]
        if not np.isfinite(t).all() or (np.abs(t) > MAX_ABS_TIME_S).any():
            return False
    return not (rec["end"] < rec["start"]).any()
