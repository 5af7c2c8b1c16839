"""Write a trace DataFrame's steps as trace parts, step by step, as the ranks' tracers would.

For tests and the lag benchmark: a `stragglerlab synth` trace (or any trace)
becomes a growing run folder the monitor can tail. Each `write_step` appends
one step's records to every `trace-parts/rank<r>.bin` (the tracer's format,
stragglerlab/trace/trace_parts.py) and then writes each rank's `status/rank<r>.json`
(as the trainer does after flushing a step). Times are laid on one clock:
step after step, `origin` (default: now on CLOCK_MONOTONIC, the tracer's clock)
plus the step's offset, so the trace-clock lag is meaningful on this host.

    feeder = PartsFeeder(run_dir, df)        # df: design.md §3 columns
    for step in feeder.steps:
        feeder.write_step(step)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.run.run_folder import STATUS_DIR, TRACE_PARTS_DIR, write_status
from stragglerlab.trace.schema import OPTYPE_VALUES
from stragglerlab.trace.trace_parts import RECORD

_CODE = {t: i for i, t in enumerate(OPTYPE_VALUES)}


def step_records(df: pd.DataFrame, offset: float) -> dict[int, np.ndarray]:
    """One step's rows as trace-part records by rank (start_ts + offset on the clock)."""
    out = {}
    for rank, g in df.groupby("rank", sort=True):
        rec = np.zeros(len(g), dtype=RECORD)
        rec["step"] = g["step"].to_numpy()
        rec["optype"] = [_CODE[str(t)] for t in g["optype"]]
        for col in ("seq_id", "mb_id", "mc", "gmc"):
            rec[col] = g[col].to_numpy()
        rec["start"] = g["start_ts"].to_numpy() + offset
        rec["end"] = rec["start"] + g["duration"].to_numpy()
        rec["seq_len_sq_sum"] = (g["seq_len_sq_sum"].to_numpy() if "seq_len_sq_sum" in g
                                 else np.nan)
        out[int(rank)] = rec
    return out


def step_offsets(df: pd.DataFrame, origin: float) -> dict[int, float]:
    """Per step, what to add to its start_ts to lay the steps end to end from `origin`."""
    t, out = origin, {}
    for s, g in df.groupby("step", sort=True):
        first = float(g["start_ts"].min())
        out[int(s)] = t - first
        t += float((g["start_ts"] + g["duration"]).max()) - first + 1e-4
    return out


def trace_records(df: pd.DataFrame) -> dict[int, np.ndarray]:
    """A whole trace (a finished run's trace.parquet) as trace-part records by rank."""
    offsets = step_offsets(df, 0.0)
    by_rank: dict[int, list[np.ndarray]] = {}
    for s, g in df.groupby("step", sort=True):
        for rank, rec in step_records(g, offsets[int(s)]).items():
            by_rank.setdefault(rank, []).append(rec)
    return {r: np.concatenate(v) for r, v in by_rank.items()}


class PartsFeeder:
    """A trace replayed into a run folder's trace parts, one step per call."""

    def __init__(self, run_dir: str | Path, df: pd.DataFrame, origin: float | None = None,
                 status: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.df = df
        self.status = status
        self.steps = sorted(int(s) for s in df["step"].unique())
        self.world = int(df["rank"].max()) + 1
        self.by_step = {int(s): g for s, g in df.groupby("step", sort=True)}
        # Steps laid end to end: each starts where the previous one's last op ended.
        self.offsets = step_offsets(df, time.monotonic() if origin is None else origin)

    def part_path(self, rank: int) -> Path:
        """trace-parts/rank<r>.bin."""
        return self.run_dir / TRACE_PARTS_DIR / f"rank{rank}.bin"

    def write_step(self, step: int, ranks: list[int] | None = None) -> None:
        """Append `step`'s records of `ranks` (default all), then their status files."""
        recs = step_records(self.by_step[step], self.offsets[step])
        for rank in range(self.world) if ranks is None else ranks:
            path = self.part_path(rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(recs[rank].tobytes())
            if self.status:
                write_status(self.run_dir / STATUS_DIR / f"rank{rank}.json",
                             json.dumps({"rank": rank, "step": step, "started": step + 1}).encode())
