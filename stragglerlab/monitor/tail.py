"""Tail a run folder's trace parts (`trace-parts/rank<r>.bin`) as the ranks append them.

Each rank file is read from the byte offset reached last time; only whole
records are taken, so a torn trailing record (a write caught half way) stays in
the file for the next look. New records are checked before they are kept: an
op type outside the schema, a negative step, steps going backwards, a non-finite
or absurd time, or a file that shrank mark the rank's part as garbage. A
garbage part is never a crash: the rank's tail stops at the bad offset and its
error (file, byte offset, what is wrong) is kept in `errors` for the window
history and the page; the monitor keeps watching the other ranks (and reports the
steps it cannot complete without this one).

    tail = PartsTail(run_dir)
    new = tail.poll()            # {rank: structured array of new whole records}
    tail.errors                  # {rank: message} of garbage parts
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglerlab.run.run_folder import TRACE_PARTS_DIR
from stragglerlab.trace.trace_parts import MAX_READ_BYTES, RECORD, all_fine, check_records
from stragglerlab.util.errors import InputError

_RANK_FILE = re.compile(r"^rank(\d+)\.bin$")


@dataclass
class RankTail:
    """How far one rank's part has been read, and what it holds."""

    rank: int
    """Global rank."""
    path: Path
    """trace-parts/rank<r>.bin."""
    offset: int = 0
    """Bytes read and kept (whole, checked records)."""
    last_step: int = -1
    """Highest step seen in the records so far."""
    error: str | None = None
    """Why the part is garbage, or None."""


class PartsTail:
    """Incremental, validated reader of every rank's trace part of one run folder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir) / TRACE_PARTS_DIR
        if self.dir.exists() and not self.dir.is_dir():
            raise InputError(f"{TRACE_PARTS_DIR} is not a folder: a run folder keeps one "
                             "trace part per rank there (trace-parts/rank<r>.bin); point "
                             "--run at a training run's folder", str(self.dir))
        self.ranks: dict[int, RankTail] = {}

    @property
    def errors(self) -> dict[int, str]:
        """{rank: message} of the parts found garbage."""
        return {r: t.error for r, t in self.ranks.items() if t.error}

    def discover(self) -> None:
        """Pick up rank files that appeared since the last look."""
        if not self.dir.is_dir():
            return
        for p in self.dir.iterdir():
            m = _RANK_FILE.match(p.name)
            if m and int(m[1]) not in self.ranks:
                self.ranks[int(m[1])] = RankTail(int(m[1]), p)

    def poll(self) -> dict[int, np.ndarray]:
        """New whole records of every rank since the last poll (garbage ones left out).

        Every rank's new records are checked together first (at 1,024 ranks one check
        per rank is most of a look's reading); only when that finds something wrong is
        each rank checked alone, to say which part is garbage and where."""
        self.discover()
        fresh = [(t, rec) for _, t in sorted(self.ranks.items())
                 if (rec := self._take(t)) is not None]
        if not fresh:
            return {}
        if len(fresh) > 1 and all_fine([rec for _, rec in fresh], [t.last_step for t, _ in fresh]):
            return {t.rank: self._keep(t, rec) for t, rec in fresh}
        out = {}
        for t, rec in fresh:
            problem = check_records(rec, t.last_step)
            if problem:
                t.error = (f"{t.path}: garbage at byte {t.offset} (rank {t.rank}): {problem}; "
                           "this is not a trace part written by the tracer "
                           f"({RECORD.itemsize}-byte records, stragglerlab/trace/trace_parts.py)")
                continue
            out[t.rank] = self._keep(t, rec)
        return out

    def _take(self, t: RankTail) -> np.ndarray | None:
        """The whole records past the rank's offset, unchecked (None: nothing new)."""
        try:
            size = t.path.stat().st_size
        except OSError:
            return None  # not there (yet, or any more): nothing new
        if size < t.offset:
            t.error = (f"{t.path}: the file shrank from {t.offset} to {size} bytes (rewritten "
                       "by a new run in the same folder?); its records are no longer read")
            return None
        if t.error:
            return None
        whole = min(size - t.offset, MAX_READ_BYTES) // RECORD.itemsize * RECORD.itemsize
        if whole <= 0:
            return None
        try:
            with open(t.path, "rb") as f:
                f.seek(t.offset)
                raw = f.read(whole)
        except OSError as e:
            t.error = f"{t.path}: cannot be read ({e.strerror})"
            return None
        raw = raw[:len(raw) // RECORD.itemsize * RECORD.itemsize]
        return np.frombuffer(raw, dtype=RECORD) if raw else None

    @staticmethod
    def _keep(t: RankTail, rec: np.ndarray) -> np.ndarray:
        """Checked records: the rank's tail moves past them."""
        t.offset += rec.nbytes
        t.last_step = int(rec["step"][-1])
        return rec
