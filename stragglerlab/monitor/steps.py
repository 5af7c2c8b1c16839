"""Which steps are complete, the job's layout, and the trace frame of a window of steps.

A rank is done with step s when it has records of a later step, when its
status file (`status/rank<r>.json`, written just after the step's records were
flushed) says it finished s, or, once the run ended (run.json written), when
its optimizer op of s is recorded (the run-folder assembler's rule). A step is
complete when every rank is done with it; steps before the warm-up are left out.

The frame of a window is built like the run-folder assembler builds
trace.parquet (workloads/run_folder.py `assemble_trace`, without importing the
training side): rank -> (dp_rank, stage) as rank = stage * dp + dp_rank, times
relative to the window's first op.

    buf = StepBuffer(keep_steps=8)
    buf.add(tail.poll()); done = buf.complete_steps(world, status, ended=False)
    df = buf.frame(done[-8:], meta)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_parts import RECORD

_OPTIMIZER = OPTYPE_VALUES.index(OpType.OPTIMIZER.value)
_FORWARD_RECV = OPTYPE_VALUES.index(OpType.FORWARD_RECV.value)
_P2P = [OPTYPE_VALUES.index(t.value) for t in (OpType.FORWARD_SEND, OpType.FORWARD_RECV,
                                                OpType.BACKWARD_SEND, OpType.BACKWARD_RECV)]


class StepBuffer:
    """The records of the latest steps by rank, kept until no window needs them."""

    def __init__(self, keep_steps: int) -> None:
        self.keep_steps = keep_steps
        self.records: dict[int, list[np.ndarray]] = {}
        self.last_step: dict[int, int] = {}
        self.optimizer_steps: dict[int, set[int]] = {}
        self.step_end: dict[int, float] = {}
        """Latest op end of each buffered step over the ranks seen (the trace's clock)."""

    def add(self, new: dict[int, np.ndarray]) -> None:
        """Keep newly read records (PartsTail.poll)."""
        for rank, rec in new.items():
            self.records.setdefault(rank, []).append(rec)
            self.last_step[rank] = int(rec["step"][-1])
            opt = self.optimizer_steps.setdefault(rank, set())
            opt.update(int(s) for s in np.unique(rec["step"][rec["optype"] == _OPTIMIZER]))
            for s in np.unique(rec["step"]):
                end = float(rec["end"][rec["step"] == s].max())
                self.step_end[int(s)] = max(self.step_end.get(int(s), end), end)

    def done_through(self, rank: int, status_step: int, ended: bool) -> int:
        """The last step rank is done with (-1: none)."""
        last = self.last_step.get(rank, -1)
        done = max(last - 1, min(status_step, last))
        if ended and last in self.optimizer_steps.get(rank, ()):
            done = last
        return done

    def complete_through(self, world: int | list[int], status: dict[int, int],
                         ended: bool) -> int:
        """The last step every rank of `world` (a count: ranks 0..world-1; or the ranks that
        count, a lost node's left out) is done with (-1: none)."""
        ranks = range(world) if isinstance(world, int) else world
        if not len(ranks) or any(r not in self.last_step for r in ranks):
            return -1
        return min(self.done_through(r, status.get(r, -1), ended) for r in ranks)

    def steps_through(self, last: int, after: int, warmup: int,
                      ranks: list[int] | None = None) -> list[int]:
        """Buffered steps in (after, last], at or past the warm-up, that every rank (of
        `ranks`, default all buffered) recorded."""
        present = None
        for rank, chunks in self.records.items():
            if ranks is not None and rank not in ranks:
                continue
            steps = set(np.unique(np.concatenate([c["step"] for c in chunks])).tolist())
            present = steps if present is None else present & steps
        return sorted(s for s in present or () if after < s <= last and s >= warmup)

    def prune(self, oldest_needed: int) -> None:
        """Drop buffered records of steps before `oldest_needed`."""
        for rank, chunks in self.records.items():
            kept = [c[c["step"] >= oldest_needed] for c in chunks]
            self.records[rank] = [c for c in kept if len(c)]
        self.step_end = {s: t for s, t in self.step_end.items() if s >= oldest_needed}

    def raw(self, steps: list[int]) -> dict[int, np.ndarray]:
        """The records of `steps` by rank (a rank's chunks are merged into one on the way,
        so the next window concatenates two, not K)."""
        want = np.asarray(steps, dtype=np.int64)
        out = {}
        for rank, chunks in sorted(self.records.items()):
            rec = _cat(chunks)
            self.records[rank] = [rec] if len(rec) else []
            out[rank] = rec[np.isin(rec["step"], want)]
        return out

    def frame(self, steps: list[int], meta: JobMeta) -> pd.DataFrame:
        """The trace (design.md §3 columns) of `steps`, as the run-folder assembler builds it."""
        return records_frame(self.raw(steps), meta.dp_size)


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    """Record chunks as one array: through their bytes, since numpy's concatenate of a
    structured dtype re-derives its fields per call (most of a 1,024-rank window's frame)."""
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return np.zeros(0, dtype=RECORD)
    return np.frombuffer(b"".join(c.tobytes() for c in chunks), dtype=RECORD)


def records_frame(by_rank: dict[int, np.ndarray], dp: int) -> pd.DataFrame:
    """A trace DataFrame from per-rank trace-part records (times from the first op)."""
    parts = [(r, rec) for r, rec in sorted(by_rank.items()) if len(rec)]
    if not parts:
        return pd.DataFrame()
    rec = _cat([p for _, p in parts])
    rank = np.concatenate([np.full(len(p), r, dtype=np.int64) for r, p in parts])
    t0 = rec["start"].min()
    df = pd.DataFrame({
        "rank": rank,
        "dp_rank": rank % dp,
        "stage": rank // dp,
        "step": rec["step"].astype(np.int64),
        "optype": pd.Categorical.from_codes(rec["optype"].astype(np.int64),
                                            categories=list(OPTYPE_VALUES)),
        "start_ts": rec["start"] - t0,
        "duration": np.maximum(rec["end"] - rec["start"], 0.0),
        "seq_id": rec["seq_id"].astype(np.int64),
        "mb_id": rec["mb_id"].astype(np.int64),
        "mc": rec["mc"].astype(np.int64),
        "gmc": rec["gmc"].astype(np.int64),
        "seq_len_sq_sum": rec["seq_len_sq_sum"].astype(np.float64),
    })
    df = df.sort_values(["step", "rank", "start_ts"], kind="stable", ignore_index=True)
    df.attrs["clock_origin"] = float(t0)  # the trace clock's reading at start_ts 0
    return df


def infer_layout(by_rank: dict[int, np.ndarray]) -> tuple[int, int] | str:
    """(dp, pp) from one complete step's records of every rank, or why it cannot be told.

    Without pipeline ops the job is pure DP (pp = 1); with them, the first stage's
    ranks are those that never receive a forward activation, and they are ranks
    0..dp-1 (rank = stage * dp + dp_rank)."""
    world = len(by_rank)
    if sorted(by_rank) != list(range(world)) or world == 0:
        return f"rank files {sorted(by_rank)} are not ranks 0..N-1"
    if not any(np.isin(rec["optype"], _P2P).any() for rec in by_rank.values()):
        return world, 1
    first = [r for r, rec in sorted(by_rank.items()) if not (rec["optype"] == _FORWARD_RECV).any()]
    dp = len(first)
    if dp == 0 or first != list(range(dp)) or world % dp:
        return (f"ranks {first} receive no forward activation, which fits no dp x pp layout "
                f"of {world} ranks; pass --dp and --pp")
    return dp, world // dp
