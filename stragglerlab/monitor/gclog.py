"""Tail the ranks' GC pause logs (`gc/rank<r>.jsonl`) and add the trace's `gc_pause_s` column.

The trainer appends one JSON line per measured collection ({"step", "start",
"duration_s", "generation"}, `start` on the tracer's clock) at each step end,
before the rank's status says the step is done, so a complete step's pauses are
on disk. Each file is read from the offset reached last time up to its last
newline (a torn line waits); a line that is not such an object is skipped.
`gc_pause_s` is the pause time inside each op's span, as the run-folder
assembler computes it (workloads/run_folder.py `add_gc_pause_column`), so the
`whatif` detector's GC rule sees live windows as it sees finished runs.

    gc = GcTail(run_dir); gc.poll()
    gc.add_column(df)        # df from StepBuffer.frame (its attrs hold the clock origin)
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from stragglerlab.run.run_folder import GC_DIR

_RANK_FILE = re.compile(r"^rank(\d+)\.jsonl$")
MAX_READ_BYTES = 64 * 1024 * 1024
"""Most bytes read from one log per look."""


class GcTail:
    """Incremental reader of every rank's GC pause log."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir) / GC_DIR
        self.offsets: dict[int, int] = {}
        self.pauses: dict[int, list[tuple[int, float, float]]] = {}
        """rank -> [(step, start, duration_s)] of the pauses kept."""

    def poll(self) -> None:
        """Read the lines appended since the last look."""
        if not self.dir.is_dir():
            return
        for p in self.dir.iterdir():
            m = _RANK_FILE.match(p.name)
            if m:
                self._read(int(m[1]), p)

    def _read(self, rank: int, path: Path) -> None:
        offset = self.offsets.get(rank, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(MAX_READ_BYTES)
        except OSError:
            return
        end = raw.rfind(b"\n") + 1
        self.offsets[rank] = offset + end
        kept = self.pauses.setdefault(rank, [])
        for line in raw[:end].splitlines():
            try:
                p = json.loads(line)
                item = (int(p["step"]), float(p["start"]), float(p["duration_s"]))
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
            if all(math.isfinite(x) for x in item[1:]) and item[2] >= 0:
                kept.append(item)

    def prune(self, oldest_needed: int) -> None:
        """Forget the pauses of steps before `oldest_needed`."""
        for rank, ps in self.pauses.items():
            self.pauses[rank] = [p for p in ps if p[0] >= oldest_needed]

    def add_column(self, df: pd.DataFrame, shift: dict[int, float] | None = None,
                   rank_of: dict[int, int] | None = None) -> None:
        """gc_pause_s: pause time (s) inside each op's span (0 without pauses). `shift`:
        seconds subtracted from a rank's pause times (its clock correction, as from its
        records); `rank_of`: the frame's rank -> the rank whose log it is (a window over the
        ranks that remain after a node was lost is renumbered)."""
        shift = shift or {}
        df["gc_pause_s"] = 0.0
        t0 = df.attrs.get("clock_origin", 0.0)
        col = df["gc_pause_s"].to_numpy(copy=True)
        ranks = df["rank"].to_numpy()
        frame_rank = {orig: r for r, orig in (rank_of or {}).items()}
        for rank, ps in self.pauses.items():
            rows = np.flatnonzero(ranks == frame_rank.get(rank, rank if rank_of is None else -1))
            if not ps or not len(rows):
                continue
            start = df["start_ts"].to_numpy()[rows]
            end = start + df["duration"].to_numpy()[rows]
            for _, p_start, p_dur in ps:
                s = p_start - shift.get(rank, 0.0) - t0
                col[rows] += np.clip(np.minimum(end, s + p_dur) - np.maximum(start, s), 0.0, None)
        df["gc_pause_s"] = col
