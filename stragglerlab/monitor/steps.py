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

from stragglerlab.method.grouped import group_value_order
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.schema import OPTYPE_VALUES, OpType
from stragglerlab.trace.trace_parts import RECORD

_OPTIMIZER = OPTYPE_VALUES.index(OpType.OPTIMIZER.value)
_FORWARD_RECV = OPTYPE_VALUES.index(OpType.FORWARD_RECV.value)
_P2P = [OPTYPE_VALUES.index(t.value) for t in (OpType.FORWARD_SEND, OpType.FORWARD_RECV,
                                                OpType.BACKWARD_SEND, OpType.BACKWARD_RECV)]


class StepBuffer:
    """The records of the latest steps by step and rank, kept until no window needs them.

    What a look needs per rank is kept beside the records as they arrive (the steps
    present, their latest op end, the optimizer's steps), so that a look at 1,024 ranks
    walks no rank's records but the new ones; the records are filed by step as they
    arrive (a chunk of one step, as a look per step reads them, is filed whole), so a
    step's records are taken without cutting them out of each rank's buffer."""

    def __init__(self, keep_steps: int) -> None:
        self.keep_steps = keep_steps
        self.by_step: dict[int, dict[int, list[np.ndarray]]] = {}
        """step -> rank -> that rank's records of the step, in the order they came."""
        self.last_step: dict[int, int] = {}
        self.optimizer_steps: dict[int, set[int]] = {}
        self.step_end: dict[int, float] = {}
        """Latest op end of each buffered step over the ranks seen (the trace's clock)."""
        self.present: dict[int, set[int]] = {}
        """The steps of each rank's buffered records."""
        self.blocks: dict[int, dict[str, np.ndarray]] = {}
        """Each step's rows as `frame` builds them (`_step_block`), kept while the step is
        buffered: the window slides by one step, so a look sorts the new step's rows only.
        Records that arrive for a step drop its block."""

    def _file(self, step: int, rank: int, rec: np.ndarray) -> None:
        self.by_step.setdefault(step, {}).setdefault(rank, []).append(rec)
        self.blocks.pop(step, None)  # its block no longer holds all its rows

    def add(self, new: dict[int, np.ndarray]) -> None:
        """Keep newly read records (PartsTail.poll)."""
        for rank, rec in new.items():
            steps = rec["step"]
            ordered = bool(len(steps) < 2 or (steps[1:] >= steps[:-1]).all())
            self.last_step[rank] = int(steps[-1])
            if ordered and steps[0] == steps[-1]:  # one step (a look per step): one segment
                s, end = int(steps[0]), float(rec["end"].max())
                self._file(s, rank, rec)
                self.present.setdefault(rank, set()).add(s)
                opt = self.optimizer_steps.setdefault(rank, set())
                if (rec["optype"] == _OPTIMIZER).any():
                    opt.add(s)
                self.step_end[s] = max(self.step_end.get(s, end), end)
                continue
            if not ordered:  # by step, each step's records in the order they came
                rec = rec[np.argsort(steps, kind="stable")]
                steps = rec["step"]
            end, opt = rec["end"], rec["optype"] == _OPTIMIZER
            # One segment per step: its first row, latest end, and optimizer ops.
            first = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
            present = steps[first].tolist()
            for s, lo, hi in zip(present, first.tolist(), [*first[1:].tolist(), len(rec)]):
                self._file(s, rank, rec[lo:hi])
            self.present.setdefault(rank, set()).update(present)
            self.optimizer_steps.setdefault(rank, set()).update(
                s for s, n in zip(present, np.add.reduceat(opt, first).tolist()) if n)
            for s, e in zip(present, np.maximum.reduceat(end, first).tolist()):
                self.step_end[s] = max(self.step_end.get(s, e), e)

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
        wanted = None if ranks is None else set(ranks)
        present = None
        for rank, steps in self.present.items():
            if wanted is not None and rank not in wanted:
                continue
            present = set(steps) if present is None else present & steps
        return sorted(s for s in present or () if after < s <= last and s >= warmup)

    def prune(self, oldest_needed: int) -> None:
        """Drop buffered records of steps before `oldest_needed`."""
        for held in (self.present, self.optimizer_steps):  # a rank's last step stays
            for rank, steps in held.items():
                held[rank] = {s for s in steps if s >= oldest_needed}
        for name in ("by_step", "step_end", "blocks"):
            setattr(self, name, {s: v for s, v in getattr(self, name).items()
                                 if s >= oldest_needed})

    def raw(self, steps: list[int]) -> dict[int, np.ndarray]:
        """The records of `steps` by rank (every rank seen; a rank's records by step, each
        step's in the order they came)."""
        held = [self.by_step.get(s, {}) for s in sorted(set(steps))]
        return {rank: _cat([c for per_rank in held for c in per_rank.get(rank, ())])
                for rank in sorted(self.last_step)}

    def frame(self, steps: list[int], meta: JobMeta) -> pd.DataFrame:
        """The trace (design.md §3 columns) of `steps`, as the run-folder assembler builds it:
        `records_frame` of their records, from each step's rows sorted once (`blocks`)."""
        if sorted(set(steps)) != list(steps):
            return records_frame(self.raw(steps), meta.dp_size)
        for s in steps:
            if s not in self.blocks:
                self.blocks[s] = _step_block(self.raw([s]))
        blocks = [self.blocks[s] for s in steps]
        cols = {k: np.concatenate([b[k] for b in blocks]) for k in _BLOCK_COLUMNS}
        if not len(cols["rank"]):
            return pd.DataFrame()
        start = cols.pop("start")
        t0 = start.min()
        start_ts = start - t0
        rank, step = cols["rank"], cols["step"]
        # Rows of a (step, rank) are by start, ties in record order; records_frame sorts by
        # start - t0, where the subtraction could round two starts to one value (then record
        # order decides): if it did, that frame is built as records_frame builds it.
        if ((start_ts[1:] == start_ts[:-1]) & (start[1:] != start[:-1])
                & (rank[1:] == rank[:-1]) & (step[1:] == step[:-1])).any():
            return records_frame(self.raw(steps), meta.dp_size)
        return _frame_of({"rank": rank, "dp_rank": rank % meta.dp_size,
                          "stage": rank // meta.dp_size, "step": step,
                          "optype": cols["optype"], "start_ts": start_ts,
                          "duration": cols["duration"], **{k: cols[k] for k in _PLAIN}},
                         float(t0))


_PLAIN = ("seq_id", "mb_id", "mc", "gmc", "seq_len_sq_sum")
"""Record fields that are frame columns as they are (int64, or float64 for the last)."""
_BLOCK_COLUMNS = ("rank", "step", "optype", "start", "duration", *_PLAIN)


def _record_columns(by_rank: dict[int, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Per-rank records as columns (ranks ascending, each rank's records in its order; the
    start as recorded), or None when there is no record."""
    parts = [(r, rec) for r, rec in sorted(by_rank.items()) if len(rec)]
    if not parts:
        return None
    rec = _cat([p for _, p in parts])
    return {
        "rank": np.concatenate([np.full(len(p), r, dtype=np.int64) for r, p in parts]),
        "step": rec["step"].astype(np.int64),
        "optype": rec["optype"].astype(np.int64),
        "start": rec["start"],
        "duration": np.maximum(rec["end"] - rec["start"], 0.0),
        **{k: rec[k].astype(np.float64 if k == "seq_len_sq_sum" else np.int64)
           for k in _PLAIN},
    }


def _step_block(by_rank: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    """One step's record columns, rows by (rank, start), ties in record order."""
    cols = _record_columns(by_rank)
    if cols is None:
        return {k: np.zeros(0, dtype=np.float64 if k in ("start", "duration", "seq_len_sq_sum")
                            else np.int64) for k in _BLOCK_COLUMNS}
    order = group_value_order(cols["rank"], cols["start"])
    return {k: cols[k][order] for k in _BLOCK_COLUMNS}


def _frame_of(cols: dict[str, np.ndarray], t0: float) -> pd.DataFrame:
    """The trace DataFrame of sorted columns (optype as the schema's categorical)."""
    cols["optype"] = pd.Categorical.from_codes(cols["optype"], categories=list(OPTYPE_VALUES))
    df = pd.DataFrame(cols)
    df.attrs["clock_origin"] = t0  # the trace clock's reading at start_ts 0
    return df


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    """Record chunks as one array: through their bytes, since numpy's concatenate of a
    structured dtype re-derives its fields per call (most of a 1,024-rank window's frame)."""
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return np.zeros(0, dtype=RECORD)
    return np.frombuffer(b"".join(c.tobytes() for c in chunks), dtype=RECORD)


def _order(step: np.ndarray, rank: np.ndarray, start: np.ndarray) -> np.ndarray:
    """`np.lexsort((start, rank, step))`, the order of DataFrame.sort_values on the three
    (times are finite, tail-checked)."""
    if not len(step):
        return np.zeros(0, dtype=np.int64)
    lo = int(step.min())
    return group_value_order((step - lo) * (int(rank.max()) + 1) + rank, start)


def records_frame(by_rank: dict[int, np.ndarray], dp: int) -> pd.DataFrame:
    """A trace DataFrame from per-rank trace-part records (times from the first op)."""
    cols = _record_columns(by_rank)
    if cols is None:
        return pd.DataFrame()
    rank, start = cols["rank"], cols.pop("start")
    t0 = start.min()
    cols = {"rank": rank, "dp_rank": rank % dp, "stage": rank // dp, "step": cols["step"],
            "optype": cols["optype"], "start_ts": start - t0, "duration": cols["duration"],
            **{k: cols[k] for k in _PLAIN}}
    # Rows by (step, rank, start_ts), stably, as DataFrame.sort_values orders them (times
    # are finite, tail-checked): sorted once on the arrays, each column taken once.
    order = _order(cols["step"], rank, cols["start_ts"])
    return _frame_of({k: v[order] for k, v in cols.items()}, float(t0))


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
